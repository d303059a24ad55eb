import os

from flax import nnx
from flax.nnx.sow import capture, sow
import jax.numpy as jnp

os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=1'


class Model(nnx.Module):

  def __call__(self, x):
    sow(2 * x, name='doubled')
    return x + 1


model = Model()
y, intermediates = capture(model)(jnp.ones(3))
print(y, intermediates['doubled'][0])
