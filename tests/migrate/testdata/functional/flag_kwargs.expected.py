from flax import nnx


class Model(nnx.Module):

  def __call__(self, x, **sow_kwargs):
    # TODO(migrate_sow): kwargs: *args/**kwargs in .sow() hide its arguments
    self.sow(nnx.Intermediate, 'x', x, **sow_kwargs)
    return x


def run(model, x, **capture_kwargs):
  _, state = nnx.capture(model, nnx.Intermediate, **capture_kwargs)(x)
  return state['x'][0]
