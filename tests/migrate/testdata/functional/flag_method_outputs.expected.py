from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def features(self, x):
    return self.linear(x)

  def __call__(self, x):
    # TODO(migrate_sow): legacy-reader: linked to the capture at
    #     flag_method_outputs.py, which stays (method-outputs); both must migrate
    #     together
    self.sow(nnx.Intermediate, 'inputs', x)
    return self.features(x)


def run(model, x):
  # TODO(migrate_sow): method-outputs: method_outputs= sows every method output
  #     implicitly; add explicit sows in the methods you need
  _, state = nnx.capture(model, nnx.Intermediate,
                         method_outputs=nnx.Intermediate)(x)
  return state['features'][0], state['inputs'][0]
