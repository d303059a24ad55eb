from flax import nnx


class Block(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    self.sow(nnx.Intermediate, 'block_out', x)
    return x


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.block = Block(rngs)
    self.head = nnx.Linear(4, 1, rngs=rngs)

  def __call__(self, x):
    x = self.block(x)
    self.sow(nnx.Intermediate, 'features', x)
    return self.head(x)


def features(model, x):
  y, state = nnx.capture(model, nnx.Intermediate)(x)
  return y, state['features'][0]
