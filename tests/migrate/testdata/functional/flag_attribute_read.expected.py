from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    # TODO(migrate_sow): attribute-read: read as an attribute,
    #     model.features.value, at flag_attribute_read.py; capture it instead
    self.sow(nnx.Intermediate, 'features', x)
    return x


def run(model, x):
  y = model(x)
  # TODO(migrate_sow): attribute-read: read as an attribute, model.features.value
  #     reads 'features' (sown at flag_attribute_read.py) off the module: it is
  #     there only after a call outside nnx.capture; capture the call and read
  #     the State
  return y, model.features.value[0]
