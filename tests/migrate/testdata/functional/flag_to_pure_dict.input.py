from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'inputs', x)
    return x


def as_dict(model, x):
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  return state.to_pure_dict()
