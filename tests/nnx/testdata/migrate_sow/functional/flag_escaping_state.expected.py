from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-consumer: a consumer that stays legacy may read it (line 12)
    self.sow(nnx.Intermediate, 'x', x)
    return x


def run(model, x):
  # TODO(migrate_sow): escaping-state: captured intermediates leave the scope (returned, passed on, stored) (line 13)
  y, state = nnx.capture(model, nnx.Intermediate)(x)
  # TODO(migrate_sow): escaping-state: captured intermediates leave the scope (returned, passed on, stored)
  return y, state
