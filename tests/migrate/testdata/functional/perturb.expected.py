from flax import nnx
from flax.nnx.sow import perturb


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear1 = nnx.Linear(2, 3, rngs=rngs)
    self.linear2 = nnx.Linear(3, 1, rngs=rngs)

  def __call__(self, x):
    x = self.linear1(x)
    x = perturb(x, name='hidden')
    return self.linear2(x)
