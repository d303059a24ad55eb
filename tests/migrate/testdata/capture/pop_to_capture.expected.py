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
  y, intermediates = nn.capture(model, nn.Intermediate)(x)
  return y, intermediates['y'][0]


def discarded(model, x):
  # The sown outputs.
  _, intermediates = nn.capture(model, nn.Intermediate)(x)
  return intermediates['y'].value[0]


def bare(model, x):
  _, intermediates = nn.capture(model, nn.Intermediate)(x)
  return intermediates


def tuple_target(model, x):
  (first, second), intermediates = nn.capture(model.split_heads, nn.Intermediate)(x)
  return first, second, intermediates


def method(model, x):
  z, intermediates = nn.capture(model.encode, nn.Intermediate)(x)
  return z, intermediates['x'][0]
