from flax import nnx


class A(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    self.sow(nnx.Intermediate, 'attn', y)
    return y
