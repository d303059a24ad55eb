import flax
import flax.nnx as nn
from flax.nnx import capture
from flax.nnx.sow import capture as functional_capture, sow


class A(nn.Module):

  def __call__(self, x):
    sow(x, name='a')
    return x


class B(nn.Module):

  def __call__(self, x):
    sow(x, name='b')
    return x


class C(nn.Module):

  def __init__(self):
    self.a = A()
    self.b = B()

  def __call__(self, x):
    sow(x, name='c')
    return self.b(self.a(x))


def run(model, x):
  _, s = functional_capture(model)(x)
  return s['c'][0]
