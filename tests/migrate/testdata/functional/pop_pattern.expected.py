from flax import nnx
from flax.nnx.sow import capture, sow
import jax.numpy as jnp


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    sow(y, name='y')
    return y


def assigned(model, x):
  y, intermediates = capture(model)(x)
  return y, intermediates['y'][0]


def discarded(model, x):
  # The sown outputs.
  _, intermediates = capture(model)(x)  # popped
  return intermediates['y'][0]


def bare(model, x):
  _, intermediates = capture(model)(x)
  return intermediates['y'][0]
