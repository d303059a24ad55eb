from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    x = self.perturb('hidden', x)
    self.sow(nnx.Intermediate, 'hidden_value', x)
    return x.sum()


def gradients(model, x):
  _, perturbations = nnx.capture(model, nnx.Perturbation)(x)

  def loss(model, perturbations, x):
    return nnx.capture(model, nnx.Intermediate, init=perturbations)(x)

  (_, perturb_grads), sown = nnx.grad(
      loss, argnums=(0, 1), has_aux=True)(model, perturbations, x)
  return nnx.merge_state(perturb_grads, sown)
