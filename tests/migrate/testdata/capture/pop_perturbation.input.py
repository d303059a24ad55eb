from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    return self.perturb('x', x)


def zeros(model, x):
  y = model(x)
  perturbations = nnx.pop(model, nnx.Perturbation)
  return y, perturbations
