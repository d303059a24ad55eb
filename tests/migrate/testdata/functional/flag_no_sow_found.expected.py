from flax import nnx

from my_project import models


def run(x):
  model = models.Model(nnx.Rngs(0))
  # TODO(migrate_sow): no-sow-found: reads features, which no sow it may reach
  #     makes (a module path, or a library's sow?)
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  return state['features'][0]
