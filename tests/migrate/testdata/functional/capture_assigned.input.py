from flax import nnx
import jax.numpy as jnp


class Probe(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    self.sow(nnx.Intermediate, 'output', y)
    return y


model = Probe(nnx.Rngs(0))
forward = nnx.capture(model, nnx.Intermediate)
y, intermediates = forward(jnp.ones(2))
print(intermediates['output'].value[-1])
