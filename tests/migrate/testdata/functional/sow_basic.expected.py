from flax import nnx
from flax.nnx.sow import capture, sow


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    h = self.linear(x)
    sow(h, name='hidden')
    return nnx.relu(h)


def features(model, x):
  y, state = capture(model)(x)
  return y, state['hidden'][0]
