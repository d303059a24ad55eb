from flax import nnx
from flax.nnx.sow import capture, sow


class Counter(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    for _ in range(3):
      x = self.linear(x)
      sow(x, name='last', mode='clobber')
    return x


def last_value(model, x):
  _, state = capture(model)(x)
  return state['last'][0], state['last'][0][0]
