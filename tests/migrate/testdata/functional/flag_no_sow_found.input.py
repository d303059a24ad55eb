from flax import nnx

from my_project import models


def run(x):
  model = models.Model(nnx.Rngs(0))
  _, state = nnx.capture(model, nnx.Intermediate)(x)
  return state['features'][0]
