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
"""Names by spelling and pattern in ``capture``, ``plant`` and what capture
returns; selections that select nothing are errors."""

import re

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture, plant, sow, tap
import sow_testing

LAYERS = 4
X = jnp.linspace(-1.0, 1.0, 3)


def model(x, *, sown=True):
  """Layers that sow `('layers', i, 'h')` and `('layers', i, 'out')`."""
  for i in range(LAYERS):
    h = jnp.tanh(x * (i + 1))
    if sown:
      h = sow(h, name=('layers', i, 'h'))
    x = x + h
    if sown:
      x = sow(x, name=('layers', i, 'out'))
  return jnp.sum(x)


def ablated_by_hand(x, layer):
  """The oracle: `model` with layer `layer`'s h zeroed, written out."""
  for i in range(LAYERS):
    h = jnp.tanh(x * (i + 1))
    x = x + (0.0 * h if i == layer else h)
  return jnp.sum(x)


RUNS = {
    'eager': lambda f: f,
    'jit': jax.jit,
}


class SelectByNameTest(parameterized.TestCase):

  @parameterized.product(run=list(RUNS), names=[
      'layers.*.h', [('layers', '*', 'h')], ['layers.*.h'],
  ])
  def test_a_pattern_selects_its_names(self, run, names):
    _, collected = RUNS[run](capture(model, names=names))(X)
    self.assertEqual(list(collected), [('layers', i, 'h')
                                       for i in range(LAYERS)])
    _, everything = capture(model)(X)
    for name in collected:
      np.testing.assert_array_equal(collected[name][0], everything[name][0])

  @parameterized.parameters(list(RUNS))
  def test_a_spelling_selects_its_name(self, run):
    _, collected = RUNS[run](capture(model, names='layers.2.out'))(X)
    self.assertEqual(list(collected), [('layers', 2, 'out')])

  def test_any_depth(self):
    _, collected = capture(model, names='**.out')(X)
    self.assertLen(collected, LAYERS)
    _, collected = capture(model, names='layers.**')(X)
    self.assertLen(collected, 2 * LAYERS)

  @parameterized.product(run=list(RUNS), names=[
      'layers.9.h', 'layer.*.h', ['layers.0.h', 'nope'], 'nope',
  ])
  def test_a_selection_of_nothing_is_an_error(self, run, names):
    with self.assertRaisesRegex(ValueError, r'selected no sow of this call'):
      RUNS[run](capture(model, names=names))(X)

  def test_the_error_names_the_closest_names(self):
    with self.assertRaisesRegex(
        ValueError, r"'layers\.3\.hh' selected no sow.*Closest names it sows:"
        r" \('layers', 3, 'h'\)"):
      capture(model, names=['layers.3.hh', 'layers.0.h'])(X)

  def test_a_tag_that_selects_nothing(self):
    with self.assertRaisesRegex(
        ValueError, r"capture\(tag='metrics'\) selected no sow.*Its tags:"
        r' None'):
      capture(model, tag='metrics')(X)

  def test_a_name_sown_with_another_tag(self):
    def f(x):
      sow(x, name='a', tag='act')
      return sow(x, name='b', tag='metric')
    with self.assertRaisesRegex(
        ValueError, r"'b' selected no sow with tag='act'.*'b' is sown with"
        r" tag 'metric'"):
      capture(f, tag='act', names=['a', 'b'])(X)

  def test_a_tuple_meant_as_a_name(self):
    def f(x):
      return sow(x, name=('l1', 'h'))
    with self.assertRaisesRegex(
        ValueError, r"put it in a list: names=\[\('l1', 'h'\)\]"):
      capture(f, names=('l1', 'h'))(X)
    _, collected = capture(f, names=[('l1', 'h')])(X)
    self.assertEqual(list(collected), [('l1', 'h')])

  def test_a_tuple_meant_as_a_pattern(self):
    with self.assertRaisesRegex(
        ValueError, r"put it in a list: names=\[\('layers', '\*', 'h'\)\]"):
      capture(model, names=('layers', '*', 'h'))(X)

  def test_a_call_that_sows_nothing(self):
    with self.assertRaisesRegex(ValueError, r'The call sows nothing'):
      capture(lambda x: x, names='h')(X)
    # Selecting everything of a call that sows nothing is a true answer.
    self.assertEqual(capture(lambda x: x)(X)[1], {})

  def test_a_predicate_selecting_nothing_is_an_answer(self):
    _, collected = capture(model, names=lambda name: name[0] == 'nope')(X)
    self.assertEqual(collected, {})

  def test_two_names_of_one_spelling_are_refused(self):
    def f(x):
      sow(x, name='a.b')
      return sow(x, name=('a', 'b'))
    with self.assertRaisesRegex(ValueError, r"'a\.b' spells 2 names"):
      capture(f, names=['a.b', 'x.*'])(X)
    _, collected = capture(f, names=[('a', 'b')])(X)
    self.assertEqual(list(collected), [('a', 'b')])


