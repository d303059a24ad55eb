import dataclasses

from flax import nnx


@dataclasses.dataclass(frozen=True)
class SowConfig:
  hidden: bool = True

  def maybe_sow(self, x, module: nnx.Module):
    if self.hidden:
      module.sow(nnx.Intermediate, 'hidden', x)
