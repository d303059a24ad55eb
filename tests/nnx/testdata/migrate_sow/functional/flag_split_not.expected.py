from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    # TODO(migrate_sow): legacy-consumer: a consumer that stays legacy may read it (line 16; line 17)
    self.sow(nnx.Intermediate, 'inputs', x)
    return self.linear(x)


def parts(model):
  # TODO(migrate_sow): filter-use: Intermediate used as a filter (StateAxes, nnx.split, nnx.Not, ...) (nnx.split)
  graphdef, params, intermediates = nnx.split(
      model, nnx.Param, nnx.Intermediate)
  # TODO(migrate_sow): filter-use: Intermediate used as a filter (StateAxes, nnx.split, nnx.Not, ...) (nnx.Not)
  rest = nnx.state(model, nnx.Not(nnx.Intermediate))
  return graphdef, params, intermediates, rest
