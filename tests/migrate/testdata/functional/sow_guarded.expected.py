from flax import nnx
from flax.nnx.sow import capture, sow


class Attention(nnx.Module):

  def __init__(self, rngs: nnx.Rngs, *, return_weights: bool = False):
    self.query = nnx.Linear(8, 8, rngs=rngs)
    self.return_weights = return_weights

  def __call__(self, x):
    q = self.query(x)
    weights = nnx.softmax(q @ x.T)
    if self.return_weights:
      # Only recorded on demand.
      sow(weights, name='attention_weights')
    return weights @ x


def attention_map(model, x):
  _, state = capture(model)(x)
  return state['attention_weights'][0]
