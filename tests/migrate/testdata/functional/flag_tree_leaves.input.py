import jax
from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'inputs', x)
    return x


def leaves(model, x):
  _, intermediates = nnx.capture(model, nnx.Intermediate)(x)
  return jax.tree.leaves(intermediates)
