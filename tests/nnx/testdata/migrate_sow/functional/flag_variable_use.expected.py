from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-consumer: a consumer that stays legacy may read it (line 12)
    self.sow(nnx.Intermediate, 'x', x)
    return x


def run(model, x):
  # TODO(migrate_sow): variable-use: a sown value is used as a Variable (needs [i] or .value to rewrite) (line 13)
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  # TODO(migrate_sow): variable-use: a sown value is used as a Variable (needs [i] or .value to rewrite) (x)
  variable = state['x']
  return variable
