from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): sow-result-used: the return value of .sow() is used
    if not self.sow(nnx.Intermediate, 'x', x):
      print('not captured')
    return x
