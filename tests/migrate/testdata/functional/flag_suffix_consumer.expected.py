from flax import nnx


class Block(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    # TODO(migrate_sow): legacy-reader: linked to the capture at
    #     flag_suffix_consumer.py, which stays (to-flat-state); both must migrate
    #     together
    self.sow(nnx.Intermediate, 'activations', x)
    return x


def all_activations(model, x):
  # TODO(migrate_sow): to-flat-state: State.flat_state() over the captured
  #     values; read s[name] instead
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  found = []
  for path, value in state.flat_state():
    if path[-1] == 'activations':
      found.append(value)
  return found
