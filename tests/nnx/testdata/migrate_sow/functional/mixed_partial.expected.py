from flax import nnx
from flax.nnx.sow import sow, capture


class Block(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    # TODO(migrate_sow): legacy-consumer: a consumer that stays legacy may read it (line 34)
    self.sow(nnx.Intermediate, 'block_out', x)
    return x


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.block = Block(rngs)

  def __call__(self, x):
    x = self.block(x)
    sow(x, name='model_out')
    return x


class Other(nnx.Module):

  def __call__(self, x):
    sow(x, name='other_out')
    return x


def block_features(model, x):
  # TODO(migrate_sow): nested-consumer: intermediates read by module path; functional names are flat (line 35)
  _, st = nnx.capture(model, nnx.Intermediate)(x)
  # TODO(migrate_sow): nested-consumer: intermediates read by module path; functional names are flat (block/block_out)
  return st['block']['block_out'][0]


def other_features(x):
  other = Other()
  _, st = capture(other)(x)
  return st['other_out'][0]
