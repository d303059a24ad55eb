from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    if not self.sow(nnx.Intermediate, 'x', x):
      print('not captured')
    return x
