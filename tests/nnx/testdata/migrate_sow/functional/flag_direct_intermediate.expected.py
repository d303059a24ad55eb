from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    # TODO(migrate_sow): direct-intermediate: direct nnx.Intermediate(...) construction
    self.features = nnx.Intermediate(x)
    # TODO(migrate_sow): legacy-consumer: a consumer that stays legacy may read it (line 18)
    self.sow(nnx.Intermediate, 'output', x)
    return x


def run(model, x):
  y = model(x)
  # TODO(migrate_sow): direct-intermediate: direct nnx.Intermediate(...) construction (line 11)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates['output'][0]
