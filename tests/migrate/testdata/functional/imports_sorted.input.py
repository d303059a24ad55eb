"""A new flax.nnx.sow line goes where it sorts, not at the end."""
# Third-party imports.
import jax.numpy as jnp
from flax import nnx
from optax import adam
from . import helpers


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'y', 2 * x)
    return x


def run():
  model = Model()
  y = model(jnp.ones(2))
  state = nnx.pop(model, nnx.Intermediate)
  return y, state['y'][0], adam, helpers
