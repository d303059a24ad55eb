from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-reader: linked to the capture at
    #     flag_to_pure_dict.py, which stays (to-pure-dict); both must migrate
    #     together
    self.sow(nnx.Intermediate, 'inputs', x)
    return x


def as_dict(model, x):
  # TODO(migrate_sow): to-pure-dict: State.to_pure_dict() over the captured
  #     values; read s[name] instead
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  return state.to_pure_dict()
