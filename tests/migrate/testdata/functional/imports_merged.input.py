"""An import block with a flax.nnx.sow line already, and relative imports."""
import os

import jax.numpy as jnp
from flax import nnx
from flax.nnx.sow import perturb
from . import helpers


class Model(nnx.Module):

  def __call__(self, x):
    x = perturb(x, name='x')
    self.sow(nnx.Intermediate, 'y', 2 * x)
    return x


def run():
  model = Model()
  y = model(jnp.ones(2))
  state = nnx.pop(model, nnx.Intermediate)
  return y, state['y'][0], os.sep, helpers
