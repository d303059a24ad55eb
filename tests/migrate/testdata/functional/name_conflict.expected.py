from flax import nnx
from flax.nnx.sow import capture, sow


class Model(nnx.Module):

  def __call__(self, x):
    sow(x, name='x')
    return x


def run(model, x, capture=True):
  if capture:
    _, state = capture(model)(x)
    return state['x'][0]
  return model(x)
