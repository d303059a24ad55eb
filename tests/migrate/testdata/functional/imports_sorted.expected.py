"""A new flax.nnx.sow line goes where it sorts, not at the end."""
# Third-party imports.
import jax.numpy as jnp
from flax import nnx
from flax.nnx.sow import capture, sow
from optax import adam
from . import helpers


class Model(nnx.Module):

  def __call__(self, x):
    sow(2 * x, name='y')
    return x


def run():
  model = Model()
  y, state = capture(model)(jnp.ones(2))
  return y, state['y'][0], adam, helpers
