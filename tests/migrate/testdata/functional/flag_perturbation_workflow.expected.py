from flax import nnx


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    x = self.linear(x)
    # TODO(migrate_sow): legacy-reader: linked to the capture at
    #     flag_perturbation_workflow.py, which stays (perturbation); both must
    #     migrate together
    x = self.perturb('hidden', x)
    # TODO(migrate_sow): legacy-reader: linked to the capture at
    #     flag_perturbation_workflow.py, which stays (perturbation); both must
    #     migrate together
    self.sow(nnx.Intermediate, 'hidden_value', x)
    return x.sum()


def gradients(model, x):
  # TODO(migrate_sow): perturbation: the two-phase perturbation workflow; with
  #     perturb(v, name=...) capture around jax.grad instead
  _, perturbations = nnx.capture(model, nnx.Perturbation)(x)

  def loss(model, perturbations, x):
    # TODO(migrate_sow): perturbation: the two-phase perturbation workflow; with
    #     perturb(v, name=...) capture around jax.grad instead
    return nnx.capture(model, nnx.Intermediate, init=perturbations)(x)

  (_, perturb_grads), sown = nnx.grad(
      loss, argnums=(0, 1), has_aux=True)(model, perturbations, x)
  return nnx.merge_state(perturb_grads, sown)
