from flax import nnx


class Model(nnx.Module):

  def __call__(self, x, **sow_kwargs):
    # TODO(migrate_sow): filter-use: nnx.Intermediate used in self.sow (it may
    #     select the sow at flag_kwargs.py) selects the values sown on the model;
    #     they are there only after a call outside nnx.capture (and never with
    #     Hijax Variables): capture the call and read the State it returns
    # TODO(migrate_sow): kwargs: *args/**kwargs in .sow() hide its arguments
    self.sow(nnx.Intermediate, 'x', x, **sow_kwargs)
    return x


def run(model, x, **capture_kwargs):
  # TODO(migrate_sow): filter-use: nnx.Intermediate used in nnx.capture (it may
  #     select the sow at flag_kwargs.py) selects the values sown on the model;
  #     they are there only after a call outside nnx.capture (and never with
  #     Hijax Variables): capture the call and read the State it returns
  _, state = nnx.capture(model, nnx.Intermediate, **capture_kwargs)(x)
  return state['x'][0]
