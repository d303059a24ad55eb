from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-reader: linked to the capture at
    #     flag_variable_use.py, which stays (state-use); both must migrate together
    self.sow(nnx.Intermediate, 'x', x)
    return x


def run(model, x):
  # TODO(migrate_sow): state-use: state['x'] is used as a Variable (no [i] or
  #     .value after it)
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  variable = state['x']
  return variable
