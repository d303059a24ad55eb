from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def features(self, x):
    return self.linear(x)

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'inputs', x)
    return self.features(x)


def run(model, x):
  _, state = nnx.capture(model, nnx.Intermediate,
                         method_outputs=nnx.Intermediate)(x)
  return state['features'][0], state['inputs'][0]
