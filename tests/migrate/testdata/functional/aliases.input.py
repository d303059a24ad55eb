import flax
import flax.nnx as nn
from flax.nnx import Intermediate, capture


class A(nn.Module):

  def __call__(self, x):
    self.sow(nn.Intermediate, 'a', x)
    return x


class B(nn.Module):

  def __call__(self, x):
    self.sow(flax.nnx.Intermediate, 'b', x)
    return x


class C(nn.Module):

  def __init__(self):
    self.a = A()
    self.b = B()

  def __call__(self, x):
    self.sow(Intermediate, 'c', x)
    return self.b(self.a(x))


def run(model, x):
  _, s = capture(model, Intermediate)(x)
  return s['c'][0]
