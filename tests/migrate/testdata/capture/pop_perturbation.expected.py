from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    return self.perturb('x', x)


def zeros(model, x):
  y, perturbations = nnx.capture(model, nnx.Perturbation)(x)
  return y, perturbations
