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
"""Eager means eager (issue 31): outside any JAX trace, a capture runs the
Python of the captured function on every call.

Flax 0.12.8's ``nnx.capture`` calls ``fn`` directly, so every value ``fn``
reads from outside its arguments (a global, a dict entry, a list element, a
class attribute, a NumPy array changed in place, a global JAX array) is the
current one, and every side effect (a counter, a ``print``) happens once per
call. The compat ``nnx.capture`` and the functional ``capture`` must do the
same. Each test calls a capture three times, changing an external value
(a temperature of 1, 2 and 4) between calls.

Oracles: for the compat ``nnx.capture``, Flax 0.12.8's own
(``sow_legacy.capture``), bitwise for the output and the State (the same
operations run on both sides), and values recomputed by hand from the
parameters and the current temperature; for the functional ``capture``, a
direct call of the function on a clone of the model, bitwise for the output
and the values sown, and the values recomputed by hand.
"""

import contextlib
import io
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import sow

import compat_testing
import sow_legacy
import sow_testing


X = jnp.array([[0.5, -1.0], [2.0, 0.25], [-1.5, 1.0]], jnp.float32)
TEMPERATURES = (1.0, 2.0, 4.0)  # powers of two: dividing by them is exact
SOWN_PATHS = [('blocks', 0, 'h'), ('blocks', 1, 'h')]

THIS_MODULE = sys.modules[__name__]
TEMPERATURE = 1.0  # a module-global Python float, read by the functions
OFFSET = jnp.zeros((), jnp.float32)  # a global JAX array, read by Shifted

flat = sow_testing.flat


