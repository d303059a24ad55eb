from flax import nnx
import jax.numpy as jnp


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    self.sow(nnx.Intermediate, 'y', y)
    return y


def assigned(model, x):
  y = model(x)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates['y'][0]


def discarded(model, x):
  _ = model(x)
  # The sown outputs.
  intermediates = nnx.pop(model, nnx.Intermediate)  # popped
  return intermediates['y'].value[0]


def bare(model, x):
  model(x)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return intermediates['y'][0]
