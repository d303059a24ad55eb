from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.layers = nnx.List([nnx.Linear(2, 2, rngs=rngs) for _ in range(2)])

  def __call__(self, x):
    for i, layer in enumerate(self.layers):
      x = layer(x)
      # TODO(migrate_sow): nonliteral-name: the name f'layer_{i}' is computed;
      #     functional names must be spelled out, e.g. a tuple
      self.sow(nnx.Intermediate, f'layer_{i}', x)
    return x
