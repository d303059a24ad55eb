from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-consumer: a consumer that stays legacy may read it (line 14)
    self.sow(nnx.Intermediate, 'x', x)
    return x


def run(model, x):
  y = model(x)
  print('ran the model')
  # TODO(migrate_sow): pop-not-adjacent: nnx.pop of intermediates is not right after a call on the same object
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates['x'][0]
