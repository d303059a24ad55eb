from flax import nnx


class AttentionWeights(nnx.Intermediate):
  pass


class Attention(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): subclass: sows AttentionWeights, not nnx.Intermediate: use
    #     sow(x, name=..., tag='...') and capture(f, tag=...)
    self.sow(AttentionWeights, 'weights', x)
    return x


def weights(model, x):
  # TODO(migrate_sow): subclass: captures flag_subclass.AttentionWeights: use
  #     capture(f, tag='...') with sow(..., tag='...')
  _, state = nnx.capture(model, AttentionWeights)(x)
  return state['weights'][0]
