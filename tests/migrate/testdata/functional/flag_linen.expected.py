import flax.linen as nn


class Model(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.Dense(4)(x)
    self.sow('intermediates', 'features', x)
    return x


def run(variables, x):
  return Model().apply(variables, x, capture_intermediates=True)
