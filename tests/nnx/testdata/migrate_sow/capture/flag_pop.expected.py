from flax import nnx


# TODO(migrate_sow): subclass: Intermediate subclass (Scores)
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
  # TODO(migrate_sow): pop-not-adjacent: nnx.pop of intermediates is not right after a call on the same object
  # TODO(migrate_sow): subclass: Intermediate subclass (Scores)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return intermediates


def earlier_call(model, x):
  warmup = model(x)
  y = model(x)
  # TODO(migrate_sow): earlier-call: an earlier call on the same object may have left intermediates
  scores = nnx.pop(model, Scores)
  return warmup, y, scores


def with_subclass(model, x):
  y = model(x)
  # TODO(migrate_sow): subclass: Intermediate subclass (Scores)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates
