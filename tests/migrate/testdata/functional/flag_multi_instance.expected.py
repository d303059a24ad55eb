from flax import nnx


class Block(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    # TODO(migrate_sow): multi-instance: 'block_out' is sown by several instances
    #     in Model (Block); a free sow would merge them: keep Module.sow (capture
    #     names each by its module path)
    self.sow(nnx.Intermediate, 'block_out', x)
    return x


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.blocks = nnx.List([Block(rngs) for _ in range(3)])

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    return x
