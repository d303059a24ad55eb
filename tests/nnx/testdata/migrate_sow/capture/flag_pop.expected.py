from flax import nnx


class Scores(nnx.Intermediate):
  pass


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    # TODO(migrate_sow): legacy-reader: may be read by nnx.pop at flag_pop.py and 2 more, which stays (pop-not-adjacent); the model runs outside nnx.capture
    self.sow(nnx.Intermediate, 'x', x)
    # TODO(migrate_sow): legacy-reader: may be read by nnx.pop at flag_pop.py and 2 more, which stays (pop-not-adjacent); the model runs outside nnx.capture
    self.sow(Scores, 'scores', x)
    return x


def not_adjacent(model, x):
  y = model(x)
  print(y)
  # TODO(migrate_sow): pop-not-adjacent: the statement before nnx.pop is not a single call of model
  intermediates = nnx.pop(model, nnx.Intermediate)
  return intermediates


def earlier_call(model, x):
  warmup = model(x)
  y = model(x)
  # TODO(migrate_sow): earlier-call: model is also called at line 28; its intermediates would be popped too
  scores = nnx.pop(model, Scores)
  return warmup, y, scores


def with_subclass(model, x):
  y = model(x)
  # TODO(migrate_sow): subclass: it may pop Scores sown at flag_pop.py, a subclass of Intermediate: nnx.capture of the exact type would not collect it
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates
