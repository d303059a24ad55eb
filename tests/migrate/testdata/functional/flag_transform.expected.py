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
    @nnx.split_rngs(splits=4)
    @nnx.vmap(in_axes=0, out_axes=0)
    def create_block(rngs):
      return Block(rngs)

    self.blocks = create_block(rngs)

  def __call__(self, x):
    @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
    def forward(x, block):
      return block(x)

    return forward(x, self.blocks)


class Cell(nnx.Module):

  def __call__(self, carry, x):
    # TODO(migrate_sow): module-path: Cell is a submodule of Recurrent: its values
    #     are named by their module path, which a free sow loses; keep Module.sow
    #     (capture names it by path)
    self.sow(nnx.Intermediate, 'carry', carry)
    return carry, x


class Recurrent(nnx.Module):

  def __init__(self):
    self.rnn = nnx.RNN(Cell())

  @nnx.remat
  def __call__(self, x):
    # TODO(migrate_sow): transform: runs under nnx.remat: values are carried
    #     through the transform; rewrite by hand
    self.sow(nnx.Intermediate, 'rematerialised', x)
    return self.rnn(x)
