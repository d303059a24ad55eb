from flax import nnx


class Block(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    # TODO(migrate_sow): filter-use: nnx.Intermediate used in nnx.StateAxes at
    #     flag_state_axes.py may select it; delete that filter once the values are
    #     captured
    self.sow(nnx.Intermediate, 'inputs', x)
    return self.linear(x)


def run(model, x):
  # TODO(migrate_sow): filter-use: nnx.Intermediate used in nnx.StateAxes (it may
  #     select the sow at flag_state_axes.py) carries the values sown on the
  #     model through the transform; a free sow is no state of the model
  state_axes = nnx.StateAxes({nnx.Intermediate: 0, ...: None})

  @nnx.vmap(in_axes=(state_axes, 0))
  def forward(model, x):
    return model(x)

  return forward(model, x)
