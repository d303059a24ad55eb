"""A growing NCA subclassing a library's system (nca_lib, shaped as CAX),
its own step sowing, as a project built on CAX writes it."""

from flax import nnx
from nca_lib import ComplexSystem, NCAUpdate, Perceive


class GrowingNCA(ComplexSystem):

  def __init__(self, channels: int, *, rngs: nnx.Rngs):
    self.perceive = Perceive(channels, rngs=rngs)
    self.update = NCAUpdate(channels, (8,), rngs=rngs)

  def _step(self, state, sow: bool = False):
    state = self.update(state, self.perceive(state))
    if sow:
      self.sow(nnx.Intermediate, 'state', state)
    return state
