import jax.numpy as jnp
from flax import nnx

from attn import A
from layer import DecoderLayer


def build():
  rngs = nnx.Rngs(0)
  return DecoderLayer(A(rngs), rngs), jnp.linspace(-1.0, 1.0, 6).reshape(3, 2)


def run():
  model, x = build()
  return {'y': model(x)}
