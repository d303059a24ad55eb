from flax import nnx


def record(module: nnx.Module, name_of_value, value):
  del name_of_value
  # TODO(migrate_sow): module-path: sown on module, a module passed in: its
  #     values are named by that module's path, which a free sow does not have;
  #     keep Module.sow (capture names it by path)
  module.sow(nnx.Intermediate, 'recorded', value)


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    record(self, 'y', y)
    return y
