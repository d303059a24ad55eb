from flax import nnx


class Scores(nnx.Intermediate):
  pass


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    # TODO(migrate_sow): legacy-reader: may be read by nnx.pop at flag_pop.py and 8
    #     more, which stays (pop-not-adjacent); the model runs outside nnx.capture
    self.sow(nnx.Intermediate, 'x', x)
    # TODO(migrate_sow): legacy-reader: may be read by nnx.pop at flag_pop.py and
    #     10 more, which stays (pop-not-adjacent); the model runs outside
    #     nnx.capture
    self.sow(Scores, 'scores', x)
    return x


def not_adjacent(model, x):
  y = model(x)
  print(y)
  # TODO(migrate_sow): pop-not-adjacent: model is called at line 21, with 1
  #     statement between the call and nnx.pop: capture by hand
  intermediates = nnx.pop(model, nnx.Intermediate)
  return intermediates


def earlier_call(model, x):
  warmup = model(x)
  y = model(x)
  # TODO(migrate_sow): earlier-call: model(...) at line 28 may sow; what it sowed
  #     would be popped too
  scores = nnx.pop(model, Scores)
  return warmup, y, scores


def with_subclass(model, x):
  y = model(x)
  # TODO(migrate_sow): subclass: it may pop Scores sown at flag_pop.py, a
  #     subclass of Intermediate: nnx.capture of the exact type would not collect
  #     it
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates


def pop_of_helper(model):
  # TODO(migrate_sow): pop-not-adjacent: nnx.pop is what pop_of_helper() returns;
  #     model runs in its callers: capture the call there
  return nnx.pop(model, nnx.Intermediate)


def passed_on(model, x):
  step(model, x)
  # TODO(migrate_sow): pop-not-adjacent: model is passed to step() at line 45,
  #     which may call it or read what it sowed: capture by hand
  intermediates = nnx.pop(model, nnx.Intermediate)
  return intermediates


def through_jit(model, x):
  y = nnx.jit(lambda m, v: m(v))(model, x)
  # TODO(migrate_sow): pop-not-adjacent: model is called through nnx.jit at line
  #     51; the codemod captures through nnx.vmap and nnx.split_rngs only:
  #     rewrite by hand
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates


def in_a_branch(model, x, flag):
  y = model(x)
  if flag:
    # TODO(migrate_sow): pop-not-adjacent: model is called at line 57 and nnx.pop
    #     is in the block after it: capture by hand
    intermediates = nnx.pop(model, nnx.Intermediate)
    return y, intermediates
  return y, None


def vmap_after_an_earlier_vmap(model, x):
  axes = nnx.StateAxes({nnx.Intermediate: 0, ...: None})
  nnx.vmap(lambda m, v: m(v), in_axes=(axes, 0))(model, x)
  y = nnx.vmap(lambda m, v: m(v), in_axes=(axes, 0))(model, x)
  # TODO(migrate_sow): earlier-call: model through nnx.vmap at line 66 may sow;
  #     what it sowed would be popped too
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates


def two_pops(model, x):
  # maxtext: the subclass popped first, then the rest.
  y = model(x)
  # TODO(migrate_sow): later-pop: model is popped again at line 76; inside
  #     nnx.capture the values of other types would not be left for it
  scores = nnx.pop(model, Scores)
  # TODO(migrate_sow): pop-not-adjacent: model is called at line 74, with 1
  #     statement between the call and nnx.pop, 1 of them nnx.pop taking their
  #     types (and subclasses) first: capture by hand
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, scores, intermediates


def through_jax_vmap(model, x):
  y = jax.vmap(lambda m, v: m(v))(model, x)
  # TODO(migrate_sow): pop-not-adjacent: model is called through jax.vmap at line
  #     81; the codemod captures through nnx.vmap and nnx.split_rngs only:
  #     rewrite by hand
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates
