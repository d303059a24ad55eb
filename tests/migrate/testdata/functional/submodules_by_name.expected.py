from flax import nnx


class Block(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    # TODO(migrate_sow): module-path: Block is a submodule of Model: its values are
    #     named by their module path, which a free sow loses; keep Module.sow
    #     (capture names it by path)
    self.sow(nnx.Intermediate, 'block_out', x)
    return x


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.block = Block(rngs)
    self.head = nnx.Linear(4, 1, rngs=rngs)

  def __call__(self, x):
    x = self.block(x)
    # TODO(migrate_sow): legacy-reader: linked to the sow at submodules_by_name.py,
    #     which stays (module-path); both must migrate together
    self.sow(nnx.Intermediate, 'features', x)
    return self.head(x)


def features(model, x):
  # TODO(migrate_sow): legacy-sow: linked to the sow at submodules_by_name.py,
  #     which stays (module-path); both must migrate together
  y, state = nnx.capture(model, nnx.Intermediate)(x)
  return y, state['features'][0]
