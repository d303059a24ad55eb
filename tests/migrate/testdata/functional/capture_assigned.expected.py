from flax import nnx
from flax.nnx.sow import capture, sow
import jax.numpy as jnp


class Probe(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    sow(y, name='output')
    return y


model = Probe(nnx.Rngs(0))
forward = capture(model)
y, intermediates = forward(jnp.ones(2))
print(intermediates['output'][-1])
