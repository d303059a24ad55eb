"""An import block with a flax.nnx.sow line already, and relative imports."""
import os

import jax.numpy as jnp
from flax import nnx
from flax.nnx.sow import capture, perturb, sow
from . import helpers


class Model(nnx.Module):

  def __call__(self, x):
    x = perturb(x, name='x')
    sow(2 * x, name='y')
    return x


def run():
  model = Model()
  y, state = capture(model)(jnp.ones(2))
  return y, state['y'][0], os.sep, helpers
