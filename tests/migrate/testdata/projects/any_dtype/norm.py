from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx


class Norm(nnx.Module):

  def __init__(self, size: int, *, dtype: Any = jnp.float32):
    self.scale = nnx.Param(jnp.linspace(0.5, 1.5, size))
    self.dtype = dtype
    self.bias = None

  def __call__(self, x):
    y = (x * self.scale[None, :]).astype(self.dtype)
    self.sow(nnx.Intermediate, 'normed', y)
    return y


class Stack(nnx.Module):
  """Holds an nnx.List and runs it under jax.vmap; no Model holds one."""

  def __init__(self, rngs: nnx.Rngs):
    self.layers = nnx.List([nnx.Linear(2, 2, rngs=rngs)])

  def __call__(self, x):
    return jax.vmap(self.layers[0])(x)
