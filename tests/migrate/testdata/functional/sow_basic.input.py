from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    h = self.linear(x)
    self.sow(nnx.Intermediate, 'hidden', h)
    return nnx.relu(h)


def features(model, x):
  y, state = nnx.capture(model, nnx.Intermediate)(x)
  return y, state['hidden'][0]
