from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-reader: linked to the capture at
    #     flag_to_flat_state.py, which stays (to-flat-state); both must migrate
    #     together
    self.sow(nnx.Intermediate, 'inputs', x)
    return x


def flat(model, x):
  # TODO(migrate_sow): to-flat-state: nnx.to_flat_state() flattens the captured
  #     State
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  return dict(nnx.to_flat_state(state))
