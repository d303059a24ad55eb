import jax.numpy as jnp
from flax import nnx

from block import Block


class Model(nnx.Module):

  def __init__(self, rngs):
    self.block = Block(rngs)

  def __call__(self, x):
    h = self.block(x)
    self.sow(nnx.Intermediate, 'h', h)
    return jnp.tanh(h)


def build():
  return Model(nnx.Rngs(0)), jnp.linspace(-1.0, 1.0, 6).reshape(3, 2)


def run():
  model, x = build()
  y, states = nnx.capture(model, nnx.Intermediate)(x)
  return {'y': y, 'h': states['h'].value[0]}
