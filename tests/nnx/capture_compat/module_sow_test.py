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
"""``Module.sow`` and ``Module.perturb`` on the transform: inside a
functional ``capture`` their sites are sows named by module path; outside
any capture they behave exactly as in Flax 0.12.8; without
``capture_compat.install()`` a functional capture refuses them."""

import functools
import os
import re
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import capture_compat
from flax.nnx.sow import capture
from flax.nnx.sow import plant
from flax.nnx.sow import tap
from flax.nnx.sow.transform import inner_calls

from compat_testing import CompatTestCase, X  # pylint: disable=g-multiple-import
from module_models import (  # pylint: disable=g-multiple-import
    LAYERS,
    Block,
    Model,
    forward,
    linear_of,
    model_oracle,
    make_ensemble,
    Stack,
    stacked_oracle,
    X_MODULES,
    ModulesTestCase,
)
import sow_legacy
import sow_testing


assert_close = sow_testing.assert_close
X_SEMANTICS = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


class _Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    self.sow(nnx.Intermediate, 'y', y)
    return y


class _Stack(nnx.Module):

  def __init__(self, rngs):
    self.blocks = nnx.List([_Block(rngs), _Block(rngs)])

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    return x


X_PLANT_UNREAD = jnp.arange(3.0)


class _Block_PLANT_UNREAD(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)

  def __call__(self, x):
    h = self.linear(x)
    self.sow(nnx.Intermediate, 'h', h)  # Module.sow returns a bool
    return jnp.tanh(h)


