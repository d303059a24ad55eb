"""An attention module held once by a block, the block made in a loop."""

import jax.numpy as jnp
from flax import nnx


class Attention(nnx.Module):

  def __init__(self, dim: int, *, rngs: nnx.Rngs):
    self.query = nnx.Linear(dim, dim, rngs=rngs)

  def __call__(self, x):
    w = nnx.softmax(self.query(x) @ x.T / jnp.sqrt(x.shape[-1]))
    # TODO(migrate_sow): multi-instance: 'attn_weights' is sown by several
    #     instances in Transformer (Attention); a free sow would merge them: keep
    #     Module.sow (capture names each by its module path)
    self.sow(nnx.Intermediate, 'attn_weights', w)
    return w @ x


class Block(nnx.Module):

  def __init__(self, dim: int, *, rngs: nnx.Rngs):
    self.attn = Attention(dim, rngs=rngs)
    self.mlp = nnx.Linear(dim, dim, rngs=rngs)

  def __call__(self, x):
    return x + self.mlp(self.attn(x))


class Transformer(nnx.Module):

  def __init__(self, dim: int, depth: int, *, rngs: nnx.Rngs):
    self.blocks = nnx.List([Block(dim, rngs=rngs) for _ in range(depth)])

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    return x


def attention_maps(model: Transformer, x):
  y = model(x)
  # TODO(migrate_sow): escaping-state: the captured State is used as a whole in
  #     maps
  maps = nnx.pop(model, nnx.Intermediate)
  return y, maps
