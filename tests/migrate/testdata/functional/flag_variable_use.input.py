from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'x', x)
    return x


def run(model, x):
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  variable = state['x']
  return variable
