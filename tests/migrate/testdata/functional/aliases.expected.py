import flax
import flax.nnx as nn
from flax.nnx import Intermediate, capture
from flax.nnx.sow import capture as functional_capture, sow


class C(nn.Module):

  def __call__(self, x):
    # Three spellings of one type: each is nnx.Intermediate.
    sow(x, name='a')
    sow(2 * x, name='b')
    sow(x, name='c')
    return x


def run(model, x):
  _, s = functional_capture(model)(x)
  return s['c'][0]