class CollectedTest(absltest.TestCase):

  def test_read_by_spelling(self):
    _, collected = capture(model)(X)
    name = ('layers', 1, 'h')
    self.assertIs(collected['layers.1.h'], collected[name])
    self.assertIn('layers.1.h', collected)
    self.assertNotIn('layers.9.h', collected)
    self.assertIs(collected.get('layers.1.h'), collected[name])
    self.assertIsNone(collected.get('layers.9.h'))
    np.testing.assert_array_equal(collected.one('layers.1.h'),
                                  collected[name][0])

  def test_a_missing_spelling_names_the_closest(self):
    _, collected = capture(model)(X)
    with self.assertRaisesRegex(KeyError, r"closest: \('layers', 1, 'h'\)"):
      collected['layers.1.hh']  # pylint: disable=pointless-statement
    with self.assertRaisesRegex(KeyError, r'is a pattern'):
      collected['layers.*.h']  # pylint: disable=pointless-statement

  def test_one_of_a_name_sown_twice(self):
    def f(x):
      sow(x, name='h')
      return sow(x + 1, name='h')
    _, collected = capture(f)(X)
    with self.assertRaisesRegex(ValueError, r"'h' was sown 2 times"):
      collected.one('h')

  def test_still_a_pytree_and_a_dict(self):
    _, collected = jax.jit(capture(model))(X)
    doubled = jax.tree.map(lambda v: 2 * v, collected)
    self.assertEqual(list(doubled), list(collected))
    self.assertIsInstance(collected, dict)


class PlantPatternTest(parameterized.TestCase):

  @parameterized.product(run=list(RUNS), layer=list(range(LAYERS)))
  def test_a_pattern_ablates_the_layer_a_selector_names(self, run, layer):
    def ablate(value, index, name):
      del index
      return jnp.where(name[1] == layer, 0.0, value)

    out = RUNS[run](plant(model, {'layers.*.h': ablate}))(X)
    sow_testing.assert_close(out, ablated_by_hand(X, layer))

  def test_a_sweep_over_layers_is_one_batched_program(self):
    def ablated(layer):
      zero = lambda v, i, name: jnp.where(name[1] == layer, 0.0, v)
      return plant(model, {'layers.*.h': zero})(X)

    sweep = jax.jit(jax.vmap(ablated))
    layers = jnp.arange(LAYERS)
    with sow_testing.count_compiles() as compiles:
      outs = sweep(layers)
      sweep(layers)
    self.assertLen(compiles, 1)
    for layer in range(LAYERS):
      sow_testing.assert_close(outs[layer], ablated_by_hand(X, layer))

  def test_the_function_learns_the_name_and_the_index(self):
    seen = []

    def note(value, index, name):
      seen.append((name, index))
      return value

    plant(model, {'layers.*.out': note})(X)
    self.assertEqual(seen, [(('layers', i, 'out'), 0) for i in range(LAYERS)])

  def test_a_spelled_key_takes_values(self):
    _, collected = capture(model)(X)
    out = plant(model, {'layers.0.h': (jnp.zeros(3),)})(X)
    sow_testing.assert_close(out, ablated_by_hand(X, 0))
    del collected

  def test_a_pattern_selecting_nothing(self):
    with self.assertRaisesRegex(
        ValueError, r"pattern 'layers\.\*\.g' selects no sow.*closest"):
      plant(model, {'layers.*.g': lambda v, i, n: v})(X)

  def test_a_name_two_keys_select(self):
    with self.assertRaisesRegex(ValueError, r'selected by both'):
      plant(model, {'layers.*.h': lambda v, i, n: v,
                    ('layers', 0, 'h'): lambda v, i: v})(X)

  def test_a_pattern_takes_a_function(self):
    with self.assertRaisesRegex(TypeError, r'is a pattern, which takes a'):
      plant(model, {'layers.*.h': (jnp.zeros(3),)})


def _decode(x):
  """A while loop sowing two layers' values per step (a decode loop)."""

  def body(carry):
    i, h = carry
    h = sow(jnp.tanh(h) + 1.0, name=('layers', 0, 'out'))
    h = sow(h * 0.5, name=('layers', 1, 'out'))
    sow(i, name='step')
    return i + 1, h

  return jax.lax.while_loop(lambda c: c[0] < 3, body, (0, x))[1]


