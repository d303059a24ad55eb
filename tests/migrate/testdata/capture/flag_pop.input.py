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


def pop_of_helper(model):
  return nnx.pop(model, nnx.Intermediate)


def passed_on(model, x):
  step(model, x)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return intermediates


def through_jit(model, x):
  y = nnx.jit(lambda m, v: m(v))(model, x)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates


def in_a_branch(model, x, flag):
  y = model(x)
  if flag:
    intermediates = nnx.pop(model, nnx.Intermediate)
    return y, intermediates
  return y, None


def vmap_after_an_earlier_vmap(model, x):
  axes = nnx.StateAxes({nnx.Intermediate: 0, ...: None})
  nnx.vmap(lambda m, v: m(v), in_axes=(axes, 0))(model, x)
  y = nnx.vmap(lambda m, v: m(v), in_axes=(axes, 0))(model, x)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates


def two_pops(model, x):
  # maxtext: the subclass popped first, then the rest.
  y = model(x)
  scores = nnx.pop(model, Scores)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, scores, intermediates


def through_jax_vmap(model, x):
  y = jax.vmap(lambda m, v: m(v))(model, x)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates
