import jax
from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-reader: linked to the capture at
    #     flag_tree_leaves.py, which stays (tree-leaves); both must migrate
    #     together
    self.sow(nnx.Intermediate, 'inputs', x)
    return x


def leaves(model, x):
  # TODO(migrate_sow): tree-leaves: jax.tree.leaves() over the captured State
  _, intermediates = nnx.capture(model, nnx.Intermediate)(x)
  return jax.tree.leaves(intermediates)
