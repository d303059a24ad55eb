from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    # TODO(migrate_sow): custom-reducer: custom reduce_fn/init_fn: sow every value
    #     and reduce after capturing
    self.sow(
        nnx.Intermediate,
        'total',
        x,
        init_fn=lambda: 0,
        reduce_fn=lambda prev, new: prev + new,
    )
    return x
