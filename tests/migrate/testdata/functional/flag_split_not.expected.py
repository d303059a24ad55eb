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
  # TODO(migrate_sow): filter-use: nnx.Intermediate used in nnx.split (it may
  #     select the sow at flag_split_not.py) selects the values sown on the
  #     model; they are there only after a call outside nnx.capture (and never
  #     with Hijax Variables): capture the call and read the State it returns
  graphdef, params, intermediates = nnx.split(
      model, nnx.Param, nnx.Intermediate)
  # TODO(migrate_sow): filter-use: nnx.Intermediate used in nnx.Not (it may
  #     select the sow at flag_split_not.py) selects the values sown on the
  #     model; they are there only after a call outside nnx.capture (and never
  #     with Hijax Variables): capture the call and read the State it returns
  rest = nnx.state(model, nnx.Not(nnx.Intermediate))
  return graphdef, params, intermediates, rest
