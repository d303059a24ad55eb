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

  def __call__(self, x):
    x = self.block(x)
    # TODO(migrate_sow): legacy-reader: linked to the sow at mixed_partial.py,
    #     which stays (module-path); both must migrate together
    self.sow(nnx.Intermediate, 'model_out', x)
    return x


class Other(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-reader: linked to the sow at mixed_partial.py,
    #     which stays (module-path); both must migrate together
    self.sow(nnx.Intermediate, 'other_out', x)
    return x


def block_features(model, x):
  # TODO(migrate_sow): nested-consumer: st['block']['block_out'] reads by module
  #     path; functional names are flat
  _, st = nnx.capture(model, nnx.Intermediate)(x)
  return st['block']['block_out'][0]


def other_features(x):
  other = Other()
  # TODO(migrate_sow): legacy-sow: linked to the sow at mixed_partial.py, which
  #     stays (module-path); both must migrate together
  _, st = nnx.capture(other, nnx.Intermediate)(x)
  return st['other_out'][0]
