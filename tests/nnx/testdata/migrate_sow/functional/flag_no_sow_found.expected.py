from flax import nnx

from my_project import models


def run(x):
  model = models.Model(nnx.Rngs(0))
  # TODO(migrate_sow): no-sow-found: no sow found among the given paths; migrate them together ('features')
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  return state['features'][0]
