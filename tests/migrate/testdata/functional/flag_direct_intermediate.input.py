from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    self.features = nnx.Intermediate(x)
    self.sow(nnx.Intermediate, 'output', x)
    return x


def run(model, x):
  y = model(x)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates['output'][0]
