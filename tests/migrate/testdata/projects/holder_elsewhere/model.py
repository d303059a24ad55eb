from flax import nnx

from block import Block


class Model(nnx.Module):
  """Holds two Blocks; this file has no sow and no reader of its own."""

  def __init__(self, rngs):
    self.a = Block(rngs)
    self.b = Block(rngs)

  def __call__(self, x):
    return self.b(self.a(x))
