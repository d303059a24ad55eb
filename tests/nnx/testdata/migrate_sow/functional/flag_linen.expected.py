import flax.linen as nn


class Model(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.Dense(4)(x)
    # TODO(migrate_sow): linen-sow: Linen-style sow with a collection name string (intermediates)
    self.sow('intermediates', 'features', x)
    return x


def run(variables, x):
  # TODO(migrate_sow): capture-intermediates: Linen capture_intermediates=
  return Model().apply(variables, x, capture_intermediates=True)
