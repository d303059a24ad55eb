from flax import nnx
from flax.nnx.sow import sow


def record(module: nnx.Module, name_of_value, value):
  del name_of_value
  sow(value, name='recorded')


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    record(self, 'y', y)
    return y
