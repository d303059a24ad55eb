import jax.numpy as jnp
from flax import nnx


class Perceive(nnx.Module):

  def __init__(self, channels: int, *, rngs: nnx.Rngs):
    self.conv = nnx.Conv(channels, 2 * channels, (3, 3), rngs=rngs)

  def __call__(self, state):
    return self.conv(state)


class NCAUpdate(nnx.Module):
  """The update MLP: its layers in an ``nnx.List``."""

  def __init__(self, channels: int, hidden: tuple[int, ...], *,
               rngs: nnx.Rngs):
    sizes = (2 * channels, *hidden, channels)
    self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs)
                            for a, b in zip(sizes[:-1], sizes[1:])])
    self.dropout = nnx.Dropout(0.5, rngs=rngs)

  def __call__(self, state, perception):
    h = perception
    for layer in self.layers[:-1]:
      h = nnx.relu(layer(h))
    return state + self.dropout(jnp.tanh(self.layers[-1](h)))
