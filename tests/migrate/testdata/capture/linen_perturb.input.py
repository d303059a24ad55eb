import flax.linen as nn
import jax.numpy as jnp


class Foo(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = self.perturb('before_multiply', x)
    self.sow('intermediates', 'x', x)
    return 3 * x


def run(x):
  return Foo().init_with_output({}, x)
