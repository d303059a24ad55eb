from flax import nnx


class Block(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    # TODO(migrate_sow): legacy-consumer: a consumer that stays legacy may read it (line 16)
    self.sow(nnx.Intermediate, 'activations', x)
    return x


def all_activations(model, x):
  # TODO(migrate_sow): to-flat-state: nnx.to_flat_state over intermediates (line 18)
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  found = []
  # TODO(migrate_sow): to-flat-state: nnx.to_flat_state over intermediates
  for path, value in state.flat_state():
    if path[-1] == 'activations':
      found.append(value)
  return found
