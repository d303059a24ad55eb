import flax.nnx as nn


class Model(nn.Module):

  def __init__(self, rngs: nn.Rngs):
    self.linear = nn.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    self.sow(nn.Intermediate, 'y', y)
    return y

  def encode(self, x):
    self.sow(nn.Intermediate, 'x', x)
    return x

  def split_heads(self, x):
    return x[:1], x[1:]


def assigned(model, x):
  y = model(x)
  intermediates = nn.pop(model, nn.Intermediate)
  return y, intermediates['y'][0]


def discarded(model, x):
  _ = model(x)
  # The sown outputs.
  intermediates = nn.pop(model, nn.Intermediate)
  return intermediates['y'].value[0]


def bare(model, x):
  model(x)
  intermediates = nn.pop(model, nn.Intermediate)
  return intermediates


def tuple_target(model, x):
  first, second = model.split_heads(x)
  intermediates = nn.pop(model, nn.Intermediate)
  return first, second, intermediates


def method(model, x):
  z = model.encode(x)
  intermediates = nn.pop(model, nn.Intermediate)
  return z, intermediates['x'][0]
