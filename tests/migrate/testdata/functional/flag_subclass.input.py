from flax import nnx


class AttentionWeights(nnx.Intermediate):
  pass


class Attention(nnx.Module):

  def __call__(self, x):
    self.sow(AttentionWeights, 'weights', x)
    return x


def weights(model, x):
  _, state = nnx.capture(model, AttentionWeights)(x)
  return state['weights'][0]
