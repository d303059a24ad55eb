from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): legacy-reader: linked to the pop at
    #     flag_pop_not_adjacent.py, which stays (pop-not-adjacent); both must
    #     migrate together
    self.sow(nnx.Intermediate, 'x', x)
    return x


def run(model, x):
  y = model(x)
  print('ran the model')
  # TODO(migrate_sow): pop-not-adjacent: model is called at line 12, with 1
  #     statement between the call and nnx.pop: capture by hand
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates['x'][0]
