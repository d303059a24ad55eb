from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(
        nnx.Intermediate,
        'total',
        x,
        init_fn=lambda: 0,
        reduce_fn=lambda prev, new: prev + new,
    )
    return x
