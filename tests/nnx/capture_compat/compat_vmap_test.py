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
"""nnx.capture on the transform under nnx.vmap and nnx.scan, as real code
uses them: ensembles, a vmapped simulation driver, scan over layers.

Each test compares with Flax 0.12.8's own implementation
(``sow_legacy.capture``), bitwise where both run the same operations,
and, where a number is at stake, with a value derived by hand.
"""

import functools
import warnings

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import capture_compat
import sow_legacy
import sow_testing

X = jnp.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], jnp.float32)  # (2, 3)
MEMBERS = 3


flat = sow_testing.flat


class CompatVmapTestCase(sow_testing.StateAssertions, absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.install())
    # legacy() takes Flax's deprecated paths on purpose.
    self.enterContext(warnings.catch_warnings())
    warnings.simplefilter('ignore', DeprecationWarning)

  def assertSameAsLegacy(self, run):
    """``run(capture)`` returns (model, *States): equal for both captures."""
    new = run(capture_compat.capture)[1:]
    with sow_legacy.flax_methods():
      old = run(sow_legacy.capture)[1:]
    for got, want in zip(new, old):
      self.assertStatesEqual(got, want)


class Member(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 4, rngs=rngs)

  def __call__(self, x):
    h = self.perturb('h', self.linear(x))
    self.sow(nnx.Intermediate, 'bias', jnp.ones(2))  # the same for all
    return jnp.tanh(h)


@nnx.split_rngs(splits=MEMBERS)
@nnx.vmap(in_axes=(0,), out_axes=0)
def make_ensemble(rngs):
  """An ensemble as Flax's transforms guide builds it: vmapped init."""
  return Member(rngs)


@nnx.vmap(in_axes=(0, None), out_axes=0)
def ensemble_forward(member, x):
  return member(x)


class EnsembleTest(CompatVmapTestCase):

  def run_perturbation_gradients(self, capture):
    ensemble = make_ensemble(nnx.Rngs(0))
    _, perturbations = capture(ensemble_forward, nnx.Perturbation)(
        ensemble, X)

    def loss(ensemble, perturbations):
      out, sown = capture(ensemble_forward, nnx.Intermediate,
                          init=perturbations)(ensemble, X)
      return jnp.sum(out ** 2), sown

    grads, sown = nnx.grad(loss, argnums=1, has_aux=True)(
        ensemble, perturbations)
    return ensemble, perturbations, grads, sown

  def test_perturbation_gradients_are_per_member(self):
    ensemble, perturbations, grads, sown = self.run_perturbation_gradients(
        capture_compat.capture)
    self.assertEqual(perturbations['h'].get_value().shape, (MEMBERS, 2, 4))
    # By hand: out = tanh(h), d sum(out^2) / dh = 2 tanh(h) (1 - tanh(h)^2),
    # with h = x @ kernel_m + bias_m for each member m.
    kernel = ensemble.linear.kernel.get_value()  # (3, 3, 4)
    bias = ensemble.linear.bias.get_value()  # (3, 4)
    h = jnp.einsum('bi,mio->mbo', X, kernel) + bias[:, None, :]
    t = jnp.tanh(h)
    sow_testing.assert_close(grads['h'].get_value(), 2 * t * (1 - t ** 2))
    # A value that does not depend on the member still has the member axis.
    (bias_sown,) = sown['bias'].get_value()
    np.testing.assert_array_equal(bias_sown, jnp.ones((MEMBERS, 2)))

  def test_same_as_legacy(self):
    self.assertSameAsLegacy(self.run_perturbation_gradients)


class Automaton(nnx.Module):
  """A cellular automaton driven as CAX drives its systems: a jitted
  ``__call__`` scanning ``_step``, whose sown states are stacked per step."""

  def __init__(self, rngs):
    self.w = nnx.Param(jnp.array([0.5, -1.0, 1.5], jnp.float32))
    self.rngs = rngs

  def _step(self, state):
    new = jnp.tanh(state * self.w[...])
    self.sow(nnx.Intermediate, 'state', new)
    return new

  @functools.partial(nnx.jit, static_argnames='num_steps')
  def __call__(self, state, num_steps):
    axes = nnx.StateAxes({nnx.Intermediate: 0, ...: nnx.Carry})
    return nnx.scan(
        lambda system, state: system._step(state),
        in_axes=(axes, nnx.Carry),
        out_axes=nnx.Carry,
        length=num_steps,
    )(self, state)


