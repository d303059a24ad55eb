from flax import nnx
from flax.nnx.sow import sow


class Model(nnx.Module):

  def __call__(self, x):
    sow(x, name='inputs')
    sow(
        2 * x, name='doubled')
    return x