class ModuleSowTest(ModulesTestCase):

  def test_sites_named_by_path_and_model_untouched(self):
    before = self.snapshot(self.model)
    out, collected = capture(forward)(self.model, X_MODULES)
    pres, hs = model_oracle(self.model, X_MODULES)
    self.assertEqual(
        list(collected),
        [('blocks', 0, 'pre'), ('blocks', 0, 'h'),
         ('blocks', 1, 'pre'), ('blocks', 1, 'h')],
    )
    for i in range(2):
      assert_close(collected[('blocks', i, 'h')][0], hs[i])
      # Module.perturb sows its zero perturbation.
      np.testing.assert_array_equal(
          collected[('blocks', i, 'pre')][0], jnp.zeros(3)
      )
    assert_close(out, hs[-1])
    self.assert_untouched(self.model, *before)

  def test_tree_mode(self):
    with nnx.set_graph_mode(False):
      _, collected = capture(forward)(self.model, X_MODULES)
      _, tapped = capture(tap(forward, ('blocks', 1), inputs=False))(
          self.model, X_MODULES)
    _, hs = model_oracle(self.model, X_MODULES)
    assert_close(collected[('blocks', 1, 'h')][0], hs[1])
    assert_close(tapped[('blocks', 1, '__call__', 'output')][0], hs[1])
    self.assertIs(type(self.model.blocks[1]), Block)

  def test_tagged_by_variable_type(self):
    _, intermediates = capture(forward, tag=nnx.Intermediate)(self.model, X_MODULES)
    _, perturbations = capture(forward, tag=nnx.Perturbation)(self.model, X_MODULES)
    self.assertEqual(
        list(intermediates), [('blocks', 0, 'h'), ('blocks', 1, 'h')]
    )
    self.assertEqual(
        list(perturbations), [('blocks', 0, 'pre'), ('blocks', 1, 'pre')]
    )

  def test_same_values_as_flax_capture(self):
    _, collected = capture(forward)(self.model, X_MODULES)
    with capture_compat.uninstall():
      _, state = nnx.capture(forward, nnx.Intermediate)(self.model, X_MODULES)
    for i in range(2):
      np.testing.assert_array_equal(
          collected[('blocks', i, 'h')][0],
          state['blocks'][i]['h'].get_value()[0],
      )

  def test_every_value_in_call_order(self):
    # reduce_fn/init_fn only apply in nnx.capture: the functional capture
    # returns each value sown.
    def twice(model, x):
      return model(model(x))

    _, collected = capture(twice)(self.model, X_MODULES)
    _, first = model_oracle(self.model, X_MODULES)
    _, second = model_oracle(self.model, first[-1])
    self.assertLen(collected[('blocks', 0, 'h')], 2)
    assert_close(collected[('blocks', 0, 'h')][0], first[0])
    assert_close(collected[('blocks', 0, 'h')][1], second[0])

  def test_module_or_bound_method_is_the_root(self):
    _, from_module = capture(self.model)(X_MODULES)
    _, from_method = capture(self.model.blocks[1].__call__)(X_MODULES)
    _, hs = model_oracle(self.model, X_MODULES)
    self.assertEqual(
        list(from_module)[1::2], [('blocks', 0, 'h'), ('blocks', 1, 'h')]
    )
    self.assertEqual(list(from_method), [('pre',), ('h',)])
    assert_close(from_method[('h',)][0], jnp.tanh(
        linear_of(self.model.blocks[1].linear, X_MODULES)))
    assert_close(from_module[('blocks', 1, 'h')][0], hs[1])

  def test_other_arguments_are_prefixed(self):
    other = Block(nnx.Rngs(1))

    def f(x, model, *, extra):
      return extra(model(x))

    _, collected = capture(f)(X_MODULES, self.model, extra=other)
    self.assertEqual(
        [name for name in collected if name[-1] == 'h'],
        [(1, 'blocks', 0, 'h'), (1, 'blocks', 1, 'h'), ('extra', 'h')],
    )
    _, hs = model_oracle(self.model, X_MODULES)
    assert_close(
        collected[('extra', 'h')][0], jnp.tanh(linear_of(other.linear, hs[-1]))
    )

    def g(model, x, extra):
      return extra(model(x))

    _, collected = capture(g)(self.model, X_MODULES, other)
    self.assertIn((2, 'h'), collected)
    self.assertIn(('blocks', 0, 'h'), collected)

  def test_module_in_a_closure_is_refused(self):
    def f(x):
      return self.model(x)

    with self.assertRaisesRegex(
        ValueError, r'Module.perturb was called on a Block .*Pass it as an'
        ' argument'
    ):
      capture(f)(X_MODULES)
    before = self.snapshot(self.model)
    self.assert_untouched(self.model, *before)

  @parameterized.named_parameters(('eager', False), ('jit', True))
  def test_jit_around_capture(self, jit):
    run = capture(forward)
    if jit:
      run = jax.jit(run)
    out, collected = run(self.model, X_MODULES)
    _, hs = model_oracle(self.model, X_MODULES)
    assert_close(out, hs[-1])
    assert_close(collected[('blocks', 1, 'h')][0], hs[1])

  @parameterized.named_parameters(
      ('nnx_jit', lambda f: nnx.jit(f)),
      ('nnx_remat', lambda f: nnx.remat(f)),
  )
  def test_transform_inside(self, transform):
    def f(model, x):
      return transform(forward)(model, x)

    out, collected = capture(f)(self.model, X_MODULES)
    _, hs = model_oracle(self.model, X_MODULES)
    self.assertEqual(
        [name for name in collected if name[-1] == 'h'],
        [('blocks', 0, 'h'), ('blocks', 1, 'h')],
    )
    assert_close(out, hs[-1])
    for i in range(2):
      assert_close(collected[('blocks', i, 'h')][0], hs[i])

  def test_nnx_jit_per_block_keeps_paths(self):
    # One nnx.jit for both blocks: traced per path, named per path.
    @nnx.jit
    def run_block(block, x):
      return block(x)

    def f(model, x):
      for block in model.blocks:
        x = run_block(block, x)
      return x

    _, collected = capture(f)(self.model, X_MODULES)
    _, hs = model_oracle(self.model, X_MODULES)
    for i in range(2):
      assert_close(collected[('blocks', i, 'h')][0], hs[i])

  def test_nnx_jit_inside_traced_once_across_captures(self):
    traces = []

    @nnx.jit
    def run(model, x):
      traces.append(None)
      return model(x)

    for _ in range(3):
      _, collected = capture(run)(self.model, X_MODULES)
      self.assertIn(('blocks', 1, 'h'), collected)
    self.assertLen(traces, 1)

  def test_nnx_vmap_ensemble(self):
    ensemble = make_ensemble(nnx.Rngs(0))

    def f(ensemble, x):
      return nnx.vmap(lambda b, x: b(x), in_axes=(0, None))(ensemble, x)

    out, collected = capture(f)(ensemble, X_MODULES)
    want = stacked_oracle(
        ensemble.linear.kernel[...], ensemble.linear.bias[...], X_MODULES
    )
    self.assertEqual(list(collected), [('pre',), ('h',)])
    assert_close(collected[('h',)][0], jnp.stack(want))
    assert_close(out, jnp.stack(want))

  def test_nnx_scan_stacked_layers(self):
    stack = Stack(nnx.Rngs(0))
    out, collected = capture(forward)(stack, X_MODULES)
    kernel = stack.layers.linear.kernel[...]
    bias = stack.layers.linear.bias[...]
    x, want = X_MODULES, []
    for i in range(LAYERS):
      x = jnp.tanh(x @ kernel[i] + bias[i])
      want.append(x)
    self.assertEqual(list(collected), [('layers', 'pre'), ('layers', 'h')])
    assert_close(collected[('layers', 'h')][0], jnp.stack(want))
    assert_close(out, want[-1])

  def test_perturb_gradient_of_the_intermediate(self):
    name = ('blocks', 0, 'pre')

    def loss(model, x):
      return jnp.sum(model(x) ** 2)

    def planted_loss(delta):
      return plant(loss, {name: (delta,)})(self.model, X_MODULES)

    got = jax.jit(jax.grad(planted_loss))(jnp.zeros(3))
    # The oracle: the loss as an explicit function of block 0's
    # pre-activation.
    block1 = self.model.blocks[1].linear

    def explicit(pre0):
      return jnp.sum(jnp.tanh(linear_of(block1, jnp.tanh(pre0))) ** 2)

    pres, _ = model_oracle(self.model, X_MODULES)
    assert_close(got, jax.grad(explicit)(pres[0]))

  def test_plant_through_module_perturb(self):
    delta = jnp.full(3, 0.5)
    out = plant(forward, {('blocks', 0, 'pre'): (delta,)})(self.model, X_MODULES)
    pres, _ = model_oracle(self.model, X_MODULES)
    want = jnp.tanh(
        linear_of(self.model.blocks[1].linear, jnp.tanh(pres[0] + delta))
    )
    assert_close(out, want)

  def test_nnx_capture_inside_keeps_its_state(self):
    def f(model, x):
      return nnx.capture(model, nnx.Perturbation)(x)

    with self.assertWarns(inner_calls.TakenByInnerCall):
      (_, state), collected = capture(f)(self.model, X_MODULES)
    _, hs = model_oracle(self.model, X_MODULES)
    # nnx.capture's frame is the innermost: it collects its type...
    np.testing.assert_array_equal(
        state['blocks'][1]['pre'].get_value(), jnp.zeros(3)
    )
    self.assertNotIn(('blocks', 1, 'pre'), collected)
    # ...and a Module.sow of a type it does not collect reaches the
    # functional capture, named from nnx.capture's module.
    assert_close(collected[('blocks', 1, 'h')][0], hs[1])

  def test_every_variable_updated_first_is_refused(self):
    # Inside a transformation, a copy's Module.sow is named from where its
    # Variables come from: eagerly, also through the NNX transform's own
    # record of its copies; staged, from the inputs its Variables hold, or
    # from what its transform's record said when it was staged, if JAX did
    # not reuse that trace for another module. A module whose every
    # Variable the call updated before it sows, in one nnx.jit trace JAX
    # reuses for two such modules, is refused staged, naming the module.
    class Counter(nnx.Module):

      def __init__(self):
        self.calls = nnx.BatchStat(jnp.zeros(()))

      def __call__(self, x):
        self.calls[...] += 1.0
        self.sow(nnx.Intermediate, 'h', x * self.calls[...])
        return x

    class Pair(nnx.Module):

      def __init__(self):
        self.a, self.b = Counter(), Counter()

    shared = nnx.jit(lambda m, x: m(x))

    def f(pair, x):
      return shared(pair.b, shared(pair.a, x))

    pair = Pair()
    _, collected = capture(f)(pair, X_MODULES)
    self.assertEqual(list(collected), [('a', 'h'), ('b', 'h')])
    for name in ('a', 'b'):
      assert_close(collected[(name, 'h')][0], X_MODULES)
    self.assertEqual(float(pair.a.calls[...]), 1.0)
    with self.assertRaisesRegex(
        ValueError, r"a Counter sow \('h',\) was made inside a JAX"
        ' transformation .* none of the Variables it reads there comes'
        ' from an input'):
      jax.jit(capture(f))(pair, X_MODULES)
    # One module per trace (a new nnx.jit each call): named staged too.
    fresh = lambda m, x: nnx.jit(lambda m, x: m(x))(m, x)
    _, collected = jax.jit(capture(fresh))(pair.a, X_MODULES)
    self.assertEqual(list(collected), [('h',)])
    assert_close(collected[('h',)][0], X_MODULES * 2.0)

  def test_jitted_function_with_a_name_predicate(self):
    # The predicate is resolved on a trace of the call made for that
    # purpose; it too must see Module.sow sites as sows (it took the
    # attribute-writing path, and the predicate then selected nothing).
    before = self.snapshot(self.model)
    run = capture(jax.jit(forward), names=lambda name: name[-1] == 'h')
    out, collected = run(self.model, X_MODULES)
    _, hs = model_oracle(self.model, X_MODULES)
    self.assertEqual(list(collected), [('blocks', 0, 'h'), ('blocks', 1, 'h')])
    for i in range(2):
      assert_close(collected[('blocks', i, 'h')][0], hs[i])
    assert_close(out, hs[-1])
    self.assert_untouched(self.model, *before)

  @absltest.skipUnless(sow_legacy.is_available(), sow_legacy.SKIP_REASON)
  def test_runner_keyed_by_installed_module_sow(self):
    # Only on a released Flax: in Flax itself, Module.sow is always this.
    jitted = jax.jit(forward)
    model = Model(nnx.Rngs(0))
    with capture_compat.uninstall():
      with self.assertRaisesRegex(ValueError, r'capture_compat\.install\(\)'):
        capture(jitted)(model, X_MODULES)
    self.assertNotIn('h', vars(model.blocks[0]))
    _, with_overlay = capture(jitted)(model, X_MODULES)
    self.assertIn(('blocks', 1, 'h'), with_overlay)
    # The runner traced with the overlay's Module.sow is not reused without
    # it, where the sows would be Flax's own.
    with capture_compat.uninstall():
      with self.assertRaisesRegex(ValueError, r'capture_compat\.install\(\)'):
        capture(jitted)(model, X_MODULES)


