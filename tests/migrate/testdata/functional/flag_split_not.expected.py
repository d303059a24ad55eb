from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    # TODO(migrate_sow): filter-use: nnx.Intermediate used in nnx.split at
    #     flag_split_not.py may select it; delete that filter once the values are
    #     captured
    self.sow(nnx.Intermediate, 'inputs', x)
    return self.linear(x)


def parts(model):
  graphdef, params, intermediates = nnx.split(
      model, nnx.Param, nnx.Intermediate)
  rest = nnx.state(model, nnx.Not(nnx.Intermediate))
  return graphdef, params, intermediates, rest
