from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-reader: linked to the capture at
    #     flag_unknown_result.py, which stays (unknown-result); both must migrate
    #     together
    self.sow(nnx.Intermediate, 'inputs', x)
    return x


def both(model, x):
  # TODO(migrate_sow): unknown-result: the result is not unpacked as y, s =
  #     nnx.capture(f, T)(x)
  return nnx.capture(model, nnx.Intermediate)(x)