def simulations(system, states):
  """Independent simulations in parallel, as CAX's getting started runs
  them: split RNG streams, the sown states mapped, the rest broadcast."""
  axes = nnx.StateAxes({nnx.RngState: 0, nnx.Intermediate: 0, ...: None})
  return nnx.split_rngs(splits=states.shape[0])(
      nnx.vmap(lambda system, state: system(state, num_steps=4),
               in_axes=(axes, 0))
  )(system, states)


class SimulationDriverTest(CompatVmapTestCase):

  def test_states_are_simulations_then_steps(self):
    states = jnp.stack([X[0], X[1], X[0] * 2, X[1] * 2, -X[0]])  # 5 sims
    out, sown = nnx.capture(simulations, nnx.Intermediate)(
        Automaton(nnx.Rngs(0)), states)
    (stacked,) = sown['state'].get_value()
    self.assertEqual(stacked.shape, (5, 4, 3))  # (simulations, steps, ...)
    w = np.array([0.5, -1.0, 1.5], np.float32)
    for sim in range(5):
      state = np.asarray(states[sim])
      for step in range(4):
        state = np.tanh(state * w)
        sow_testing.assert_close(stacked[sim, step], state)
    sow_testing.assert_close(out, stacked[:, -1])

  def test_same_as_legacy(self):
    states = jnp.stack([X[0], X[1], X[0] * 2, X[1] * 2])  # 4 sims, 4 steps
    new = nnx.capture(simulations, nnx.Intermediate)(
        Automaton(nnx.Rngs(0)), states)
    with sow_legacy.flax_methods():
      old = sow_legacy.capture(simulations, nnx.Intermediate)(
          Automaton(nnx.Rngs(0)), states)
    np.testing.assert_array_equal(new[0], old[0])
    self.assertStatesEqual(new[1], old[1])


class Layer(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)

  def __call__(self, x):
    return jnp.tanh(self.perturb('h', self.linear(x)))


@nnx.split_rngs(splits=4)
@nnx.vmap(in_axes=(0,), out_axes=0)
def make_layers(rngs):
  return Layer(rngs)


class ScanOverLayers(nnx.Module):

  def __init__(self, rngs):
    self.layers = make_layers(rngs)

  def __call__(self, x):
    axes = nnx.StateAxes({nnx.Perturbation: 0, ...: 0})
    return nnx.scan(
        lambda layer, x: (layer(x), None), in_axes=(axes, nnx.Carry),
        out_axes=(nnx.Carry, 0),
    )(self.layers, x)[0]


class ScanOverLayersTest(CompatVmapTestCase):

  def run_perturbation_gradients(self, capture):
    model = ScanOverLayers(nnx.Rngs(0))
    _, perturbations = capture(model, nnx.Perturbation)(X)

    def loss(model, perturbations):
      return jnp.sum(capture(model, init=perturbations)(X) ** 2)

    grads = nnx.grad(loss, argnums=1)(model, perturbations)
    return model, perturbations, grads

  def test_init_takes_the_stacked_perturbations(self):
    model, perturbations, grads = self.run_perturbation_gradients(
        capture_compat.capture)
    self.assertEqual(
        perturbations['layers']['h'].get_value().shape, (4, 2, 3))
    # By hand, backwards through the 4 layers: x_{k+1} = tanh(h_k) with
    # h_k = x_k @ W_k + b_k, so d loss / d h_k is
    # d loss / d x_{k+1} * (1 - x_{k+1}^2).
    kernel = model.layers.linear.kernel.get_value()
    bias = model.layers.linear.bias.get_value()
    xs = [X]
    for k in range(4):
      xs.append(jnp.tanh(xs[-1] @ kernel[k] + bias[k][None]))
    d_x = 2 * xs[-1]
    want = [None] * 4
    for k in reversed(range(4)):
      want[k] = d_x * (1 - xs[k + 1] ** 2)
      d_x = want[k] @ kernel[k].T
    sow_testing.assert_close(grads['layers']['h'].get_value(),
                             jnp.stack(want))

  def test_same_as_legacy(self):
    self.assertSameAsLegacy(self.run_perturbation_gradients)


class InitMismatchTest(CompatVmapTestCase):

  def test_an_init_perturbation_of_another_shape_is_named(self):
    model = ScanOverLayers(nnx.Rngs(0))
    _, perturbations = nnx.capture(model, nnx.Perturbation)(X)
    per_layer = jax.tree.map(lambda v: v[0], perturbations)  # (2, 3)
    with self.assertRaisesRegex(
        ValueError,
        r"the init perturbation \('layers', 'h'\) has a leaf of"
        r' float32\[2, 3\], but Module.perturb there .* has'
        r' float32\[4, 2, 3\]\.'):
      nnx.capture(model, init=per_layer)(X)


