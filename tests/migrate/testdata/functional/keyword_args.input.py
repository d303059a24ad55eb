from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, name='inputs', value=x)
    self.sow(
        variable_type=nnx.Intermediate,
        name='doubled',
        value=2 * x,  # twice
    )
    return x
