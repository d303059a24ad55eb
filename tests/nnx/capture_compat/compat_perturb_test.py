# Copyright 2026 The Flax Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""``Module.perturb`` and ``nnx.capture(..., init=...)`` on the transform:
the two-phase workflow of Flax 0.12.8, and ``init`` under ``jit``."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import capture_compat
from flax.nnx import sow

from compat_testing import CompatTestCase, flat, PerturbedModel, X  # pylint: disable=g-multiple-import
import sow_legacy


X_SEMANTICS = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


class _Scaled(nnx.Module):

  def __call__(self, x):
    return 2 * self.perturb('x', x)


class PerturbTest(CompatTestCase):

  Model = PerturbedModel

  def test_two_phase_workflow(self):
    model = self.Model(nnx.Rngs(0))
    results = {}
    for name, capture in (('new', nnx.capture),
                          ('legacy', sow_legacy.capture)):
      _, perturbations = capture(model, nnx.Perturbation)(X)

      def loss(model, perturbations, x, capture=capture):
        return capture(model, nnx.Intermediate, init=perturbations)(x)

      (grads, perturb_grads), sowed = nnx.grad(
          loss, argnums=(0, 1), has_aux=True
      )(model, perturbations, X)
      results[name] = (perturbations, grads, perturb_grads, sowed)
    for new, old in zip(results['new'], results['legacy']):
      self.assertStatesEqual(new, old)
    perturbations, grads, perturb_grads, sowed = results['new']
    self.assertTreeClose(perturbations['h'].get_value(), jnp.zeros(3))
    # Oracle: the gradient of the loss as an explicit function of h.
    kernel, bias = model.b.kernel[...], model.b.bias[...]
    h = X @ model.a.kernel[...] + model.a.bias[...]
    dh = jax.grad(lambda h: jnp.sum((jnp.tanh(h) @ kernel + bias) ** 2))(h)
    self.assertTreeClose(perturb_grads['h'].get_value(), dh)
    self.assertCollected(sowed, {('h',): [h]})

  def test_a_perturbation_added_twice_inside_cond(self):
    # Found by the NNX fuzzer: a shared module perturbs its output at both
    # of its calls inside an nnx.cond. Flax 0.12.8 accumulates the two
    # cotangents of its one Variable inside the transposed branch, the new
    # capture those of the two planted values after it: the same sum, equal
    # to float rounding. Oracle: jax.grad of the loss as an explicit
    # function of the perturbation.
    class Layer(nnx.Module):

      def __init__(self):
        self.calls = nnx.BatchStat(jnp.zeros((), jnp.float32))
        # A Variable the call does not update: inside nnx.cond, the branch
        # reads it from an input, which names the module (a module whose
        # every Variable is updated before it sows there is refused:
        # `module_sow_test.test_every_variable_updated_first_is_refused`).
        self.scale = nnx.Param(jnp.ones((), jnp.float32))

      def __call__(self, x):
        self.calls[...] = self.calls[...] + 1.0
        return self.perturb('p', jnp.sin(x) + self.calls[...])

    class Model(nnx.Module):

      def __init__(self):
        self.layer = Layer()
        self.again = self.layer

      def __call__(self, x):
        body = lambda m, x: m.again(m.layer(x))
        return nnx.cond(jnp.sum(x) > 0, body, body, self, x)

    x = jax.random.normal(jax.random.key(0), (2, 3), jnp.float32)

    def perturbation_grad(capture):
      model = Model()
      _, perturbations = capture(model, nnx.Perturbation)(x)

      def loss(perturbations, model):
        out, _ = capture(model, nnx.Intermediate, init=perturbations)(x)
        return jnp.sum(out * out)

      return nnx.grad(loss)(perturbations, model)['again']['p'].get_value()

    def explicit(p):  # the first capture counted calls 1 and 2
      h = jnp.sin(x) + 3.0 + p
      return jnp.sum((jnp.sin(h) + 4.0 + p) ** 2)

    expected = jax.grad(explicit)(jnp.zeros((2, 3), jnp.float32))
    got = perturbation_grad(nnx.capture)
    with sow_legacy.flax_methods():
      legacy = perturbation_grad(sow_legacy.capture)
    self.assertTreeClose(got, expected)
    self.assertTreeClose(legacy, expected)
    self.assertTreeClose(got, legacy)

  def test_perturbation_under_its_own_type(self):
    model = self.Model(nnx.Rngs(0))
    h = X @ model.a.kernel[...] + model.a.bias[...]
    _, inter, pert = nnx.capture(model, nnx.Intermediate, nnx.Perturbation)(X)
    self.assertCollected(inter, {('h',): [h]})
    self.assertEqual(
        [(p, t) for p, t, _ in flat(pert)], [(('h',), nnx.Perturbation)]
    )
    self.assertTreeClose(pert['h'].get_value(), jnp.zeros(3))
    # Flax 0.12.8 files the perturbation under Intermediate (behavior change).
    _, inter_legacy, pert_legacy = sow_legacy.capture(
        model, nnx.Intermediate, nnx.Perturbation
    )(X)
    self.assertEqual(
        [(p, t) for p, t, _ in flat(inter_legacy)],
        [(('h',), nnx.Perturbation)],
    )
    self.assertEmpty(flat(pert_legacy))

  def test_init_types_not_in_var_types(self):
    model = self.Model(nnx.Rngs(0))
    _, perturbations = nnx.capture(model, nnx.Perturbation)(X)
    shifted = jax.tree.map(lambda v: v + 1.0, perturbations)
    out = nnx.capture(model, init=shifted)(X)
    out_legacy = sow_legacy.capture(model, init=shifted)(X)
    self.assertTreeEqual(out, out_legacy)
    h = X @ model.a.kernel[...] + model.a.bias[...] + 1.0
    self.assertTreeClose(
        out, jnp.sum((jnp.tanh(h) @ model.b.kernel[...]
                      + model.b.bias[...]) ** 2)
    )
    _, state = nnx.capture(model, nnx.Intermediate, init=shifted)(X)
    _, state_legacy = sow_legacy.capture(
        model, nnx.Intermediate, init=shifted
    )(X)
    self.assertStatesEqual(state, state_legacy)
    self.assertCollected(state, {('h',): [h]})
    # Returned as a type of their own, init values come back unchanged.
    _, returned = nnx.capture(model, nnx.Perturbation, init=shifted)(X)
    _, returned_legacy = sow_legacy.capture(
        model, nnx.Perturbation, init=shifted
    )(X)
    self.assertStatesEqual(returned, returned_legacy)
    self.assertStatesEqual(returned, shifted)

  def test_perturb_without_capture_type_is_identity(self):
    model = self.Model(nnx.Rngs(0))
    out, state = nnx.capture(model, nnx.Intermediate)(X)
    h = X @ model.a.kernel[...] + model.a.bias[...]
    self.assertCollected(state, {('h',): [h]})
    self.assertTreeClose(
        out, jnp.sum((jnp.tanh(h) @ model.b.kernel[...]
                      + model.b.bias[...]) ** 2)
    )

  def test_transform_capture_harvests_module_sows(self):
    # An enclosing flax.nnx.sow.capture sees what nnx.capture leaves.
    model = self.Model(nnx.Rngs(0))
    (out, pert), collected = sow.capture(
        nnx.capture(model, nnx.Perturbation), tag=nnx.Intermediate
    )(X)
    h = X @ model.a.kernel[...] + model.a.bias[...]
    self.assertEqual(list(collected), [('h',)])
    self.assertTreeClose(collected[('h',)], (h,))
    self.assertTreeClose(pert['h'].get_value(), jnp.zeros(3))


class CompatInitUnderJitTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.install())

  def test_init_perturbation_is_added_under_jit(self):
    model = _Scaled()
    _, perturbations = nnx.capture(model, nnx.Perturbation)(X_SEMANTICS)
    ones = jax.tree.map(jnp.ones_like, perturbations)

    @jax.jit
    def run(perturbations, x):
      return nnx.capture(model, init=perturbations)(x)

    # The oracle: 2 * (x + 1), a correctly rounded operation per element.
    np.testing.assert_array_equal(
        run(ones, X_SEMANTICS), 2 * (np.asarray(X_SEMANTICS) + np.float32(1))
    )
    grads = jax.jit(jax.grad(lambda p, x: jnp.sum(run(p, x))))(ones, X_SEMANTICS)
    np.testing.assert_array_equal(grads['x'].get_value(), np.full(3, 2.0))


if __name__ == '__main__':
  absltest.main()
