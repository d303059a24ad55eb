import jax.numpy as jnp
from flax import nnx


class Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    # A submodule's perturb stays Module.perturb (module-path), and
    # nnx.capture of nnx.Intermediate does not read it.
    # TODO(migrate_sow): module-path: Block is a submodule of Model: its values are
    #     named by their module path, which a free sow loses; keep Module.sow
    #     (capture names it by path)
    return self.perturb('grad_out', self.linear(x))


class Model(nnx.Module):

  def __init__(self, rngs):
    self.block = Block(rngs)

  def __call__(self, x):
    h = self.block(x)
    # TODO(migrate_sow): legacy-reader: linked to the capture at
    #     flag_kept_module_sow.py, which stays (kept-module-sow); both must migrate
    #     together
    self.sow(nnx.Intermediate, 'h', h)
    return jnp.tanh(h)


def features(model: Model, x):
  # TODO(migrate_sow): kept-module-sow: the functional capture that nnx.capture
  #     would become runs the Module.perturb at flag_kept_module_sow.py, which
  #     stays (module-path); on Flax 0.12.8's own Module.sow (capture_compat not
  #     installed) a Module.sow or Module.perturb inside a functional capture
  #     raises: keep nnx.capture, or migrate with --nnx-capture=transform where
  #     the code runs with capture_compat installed
  y, state = nnx.capture(model, nnx.Intermediate)(x)
  return y, state['h'].value[0]
