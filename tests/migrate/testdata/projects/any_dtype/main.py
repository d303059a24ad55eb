import jax.numpy as jnp
from flax import nnx

from norm import Norm


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)
    self.norm = Norm(2)

  def __call__(self, x):
    return self.norm(self.linear(x))


def build():
  return Model(nnx.Rngs(0)), jnp.linspace(-1.0, 1.0, 6).reshape(3, 2)


def run():
  model = Model(nnx.Rngs(0))
  x = jnp.linspace(-1.0, 1.0, 6).reshape(3, 2)
  y = model(x)
  states = nnx.pop(model, nnx.Intermediate)
  return {'y': y, 'states': states}
