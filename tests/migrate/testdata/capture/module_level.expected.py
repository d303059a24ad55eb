import os

from flax import nnx
import jax.numpy as jnp

os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=1'


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'doubled', 2 * x)
    return x + 1


model = Model()
y, intermediates = nnx.capture(model, nnx.Intermediate)(jnp.ones(3))
print(y, intermediates['doubled'].value[0])