class Block(nnx.Module):
  scale = 1.0  # a class attribute of the Module, read on every call

  def __init__(self, rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    h = self.linear(x) * self.scale
    self.sow(nnx.Intermediate, 'h', h)
    return jnp.tanh(h)


class Shifted(Block):
  """Reads the module-global JAX array ``OFFSET`` in ``__call__``."""

  def __call__(self, x):
    h = self.linear(x) + OFFSET
    self.sow(nnx.Intermediate, 'h', h)
    return jnp.tanh(h)


class Model(nnx.Module):

  def __init__(self, rngs, block=Block):
    self.blocks = nnx.List([block(rngs), block(rngs)])

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    return x


def by_hand(model, x, *, scale=1.0, offset=0.0):
  """Model's output and sown values, from its parameters: {path: [h]}."""
  sown = {}
  for i, block in enumerate(model.blocks):
    y = x @ block.linear.kernel[...]
    # Explicit: the suite runs with JAX_NUMPY_RANK_PROMOTION=raise too.
    h = (y + jnp.broadcast_to(block.linear.bias[...], y.shape)) * scale
    h = h + offset
    sown[('blocks', i, 'h')] = [h]
    x = jnp.tanh(h)
  return x, sown


def tempered_by_hand(model, x, t):
  """``model(x / t) / t``, by hand."""
  out, sown = by_hand(model, x / t)
  return out / t, sown


def sown_by(module, path):
  """The value a direct call sowed at ``path`` (Flax's Variable attribute)."""
  node = module
  for part in path[:-1]:
    node = node[part] if isinstance(part, int) else getattr(node, part)
  return getattr(node, path[-1]).get_value()


def over_apis(**variants):
  """Named parameters: each variant with ``nnx.capture`` and ``capture``."""
  cases = []
  for api, compat in (('nnx_capture', True), ('capture', False)):
    if not variants:
      cases.append(dict(testcase_name=api, compat=compat))
    for name, variant in variants.items():
      cases.append(
          dict(testcase_name=f'{api}_{name}', compat=compat, variant=variant)
      )
  return parameterized.named_parameters(*cases)


class EagerTestCase(compat_testing.CompatTestCase):
  """The compat layer is installed for each test (the functional capture
  needs it too: ``Module.sow`` sows by path only when installed)."""

  def capture(self, compat, f, *args):
    """One eager call of ``f(*args)`` captured: ``(out, sown)``, ``sown``
    an Intermediate State (``nnx.capture``) or ``{name: values}``."""
    if compat:
      return nnx.capture(f, nnx.Intermediate)(*args)
    return sow.capture(f)(*args)

  def assertAsOracle(self, compat, f, model, got, expected):
    """``got``, from ``self.capture(compat, f, model, X)``, is what the
    oracle gives now and ``expected`` (``(out, {path: [h]})``, by hand)."""
    out, sown = got
    expected_out, expected_sown = expected
    self.assertEqual(sorted(expected_sown), SOWN_PATHS)
    if compat:
      out_legacy, state_legacy = sow_legacy.capture(f, nnx.Intermediate)(
          model, X
      )
      # Not vacuous: Flax 0.12.8 collects both blocks' values, and the
      # current temperature is what it ran with.
      self.assertLen(flat(state_legacy), len(SOWN_PATHS))
      self.assertTreeClose(out_legacy, expected_out)
      self.assertCollected(state_legacy, expected_sown)
      self.assertTreeEqual(out, out_legacy)
      self.assertStatesEqual(sown, state_legacy)
    else:
      twin = nnx.clone(model)
      with self.assertWarns(DeprecationWarning):  # a direct call sows
        direct_out = f(twin, X)
      self.assertTreeClose(direct_out, expected_out)
      self.assertTreeEqual(out, direct_out)
      self.assertEqual(sorted(sown), SOWN_PATHS)
      for path in SOWN_PATHS:
        self.assertTreeEqual(sown[path], sown_by(twin, path), str(path))
        self.assertTreeClose(sown[path], tuple(expected_sown[path]),
                             str(path))

  def check(self, compat, f, model, expected):
    """Captures ``f(model, X)`` and compares it with its oracles."""
    self.assertAsOracle(compat, f, model, self.capture(compat, f, model, X),
                        expected)


class ExternalValuesTest(EagerTestCase):
  """What ``f`` reads from outside its arguments is read on every call."""

  @over_apis()
  def test_module_global_float(self, compat):
    model = Model(nnx.Rngs(0))
    f = lambda m, x: m(x / TEMPERATURE) / TEMPERATURE
    for t in TEMPERATURES:
      with mock.patch.object(THIS_MODULE, 'TEMPERATURE', t):
        self.check(compat, f, model, tempered_by_hand(model, X, t))

  @over_apis()
  def test_closure_cell_float(self, compat):
    model = Model(nnx.Rngs(0))
    temperature = 1.0  # rebound below: f reads the cell on each call
    f = lambda m, x: m(x / temperature) / temperature
    for temperature in TEMPERATURES:
      self.check(compat, f, model, tempered_by_hand(model, X, temperature))

  @over_apis()
  def test_dict_entry(self, compat):
    model = Model(nnx.Rngs(0))
    cfg = {'t': 1.0}
    f = lambda m, x: m(x / cfg['t']) / cfg['t']
    for t in TEMPERATURES:
      cfg['t'] = t
      self.check(compat, f, model, tempered_by_hand(model, X, t))

  @over_apis()
  def test_list_element(self, compat):
    model = Model(nnx.Rngs(0))
    cfg = [1.0]
    f = lambda m, x: m(x / cfg[0]) / cfg[0]
    for t in TEMPERATURES:
      cfg[0] = t
      self.check(compat, f, model, tempered_by_hand(model, X, t))

  @over_apis()
  def test_class_attribute_of_a_plain_class(self, compat):

    class Settings:
      t = 1.0

    model = Model(nnx.Rngs(0))
    f = lambda m, x: m(x / Settings.t) / Settings.t
    for t in TEMPERATURES:
      Settings.t = t
      self.check(compat, f, model, tempered_by_hand(model, X, t))

  @over_apis()
  def test_class_attribute_of_the_module_class(self, compat):
    model = Model(nnx.Rngs(0))
    f = lambda m, x: m(x)
    for t in TEMPERATURES:
      with mock.patch.object(Block, 'scale', t):  # read in Block.__call__
        self.check(compat, f, model, by_hand(model, X, scale=t))

  @over_apis(dict='dict', list='list')
  def test_numpy_array_in_a_container(self, compat, variant):
    # JAX inlines a 0-d NumPy array as a literal of the jaxpr.
    model = Model(nnx.Rngs(0))
    if variant == 'dict':
      cfg, key = {'t': np.array(1.0, np.float32)}, 't'
    else:
      cfg, key = [np.array(1.0, np.float32)], 0
    f = lambda m, x: m(x / cfg[key]) / cfg[key]
    self.check(compat, f, model, tempered_by_hand(model, X, 1.0))
    cfg[key][...] = 2.0  # the same array, changed in place
    self.check(compat, f, model, tempered_by_hand(model, X, 2.0))
    cfg[key] = np.array(4.0, np.float32)  # another array
    self.check(compat, f, model, tempered_by_hand(model, X, 4.0))

  @over_apis(read_in_module_call='module', closed_over_by_f='closure')
  def test_global_jax_array_reassigned(self, compat, variant):
    if variant == 'module':
      model = Model(nnx.Rngs(0), block=Shifted)
      f = lambda m, x: m(x)
      for t in TEMPERATURES:
        offset = jnp.asarray(t, jnp.float32)
        with mock.patch.object(THIS_MODULE, 'OFFSET', offset):
          self.check(compat, f, model, by_hand(model, X, offset=t))
    else:
      model = Model(nnx.Rngs(0))
      temperature = jnp.asarray(1.0, jnp.float32)
      f = lambda m, x: m(x / temperature) / temperature
      for t in TEMPERATURES:
        temperature = jnp.asarray(t, jnp.float32)
        self.check(compat, f, model, tempered_by_hand(model, X, t))


class SideEffectsTest(EagerTestCase):
  """The Python of ``f`` and of the modules' methods runs on every call."""

  @over_apis()
  def test_counters_and_print_once_per_call(self, compat):
    calls = {'f': 0, 'block': 0}

    class Counting(Block):

      def __call__(self, x):
        calls['block'] += 1
        return super().__call__(x)

    model = Model(nnx.Rngs(0), block=Counting)
    cfg = {'t': 1.0}

    def f(m, x):
      calls['f'] += 1
      print(f'temperature {cfg["t"]}')
      return m(x / cfg['t']) / cfg['t']

    printed = []
    for i, t in enumerate(TEMPERATURES):
      cfg['t'] = t
      before = dict(calls)
      with contextlib.redirect_stdout(io.StringIO()) as stdout:
        got = self.capture(compat, f, model, X)
      # Once per call: f once, each of the 2 blocks once.
      self.assertEqual(calls, {'f': before['f'] + 1,
                               'block': before['block'] + 2}, f'call {i}')
      self.assertEqual(stdout.getvalue(), f'temperature {t}\n', f'call {i}')
      printed.append(stdout.getvalue())
      # The oracle runs f too (Flax 0.12.8 and a direct call alike).
      with contextlib.redirect_stdout(io.StringIO()) as stdout:
        self.assertAsOracle(compat, f, model, got,
                            tempered_by_hand(model, X, t))
      self.assertEqual(stdout.getvalue(), f'temperature {t}\n')
    self.assertEqual(printed, [f'temperature {t}\n' for t in TEMPERATURES])


class JittedHelperTest(EagerTestCase):
  """A ``jax.jit`` function inside ``f`` keeps its compiled program; the
  Python around it runs on every call."""

  @over_apis()
  def test_compiled_once_python_around_it_every_call(self, compat):
    model = Model(nnx.Rngs(0))
    helper_traces = []
    f_calls = []

    @jax.jit
    def helper(y):
      helper_traces.append(None)
      return 2.0 * jnp.tanh(y)

    def f(m, x):
      f_calls.append(TEMPERATURE)
      return helper(m(x / TEMPERATURE)) / TEMPERATURE

    for i, t in enumerate(TEMPERATURES):
      with mock.patch.object(THIS_MODULE, 'TEMPERATURE', t):
        before, traced = len(f_calls), len(helper_traces)
        with sow_testing.count_compiles() as compiles:
          got = self.capture(compat, f, model, X)
        if i > 0:  # the first call traces and compiles what it runs
          self.assertEmpty(compiles, f'call {i} compiled')
          self.assertLen(helper_traces, traced, f'call {i} traced helper')
        self.assertEqual(f_calls[before:], [t], f'call {i}')
        model_out, sown = by_hand(model, X / t)
        self.assertAsOracle(compat, f, model, got,
                            (2.0 * jnp.tanh(model_out) / t, sown))


class FormsTest(EagerTestCase):
  """The other calling conventions of ``nnx.capture`` run eagerly too."""

  def test_decorator_form(self):
    model = Model(nnx.Rngs(0))

    @nnx.capture(nnx.Intermediate)
    def forward(m, x):
      return m(x / TEMPERATURE) / TEMPERATURE

    @sow_legacy.capture(nnx.Intermediate)
    def forward_legacy(m, x):
      return m(x / TEMPERATURE) / TEMPERATURE

    for t in TEMPERATURES:
      with mock.patch.object(THIS_MODULE, 'TEMPERATURE', t):
        out, state = forward(model, X)
        out_legacy, state_legacy = forward_legacy(model, X)
      expected_out, expected = tempered_by_hand(model, X, t)
      self.assertLen(flat(state_legacy), len(SOWN_PATHS))
      self.assertTreeClose(out_legacy, expected_out)
      self.assertCollected(state_legacy, expected)
      self.assertTreeEqual(out, out_legacy)
      self.assertStatesEqual(state, state_legacy)

  def test_functional_decorator_form(self):
    model = Model(nnx.Rngs(0))

    def forward(m, x):
      return m(x / TEMPERATURE) / TEMPERATURE

    captured = sow.capture(forward)
    for t in TEMPERATURES:
      with mock.patch.object(THIS_MODULE, 'TEMPERATURE', t):
        got = captured(model, X)
        self.assertAsOracle(False, forward, model, got,
                            tempered_by_hand(model, X, t))

  @over_apis()
  def test_module_as_fn(self, compat):
    model = Model(nnx.Rngs(0))
    for t in TEMPERATURES:
      with mock.patch.object(Block, 'scale', t):  # read in Block.__call__
        expected_out, expected = by_hand(model, X, scale=t)
        if compat:
          out, state = nnx.capture(model, nnx.Intermediate)(X)
          out_legacy, state_legacy = sow_legacy.capture(
              model, nnx.Intermediate
          )(X)
          self.assertLen(flat(state_legacy), len(SOWN_PATHS))
          self.assertTreeClose(out_legacy, expected_out)
          self.assertCollected(state_legacy, expected)
          self.assertTreeEqual(out, out_legacy)
          self.assertStatesEqual(state, state_legacy)
        else:
          out, sown = sow.capture(model)(X)
          twin = nnx.clone(model)
          with self.assertWarns(DeprecationWarning):  # a direct call sows
            direct_out = twin(X)
          self.assertTreeClose(direct_out, expected_out)
          self.assertTreeEqual(out, direct_out)
          self.assertEqual(sorted(sown), SOWN_PATHS)
          for path in SOWN_PATHS:
            self.assertTreeEqual(sown[path], sown_by(twin, path), str(path))
            self.assertTreeClose(sown[path], tuple(expected[path]), str(path))


if __name__ == '__main__':
  absltest.main()
