import jax.numpy as jnp
from flax import nnx


class Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    # A submodule's perturb stays Module.perturb (module-path), and
    # nnx.capture of nnx.Intermediate does not read it.
    return self.perturb('grad_out', self.linear(x))


class Model(nnx.Module):

  def __init__(self, rngs):
    self.block = Block(rngs)

  def __call__(self, x):
    h = self.block(x)
    self.sow(nnx.Intermediate, 'h', h)
    return jnp.tanh(h)


def features(model: Model, x):
  y, state = nnx.capture(model, nnx.Intermediate)(x)
  return y, state['h'].value[0]
