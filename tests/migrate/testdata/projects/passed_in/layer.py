from flax import nnx


class DecoderLayer(nnx.Module):
  """Sows, and holds a module passed in (an A, in main.py)."""

  def __init__(self, attn, rngs):
    self.attn = attn
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    y = self.linear(self.attn(x))
    self.sow(nnx.Intermediate, 'h', y)
    return y