class MaxStepsSpellingTest(parameterized.TestCase):
  """``max_steps`` takes names as ``capture(names=)`` does: tuples, dotted
  spellings and patterns."""

  def _by_hand(self):
    h, per_layer = X, ([], [])
    for _ in range(3):
      h = jnp.tanh(h) + 1.0
      per_layer[0].append(h)
      h = h * 0.5
      per_layer[1].append(h)
    return per_layer

  @parameterized.parameters(
      ({'layers.*.out': 4, 'step': 5},),
      ({'layers.**': 4, 'step': 5},),
      ({'layers.0.out': 4, ('layers', 1, 'out'): 4, 'step': 5},),
  )
  def test_spellings_and_patterns_bound_their_names(self, max_steps):
    for run in (lambda f: f, jax.jit):
      _, collected = run(capture(_decode, max_steps=max_steps))(X)
      by_hand = self._by_hand()
      for layer in (0, 1):
        (steps,) = collected[('layers', layer, 'out')]
        self.assertEqual(steps.values.shape[0], 4)
        self.assertEqual(int(steps.count), 3)
        sow_testing.assert_close(steps.filled(), np.stack(by_hand[layer]))
      self.assertEqual(collected['step'][0].values.shape[0], 5)

  def test_two_bounds_for_one_name_are_refused(self):
    with self.assertRaisesRegex(
        ValueError, r"max_steps gives \('layers', 0, 'out'\) two bounds:"
        r" 'layers.\*.out': 4, 'layers.0.out': 6"):
      capture(_decode, max_steps={'layers.*.out': 4, 'layers.0.out': 6,
                                  'step': 5})(X)

  def test_a_pattern_bounding_nothing_is_an_error(self):
    with self.assertRaisesRegex(
        ValueError, r"max_steps bounds 'attn.\*', which no while_loop"):
      capture(_decode, max_steps={'layers.**': 4, 'step': 4,
                                  'attn.*': 2})(X)


class PlantMistakesTest(parameterized.TestCase):
  """A plant's mistakes get the package's message, before the call where
  the mistake is in what was given."""

  def test_a_pattern_function_without_the_name(self):
    with self.assertRaisesRegex(
        TypeError, r"plant: the function for the pattern 'layers.\*.out' is"
        r' called as fn\(value, index, name\) \(index: the execution of'
        r' that name, name: the static name it plants at\); its signature'
        r' is <lambda>\(v, i\).'):
      plant(model, {'layers.*.out': lambda v, i: v})

  def test_a_name_function_without_the_index(self):
    with self.assertRaisesRegex(
        TypeError, r"plant: the function for the name \('layers', 0, 'out'\)"
        r' is called as fn\(value, index\)'):
      plant(model, {('layers', 0, 'out'): lambda v: v})

  @parameterized.named_parameters(('eager', False), ('jit', True))
  def test_a_name_never_sown_lists_the_closest(self, jit):
    planted = plant(model, {('layers', 0, 'outt'): (X,)})
    with self.assertRaisesRegex(
        ValueError, r"plant: the function never sows \('layers', 0, 'outt'\);"
        r" closest names it sows: \('layers', 0, 'out'\)"):
      (jax.jit(planted) if jit else planted)(X)


class BadNamesAndValuesTest(absltest.TestCase):

  def test_a_name_formatted_from_a_traced_value(self):
    def f(x, i):
      return sow(x, name=f'h{i}')
    for run in (jax.jit(capture(f)), jax.jit(f)):
      with self.assertRaisesRegex(
          TypeError, r'was formatted from a traced value'):
        run(X, 1)
    # A Python int makes a static name.
    self.assertEqual(list(capture(f)(X, 1)[1]), ['h1'])

  def test_a_traced_name_anywhere_a_name_is_taken(self):
    static = r'a name must be static, known while tracing'
    calls = {
        'sow': lambda i: sow(X, name=('h', i)),
        'capture': lambda i: capture(model, names=[('layers', i, 'h')])(X),
        'capture(names=one)': lambda i: capture(model, names=i)(X),
        'tap': lambda i: tap(model, ('layers', i))(X),
        'Collected': lambda i: capture(model)(X)[1][('layers', i, 'h')],
        'Collected(one)': lambda i: capture(model)(X)[1][i],
    }
    for where, call in calls.items():
      with self.subTest(where):
        with self.assertRaisesRegex(
            TypeError, rf'^{re.escape(where.split("(")[0])}.*{static}.*'
            'which holds a traced value'):
          jax.jit(call)(1)
    # The same calls with a Python int are served.
    self.assertEqual(
        list(capture(model, names=[('layers', 1, 'h')])(X)[1]),
        [('layers', 1, 'h')])

  def test_a_numpy_string_array(self):
    with self.assertRaisesRegex(
        TypeError, r"sow\(name='s'\): a NumPy array of dtype <U1 cannot be"):
      sow(np.array(['a']), name='s')
    with self.assertRaisesRegex(TypeError, r'dtype object cannot be sown'):
      capture(lambda: sow({'a': np.array([None])}, name='s'))()

  def test_numpy_numbers_of_every_kind_are_sown(self):
    for dtype in (np.bool_, np.int8, np.uint16, np.float16, jnp.bfloat16,
                  np.complex64):
      value = np.ones(2, dtype)
      _, collected = capture(lambda: sow(value, name='s'))()
      self.assertEqual(collected['s'][0].dtype, value.dtype)


if __name__ == '__main__':
  absltest.main()
