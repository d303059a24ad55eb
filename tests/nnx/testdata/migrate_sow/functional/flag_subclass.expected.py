from flax import nnx


# TODO(migrate_sow): subclass: Intermediate subclass (AttentionWeights)
class AttentionWeights(nnx.Intermediate):
  pass


class Attention(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): subclass: Intermediate subclass (AttentionWeights)
    # TODO(migrate_sow): legacy-consumer: a consumer that stays legacy may read it (line 16)
    self.sow(AttentionWeights, 'weights', x)
    return x


def weights(model, x):
  # TODO(migrate_sow): subclass: Intermediate subclass (AttentionWeights)
  _, state = nnx.capture(model, AttentionWeights)(x)
  return state['weights'][0]
