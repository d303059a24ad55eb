import typing as tp

import jax
import jax.numpy as jnp
from flax import nnx


class System(nnx.Module):
  """CAX's shape: __call__ scans _step, which sows only when asked."""

  def __init__(self, rngs: nnx.Rngs, size: int = 2,
               activation: tp.Callable[[jax.Array], jax.Array] = jnp.tanh):
    # Plain values, not modules passed in: the classes held stay known.
    self.size = size
    self.activation = activation
    self.linear = nnx.Linear(size, size, rngs=rngs)

  def _step(self, x, *, sow: bool = False):
    y = self.activation(self.linear(x))
    if sow:
      self.sow(nnx.Intermediate, 'state', y)
    return y

  def __call__(self, x, *, num_steps: int = 1, sow: bool = False):
    axes = nnx.StateAxes({nnx.Intermediate: 0, ...: nnx.Carry})
    return nnx.scan(
        lambda m, x: m._step(x, sow=sow),
        in_axes=(axes, nnx.Carry),
        out_axes=nnx.Carry,
        length=num_steps,
    )(self, x)


def features(model, x):
  # A submodule called on its own: no sow reaches the model.
  def scale(v: jax.Array) -> jax.Array:
    return 2 * v

  return scale(model.linear(x))


def loss_fn(model, x):
  # `sow` left False: the steps sow nothing.
  y = model(x, num_steps=2)
  return jnp.mean(y ** 2)


@nnx.jit
def train_step(model, x):
  return nnx.value_and_grad(loss_fn)(model, x)


def run(model: System, x):
  loss, _ = train_step(model, x)
  f = jax.vmap(features, in_axes=(None, 0))(model, x)
  y, intermediates = nnx.capture(model, nnx.Intermediate)(x, num_steps=3, sow=True)
  return loss, f, y, intermediates['state'][0]