@absltest.skipUnless(sow_legacy.is_available(), sow_legacy.SKIP_REASON)
class WithoutInstallTest(parameterized.TestCase):
  """On a released Flax without ``install()``, ``Module.sow`` is Flax's own,
  which writes an attribute instead of sowing: a functional transform of a
  model that uses it raises an error naming ``install()``, before anything
  is written, rather than return nothing."""

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.uninstall())
    self.model = Model(nnx.Rngs(0))
    self.before = [sorted(vars(m)) for _, m in nnx.iter_modules(self.model)]

  def assert_refused(self, run):
    with self.assertRaisesRegex(
        ValueError, r"Module\.sow .* Flax's own.*capture_compat\.install\(\)"
    ):
      run()
    after = [sorted(vars(m)) for _, m in nnx.iter_modules(self.model)]
    self.assertEqual(after, self.before)  # no attribute, no mark left

  @parameterized.named_parameters(
      ('capture', lambda m: capture(forward)(m, X_MODULES)),
      ('capture_jit', lambda m: jax.jit(capture(forward))(m, X_MODULES)),
      ('capture_of_jit', lambda m: capture(jax.jit(forward))(m, X_MODULES)),
      ('capture_module', lambda m: capture(m)(X_MODULES)),
      ('plant', lambda m: plant(forward, {'unused': (X_MODULES,)})(m, X_MODULES)),
      ('tap', lambda m: capture(tap(forward, ('blocks', 0)))(m, X_MODULES)),
      ('nnx_jit_inside', lambda m: capture(nnx.jit(forward))(m, X_MODULES)),
  )
  def test_refused(self, run):
    self.assert_refused(lambda: run(self.model))

  def test_without_a_capture_flax_writes_as_before(self):
    # The oracle that the refusal is ours: a direct call writes `h`.
    with self.assertWarns(DeprecationWarning):
      forward(self.model, X_MODULES)
    self.assertIsInstance(self.model.blocks[0].h, nnx.Intermediate)


