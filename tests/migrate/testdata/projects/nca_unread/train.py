"""The rollout takes the system unannotated: its class is not known here."""

from flax import nnx


def sow_rollout(cs, state, num_steps: int):
  state_axes = nnx.StateAxes({nnx.RngState: 0, nnx.Intermediate: 0,
                              ...: None})
  final = nnx.split_rngs(splits=state.shape[0])(
      nnx.vmap(lambda cs, s: cs(s, num_steps=num_steps, sow=True),
               in_axes=(state_axes, 0))
  )(cs, state)
  states = nnx.pop(cs, nnx.Intermediate)
  return final, states['state'][0]
