import jax
from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-consumer: a consumer that stays legacy may read it (line 13)
    self.sow(nnx.Intermediate, 'inputs', x)
    return x


def leaves(model, x):
  # TODO(migrate_sow): tree-leaves: jax.tree functions over intermediates (line 14)
  _, intermediates = nnx.capture(model, nnx.Intermediate)(x)
  # TODO(migrate_sow): tree-leaves: jax.tree functions over intermediates
  return jax.tree.leaves(intermediates)
