from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'inputs', x)
    return x


def flat(model, x):
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  return dict(nnx.to_flat_state(state))