def _logging(method, calls):
  """``method`` behind a ``functools.wraps`` wrapper that logs its calls,
  as a user's profiling or logging wrapper of ``Module.sow`` would."""

  @functools.wraps(method)
  def logged(self, *args, **kwargs):
    calls.append(type(self).__name__)
    return method(self, *args, **kwargs)

  return logged


class WrappedModuleSowTest(absltest.TestCase):
  """``Module.sow`` is told apart by identity, not by its code: a wrapper of
  the overlay's is collected, a wrapper of Flax 0.12.8's own is refused with
  the ``install()`` error; never an empty result with ``h`` written onto the
  model."""

  def run_with(self, run):
    """``run(model)`` with ``Module.sow`` and ``Module.perturb`` wrapped, as
    a profiler wraps every method."""
    model = Model(nnx.Rngs(0))
    before = [sorted(vars(m)) for _, m in nnx.iter_modules(model)]
    calls = []
    kept = {name: getattr(nnx.Module, name) for name in ('sow', 'perturb')}
    for name, method in kept.items():
      setattr(nnx.Module, name, _logging(method, calls))
    try:
      result = run(model)
    finally:
      for name, method in kept.items():
        setattr(nnx.Module, name, method)
      after = [sorted(vars(m)) for _, m in nnx.iter_modules(model)]
      self.assertEqual(after, before)  # nothing written onto the model
    return model, result, calls

  def test_a_wrapper_of_the_overlays_sow_is_collected(self):
    with capture_compat.install():
      model, (out, collected), calls = self.run_with(
          lambda m: capture(forward)(m, X_MODULES))
    # Each sow went through the wrapper, once per value collected.
    self.assertEqual(calls, ['Block'] * sum(map(len, collected.values())))
    _, hs = model_oracle(model, X_MODULES)
    self.assertEqual([n for n in collected if n[-1] == 'h'],
                     [('blocks', 0, 'h'), ('blocks', 1, 'h')])
    for i in range(2):
      assert_close(collected[('blocks', i, 'h')][0], hs[i])
    assert_close(out, hs[-1])

  @absltest.skipUnless(sow_legacy.is_available(), sow_legacy.SKIP_REASON)
  def test_a_wrapper_of_flax_own_sow_is_refused(self):
    with capture_compat.uninstall():
      for run in (lambda m: capture(forward)(m, X_MODULES),
                  lambda m: jax.jit(capture(forward))(m, X_MODULES)):
        with self.assertRaisesRegex(
            ValueError,
            r"Module\.sow .* Flax's own.*capture_compat\.install\(\)"):
          self.run_with(run)


