from flax import nnx


class Scores(nnx.Intermediate):
  pass


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    self.sow(nnx.Intermediate, 'x', x)
    self.sow(Scores, 'scores', x)
    return x


def not_adjacent(model, x):
  y = model(x)
  print(y)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return intermediates


def earlier_call(model, x):
  warmup = model(x)
  y = model(x)
  scores = nnx.pop(model, Scores)
  return warmup, y, scores


def with_subclass(model, x):
  y = model(x)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates
