from flax import nnx
from flax.nnx.sow import capture, sow

ROOT_NAME = 'embedding'


class Embed(nnx.Module):
  TAG = 'token_embedding'

  def __init__(self, rngs: nnx.Rngs):
    self.embed = nnx.Embed(10, 4, rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens)
    sow(x, name=self.TAG)
    sow(x, name=ROOT_NAME)
    return x


def run(model, tokens):
  _, state = capture(model)(tokens)
  return state['token_embedding'][0], state['embedding'][0]
