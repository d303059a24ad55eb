import flax
import flax.nnx as nn
from flax.nnx import Intermediate, capture


class C(nn.Module):

  def __call__(self, x):
    # Three spellings of one type: each is nnx.Intermediate.
    self.sow(nn.Intermediate, 'a', x)
    self.sow(flax.nnx.Intermediate, 'b', 2 * x)
    self.sow(Intermediate, 'c', x)
    return x


def run(model, x):
  _, s = capture(model, Intermediate)(x)
  return s['c'][0]
