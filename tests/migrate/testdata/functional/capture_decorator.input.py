from flax import nnx
import jax.numpy as jnp


class Encoder(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.dense = nnx.Linear(3, 3, rngs=rngs)

  def __call__(self, x, *, debug=False):
    x = self.dense(x)
    if debug:
      self.sow(nnx.Intermediate, 'pre_activation', x)
    return nnx.gelu(x)


@nnx.capture(nnx.Intermediate)
def forward(model, x):
  return model(x, debug=True)


def main():
  model = Encoder(nnx.Rngs(0))
  out, sown = forward(model, jnp.ones((1, 3)))
  print(out, sown['pre_activation'][0])
