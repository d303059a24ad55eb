from flax import nnx
from flax.nnx.sow import capture, sow


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    h = self.linear(x)
    sow(h, name='logits')
    return h


def logits(model, x):
  _, intermediates = capture(model)(x)
  first = intermediates['logits'][0]
  everything = intermediates['logits']
  present = 'logits' in intermediates
  return first, everything, present
