from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    self.sow(nnx.Intermediate, 'x', x)
    return x


def run(model, x):
  # CAX's pattern: a batch of runs, the sown values stacked on axis 0.
  axes = nnx.StateAxes({nnx.RngState: 0, nnx.Intermediate: 0, ...: None})

  # Get the intermediates.
  y, intermediates = nnx.capture(nnx.split_rngs(splits=2)(
      nnx.vmap(lambda m, v: m(v), in_axes=(axes, 0))
  ), nnx.Intermediate)(model, x)
  return y, intermediates.x[0]


@nnx.jit
def loss(model, x):
  axes = nnx.StateAxes({nnx.Intermediate: 0, ...: None})
  _, intermediates = nnx.capture(nnx.vmap(lambda m, v: m(v), in_axes=(axes, 0)), nnx.Intermediate)(model, x)
  return intermediates['x'][0].sum()
