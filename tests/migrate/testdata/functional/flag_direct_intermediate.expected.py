from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    self.features = nnx.Intermediate(x)
    # TODO(migrate_sow): legacy-reader: linked to the pop at
    #     flag_direct_intermediate.py, which stays (direct-intermediate); both must
    #     migrate together
    self.sow(nnx.Intermediate, 'output', x)
    return x


def run(model, x):
  y = model(x)
  # TODO(migrate_sow): direct-intermediate: it may pop the Variable created at
  #     flag_direct_intermediate.py, which nnx.capture does not collect
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates['output'][0]