class FlaxTestCaptureVmapTest(CompatVmapTestCase):
  """Flax 0.12.8's ``module_test.py::TestCapture::test_vmap``, faithfully,
  but with ``pre_run`` splitting ``self`` where Flax's splits the global
  ``model``: the captured call runs on a copy, as under ``nnx.jit`` (see
  the behavior-changes guide), so the global is not the captured module."""

  class Foo(nnx.Module):

    def __init__(self, dim):
      self.w = nnx.Param(jax.random.normal(jax.random.key(0), dim))

    def __call__(self, x):
      x = self.perturb('grad_of_x', x)
      y = jnp.dot(x, self.w)
      self.sow(nnx.Intermediate, 'y', y)
      return y

    def pre_run(self, x):
      graphdef, intms, params = nnx.split(self, nnx.Intermediate, nnx.Param)

      def run(intms, params, x):
        return nnx.merge(graphdef, intms, params)(x)

      nnx.vmap(run, in_axes=(0, None, 0))(intms, params, x)

  def run_test(self, capture):
    @nnx.jit
    def train_step(model, perturbations, x):
      def loss_grad(model, perturbations, x):
        def loss(model, perturbations, x):
          return capture(model, nnx.Intermediate, init=perturbations)(x)

        (grads, perturb_grads), sowed = nnx.grad(
            loss, argnums=(0, 1), has_aux=True)(model, perturbations, x)
        return grads, nnx.merge_state(perturb_grads, sowed)

      return nnx.vmap(loss_grad, in_axes=(None, 0, 0))(model, perturbations,
                                                         x)

    model, x = self.Foo(4), jnp.ones((3, 4))
    _, perturbations = capture(model.pre_run, nnx.Perturbation)(x)
    grads, intermediates = train_step(model, perturbations, x)
    return model, perturbations, grads, intermediates

  def test_as_flax_asserts(self):
    model, _, _, intermediates = self.run_test(nnx.capture)
    # Flax's assertions: d y / d x = w for each of the 3 examples.
    np.testing.assert_allclose(
        intermediates['grad_of_x'].get_value(),
        jnp.broadcast_to(model.w.get_value()[None, :], (3, 4)))
    self.assertEqual(intermediates['y'].get_value()[0].shape, (3,))

  def test_same_as_legacy(self):
    self.assertSameAsLegacy(self.run_test)

  def test_a_global_module_runs_as_in_flax(self):
    # An eager capture is a direct call, as in Flax 0.12.8: code that splits
    # a module it closes over (Flax's own TestCapture.test_vmap) runs, and
    # its perturbations are those of legacy. Staged, the call runs on
    # copies and is refused as nnx.jit refuses it: the Variables of the
    # global belong to the caller's trace level.
    foo, x = self.Foo(4), jnp.ones((3, 4))

    def pre_run_on_global(self, x):
      del self
      # `...`: legacy gives the global a `__captures__` while it runs.
      graphdef, params, rest = nnx.split(foo, nnx.Param, ...)
      return nnx.vmap(lambda p, r, x: nnx.merge(graphdef, p, r)(x),
                      in_axes=(None, None, 0))(params, rest, x)

    out, perturbations = nnx.capture(pre_run_on_global, nnx.Perturbation)(
        foo, x)
    out_legacy, perturbations_legacy = sow_legacy.capture(
        pre_run_on_global, nnx.Perturbation)(foo, x)
    self.assertTreeEqual(out, out_legacy)
    got, want = flat(perturbations), flat(perturbations_legacy)
    self.assertNotEmpty(want)
    self.assertEqual([(p, t) for p, t, _ in got], [(p, t) for p, t, _ in want])
    # Per member under nnx.vmap (see EnsembleTest), where legacy keeps one.
    self.assertTreeEqual([v for *_, v in got], [jnp.zeros((3, 4))])
    self.assertTreeEqual([v for *_, v in want], [jnp.zeros(4)])
    with self.assertRaisesRegex(ValueError, 'different trace level'):
      nnx.jit(lambda m, x: nnx.capture(pre_run_on_global, nnx.Perturbation)(
          m, x))(foo, x)
    with self.assertRaisesRegex(ValueError, 'different trace level'):
      nnx.jit(lambda m, x: pre_run_on_global(m, x))(foo, x)


if __name__ == '__main__':
  absltest.main()
