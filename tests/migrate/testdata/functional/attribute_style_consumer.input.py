from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    h = self.linear(x)
    self.sow(nnx.Intermediate, 'logits', h)
    return h


def logits(model, x):
  _, intermediates = nnx.capture(model, nnx.Intermediate)(x)
  first = intermediates.logits[0]
  everything = intermediates.logits.value
  present = 'logits' in intermediates
  return first, everything, present
