from flax import nnx


class Attention(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.proj = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    weights = nnx.softmax(self.proj(x))
    self.sow(nnx.Intermediate, 'attention_weights', weights)
    return weights @ x


class Layer(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.attn = Attention(rngs)

  def __call__(self, x):
    return self.attn(x)


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.layers = nnx.List([Layer(rngs), Layer(rngs)])

  def __call__(self, x):
    for layer in self.layers:
      x = layer(x)
    return x


def first_attention_map(model, x):
  _, st = nnx.capture(model, nnx.Intermediate)(x)
  return st['layers'][0]['attn']['attention_weights'][0]
