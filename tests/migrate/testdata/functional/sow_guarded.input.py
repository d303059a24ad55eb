from flax import nnx


class Attention(nnx.Module):

  def __init__(self, rngs: nnx.Rngs, *, return_weights: bool = False):
    self.query = nnx.Linear(8, 8, rngs=rngs)
    self.return_weights = return_weights

  def __call__(self, x):
    q = self.query(x)
    weights = nnx.softmax(q @ x.T)
    if self.return_weights:
      # Only recorded on demand.
      self.sow(nnx.Intermediate, 'attention_weights', weights)
    return weights @ x


def attention_map(model, x):
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  return state['attention_weights'].value[0]
