from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'x', x)
    return x


def run(model, x):
  y = model(x)
  print('ran the model')
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates['x'][0]
