from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): sow-result-used: the bool returned by .sow() is used; the
    #     functional sow returns the value
    if not self.sow(nnx.Intermediate, 'x', x):
      print('not captured')
    return x
