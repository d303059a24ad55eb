from flax import nnx

ROOT_NAME = 'embedding'


class Embed(nnx.Module):
  TAG = 'token_embedding'

  def __init__(self, rngs: nnx.Rngs):
    self.embed = nnx.Embed(10, 4, rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens)
    self.sow(nnx.Intermediate, self.TAG, x)
    self.sow(nnx.Intermediate, ROOT_NAME, x)
    return x


def run(model, tokens):
  _, state = nnx.capture(model, nnx.Intermediate)(tokens)
  return state['token_embedding'][0], state['embedding'][0]
