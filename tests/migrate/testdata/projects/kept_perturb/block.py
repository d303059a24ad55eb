from flax import nnx


class Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    return self.perturb('grad_out', y)
