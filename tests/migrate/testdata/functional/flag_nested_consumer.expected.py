from flax import nnx


class Attention(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.proj = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    weights = nnx.softmax(self.proj(x))
    # TODO(migrate_sow): multi-instance: 'attention_weights' is sown by several
    #     instances in Model (Attention); a free sow would merge them: keep
    #     Module.sow (capture names each by its module path)
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
  # TODO(migrate_sow): no-sow-found: reads layers, which no sow it may reach
  #     makes (a module path, or a library's sow?)
  _, st = nnx.capture(model, nnx.Intermediate)(x)
  return st['layers'][0]['attn']['attention_weights'][0]
