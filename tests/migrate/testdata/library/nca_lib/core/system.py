from flax import nnx


class ComplexSystem(nnx.Module):
  """Runs ``_step`` ``num_steps`` times under ``nnx.scan``."""

  def _step(self, state, sow: bool = False):
    state = self.update(state, self.perceive(state))
    if sow:
      self.sow(nnx.Intermediate, 'state', state)
    return state

  def __call__(self, state, *, num_steps: int = 1, sow: bool = False):
    # The sown values are stacked along the steps; the rest is carried.
    state_axes = nnx.StateAxes({nnx.Intermediate: 0, ...: nnx.Carry})
    return nnx.scan(lambda cs, state: cs._step(state, sow=sow),
                    in_axes=(state_axes, nnx.Carry), out_axes=nnx.Carry,
                    length=num_steps)(self, state)
