from flax import nnx


class Counter(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    for _ in range(3):
      x = self.linear(x)
      self.sow(nnx.Intermediate, 'last', x, reduce_fn=lambda prev, new: new)
    return x


def last_value(model, x):
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  return state['last'].value, state['last'][0]
