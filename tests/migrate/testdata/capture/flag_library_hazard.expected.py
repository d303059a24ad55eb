"""A growing NCA built on a library's modules (nca_lib, shaped as CAX)."""

import jax.numpy as jnp
from flax import nnx
from nca_lib import ComplexSystem, NCAUpdate, Perceive


class GrowingNCA(ComplexSystem):

  def __init__(self, channels: int, *, rngs: nnx.Rngs):
    self.perceive = Perceive(channels, rngs=rngs)
    self.update = NCAUpdate(channels, (8,), rngs=rngs)


def rollout(cs: GrowingNCA, state, num_steps: int):
  state_axes = nnx.StateAxes({nnx.RngState: 0, nnx.Intermediate: 0,
                              ...: None})
  final = nnx.split_rngs(splits=state.shape[0])(
      nnx.vmap(lambda cs, s: cs(s, num_steps=num_steps, sow=True),
               in_axes=(state_axes, 0))
  )(cs, state)
  # TODO(migrate_sow): capture-hazard: NCAUpdate holds an nnx.List and the model
  #     runs under nnx.vmap: Flax 0.12.8's nnx.capture fails there (its
  #     __captures__ key cannot be sorted with the list's integer keys)
  states = nnx.pop(cs, nnx.Intermediate)
  return final, states


def make(batch: int = 2):
  cs = GrowingNCA(3, rngs=nnx.Rngs(0, dropout=1))
  state = jnp.linspace(0.0, 1.0, batch * 4 * 4 * 3).reshape(batch, 4, 4, 3)
  return cs, state
