from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'x', x)
    return x


def run(model, x, capture=True):
  if capture:
    _, state = nnx.capture(model, nnx.Intermediate)(x)
    return state['x'][0]
  return model(x)
