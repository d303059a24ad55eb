import jax.numpy as jnp
from flax import nnx

from nca import GrowingNCA
from train import sow_rollout


def build():
  cs = GrowingNCA(3, rngs=nnx.Rngs(0, dropout=1))
  state = jnp.linspace(0.0, 1.0, 2 * 4 * 4 * 3).reshape(2, 4, 4, 3)
  return cs, state


def run():
  cs, state = build()
  return sow_rollout(cs, state, 3)
