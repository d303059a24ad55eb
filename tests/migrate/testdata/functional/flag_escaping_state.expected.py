from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-reader: linked to the capture at
    #     flag_escaping_state.py, which stays (escaping-state); both must migrate
    #     together
    self.sow(nnx.Intermediate, 'x', x)
    return x


def run(model, x):
  # TODO(migrate_sow): escaping-state: the captured State is used as a whole in
  #     state
  y, state = nnx.capture(model, nnx.Intermediate)(x)
  return y, state