class DeprecatedPathTest(CompatTestCase):
  """Outside any capture, sow and perturb behave exactly as in 0.12.8."""

  class Model(nnx.Module):

    def __call__(self, x):
      self.sow(nnx.Intermediate, 'h', x)
      return self.perturb('p', x)

  def run_twice(self):
    model = self.Model()
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      out = model(X)
      model(X)
    self.assertLen(caught, 4)
    for w in caught:
      self.assertIs(w.category, DeprecationWarning)
      self.assertEqual(w.filename, __file__)
    return model, out, [(str(w.message), w.lineno) for w in caught]

  def test_like_legacy(self):
    model, out, messages = self.run_twice()
    with sow_legacy.flax_methods():
      model_legacy, out_legacy, messages_legacy = self.run_twice()
    self.assertEqual(messages, messages_legacy)
    self.assertEqual(nnx.graphdef(model), nnx.graphdef(model_legacy))
    self.assertStatesEqual(nnx.state(model), nnx.state(model_legacy))
    self.assertTreeEqual(out, out_legacy)
    self.assertTreeClose(model.h.get_value(), (X, X))
    self.assertTreeClose(model.p.get_value(), jnp.zeros(3))

  def test_errors_like_legacy(self):
    for installed in (True, False):
      with self.subTest(installed=installed):
        with (capture_compat.install() if installed
              else capture_compat.uninstall()):
          model = self.Model()
          model.h = 3
          with self.assertRaisesRegex(
              ValueError, "Expected 'h' to be a Variable, got int"
          ):
            model(X)
          model = self.Model()
          model.h = nnx.Param(X)
          with self.assertRaisesRegex(
              ValueError, "Expected 'h' to be of type 'Intermediate', got"
              " 'Param'"
          ):
            model(X)


class ModuleSowNamesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.install())
    self.model = _Stack(nnx.Rngs(0))

  def by_hand(self, x):
    ys = []
    for block in self.model.blocks:
      x = x @ block.linear.kernel.get_value() + block.linear.bias.get_value()
      ys.append(x)
    return ys

  def test_module_sow_names_are_module_path_then_name(self):
    # A type the compat capture does not collect still reaches an
    # enclosing functional capture, named (*module path, name).
    def forward(x):
      return nnx.capture(self.model, nnx.Perturbation)(x)

    _, collected = capture(forward)(X_SEMANTICS)
    self.assertEqual(
        list(collected), [('blocks', 0, 'y'), ('blocks', 1, 'y')]
    )
    for (name, values), y in zip(collected.items(), self.by_hand(X_SEMANTICS)):
      sow_testing.assert_close(values[0], y, err_msg=str(name))

  def test_eager_capture_keyed_by_variable_types(self):
    def forward(model, x):
      return model(x)

    # In both orders: a trace made for one type has no sites of the other.
    for types in [(nnx.Perturbation, nnx.Intermediate),
                  (nnx.Intermediate, nnx.Perturbation)]:
      states = {
          t: nnx.capture(forward, t)(self.model, X_SEMANTICS)[1] for t in types
      }
      self.assertLen(nnx.to_flat_state(states[nnx.Intermediate]), 2)
      self.assertEmpty(nnx.to_flat_state(states[nnx.Perturbation]))


class UnreadModuleSowTest(absltest.TestCase):

  def test_module_sow_site_is_refused_and_its_tap_is_planted(self):
    block = _Block_PLANT_UNREAD(nnx.Rngs(0))
    with capture_compat.install():
      _, collected = capture(block)(X_PLANT_UNREAD)
      self.assertEqual(list(collected), [('h',)])
      with self.assertRaisesRegex(
          ValueError,
          r"plant: the sow \('h',\) \(tag=<class .*Intermediate'>, at .*"
          + re.escape(os.path.basename(__file__)) + r':\d+ .*tap',
      ):
        plant(block, {('h',): collected[('h',)]})(X_PLANT_UNREAD)
      # The module's output, tapped, is what a plant can change.
      planted = plant(
          tap(lambda m, x: m(x), ('linear',)),
          {('linear', '__call__', 'output'): (jnp.zeros(3),)},
      )(block, X_PLANT_UNREAD)
    np.testing.assert_array_equal(planted, jnp.zeros(3))  # tanh(0)


if __name__ == '__main__':
  absltest.main()
