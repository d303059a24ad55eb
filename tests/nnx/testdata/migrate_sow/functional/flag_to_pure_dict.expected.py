from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-consumer: a consumer that stays legacy may read it (line 12)
    self.sow(nnx.Intermediate, 'inputs', x)
    return x


def as_dict(model, x):
  # TODO(migrate_sow): to-pure-dict: .to_pure_dict() over intermediates (line 13)
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  # TODO(migrate_sow): to-pure-dict: .to_pure_dict() over intermediates
  return state.to_pure_dict()
