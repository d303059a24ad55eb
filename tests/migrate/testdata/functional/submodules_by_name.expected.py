from flax import nnx
from flax.nnx.sow import capture, sow


class Block(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    sow(x, name='block_out')
    return x


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.block = Block(rngs)
    self.head = nnx.Linear(4, 1, rngs=rngs)

  def __call__(self, x):
    x = self.block(x)
    sow(x, name='features')
    return self.head(x)


def features(model, x):
  y, state = capture(model)(x)
  return y, state['features'][0]
