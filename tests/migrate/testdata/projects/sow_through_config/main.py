import jax.numpy as jnp
from flax import nnx

from block import Block
from config import SowConfig


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.blocks = nnx.List([Block(SowConfig(), rngs) for _ in range(2)])

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    return x


def build():
  return Model(nnx.Rngs(0)), jnp.linspace(-1.0, 1.0, 6).reshape(3, 2)


def run():
  model = Model(nnx.Rngs(0))
  x = jnp.linspace(-1.0, 1.0, 6).reshape(3, 2)
  y = model(x)
  states = nnx.pop(model, nnx.Intermediate)
  return {'y': y, 'states': states}
