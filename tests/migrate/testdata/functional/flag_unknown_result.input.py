from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'inputs', x)
    return x


def both(model, x):
  return nnx.capture(model, nnx.Intermediate)(x)
