from flax import nnx


class Block(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.layers = nnx.List([nnx.Linear(2, 2, rngs=rngs) for _ in range(2)])

  def __call__(self, x):
    for layer in self.layers:
      x = layer(x)
    # TODO(migrate_sow): legacy-reader: may be read by nnx.pop at
    #     flag_capture_hazard.py, which stays (capture-hazard); the model runs
    #     outside nnx.capture
    self.sow(nnx.Intermediate, 'x', x)
    return x


def run(model: Block, x):
  # Under nnx.vmap JAX flattens the model's state: Flax 0.12.8's nnx.capture
  # would fail on its nnx.List.
  axes = nnx.StateAxes({nnx.Intermediate: 0, ...: None})
  y = nnx.vmap(lambda m, v: m(v), in_axes=(axes, 0))(model, x)
  # TODO(migrate_sow): capture-hazard: Block holds an nnx.List and the model runs
  #     under nnx.vmap: Flax 0.12.8's nnx.capture fails there (its __captures__
  #     key cannot be sorted with the list's integer keys)
  intermediates = nnx.pop(model, nnx.Intermediate)
  return y, intermediates['x'][0]


def plain(model: Block, x):
  # A plain call: nothing flattens the model, the capture runs.
  y, intermediates = nnx.capture(model, nnx.Intermediate)(x)
  return y, intermediates['x'][0]
