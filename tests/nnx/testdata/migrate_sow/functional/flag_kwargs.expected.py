from flax import nnx


class Model(nnx.Module):

  def __call__(self, x, **sow_kwargs):
    # TODO(migrate_sow): kwargs: **kwargs/*args in the call
    # TODO(migrate_sow): legacy-consumer: a consumer that stays legacy may read it (line 12)
    self.sow(nnx.Intermediate, 'x', x, **sow_kwargs)
    return x


def run(model, x, **capture_kwargs):
  # TODO(migrate_sow): kwargs: **kwargs/*args in the call
  _, state = nnx.capture(model, nnx.Intermediate, **capture_kwargs)(x)
  return state['x'][0]
