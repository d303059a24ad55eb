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
"""A capture around a capture or a plant: ``see_through=True`` collects what
the inner call takes; without it, the outer capture names the inner call
that took its sows (a warning, or a note on its error), as does a plant.

The oracles are the values computed by hand (``jnp.sin`` of the input, the
planted value) and the inner call's own results, which must be equal to
the outer's bitwise: they are the same values of one program.
"""

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
from flax.nnx.sow import sow
from flax.nnx.sow.transform import inner_calls


X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)
EAGER_AND_JIT = (('eager', lambda f: f), ('jit', jax.jit))


def g(x):
  h = sow(jnp.sin(x), name='h')
  sow(2 * x, name='m', tag='metrics')
  return 3 * h


def scanned(x):
  def body(c, _):
    return g(c), None
  return jax.lax.scan(body, x, length=4)[0]


class Block(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'h', jnp.sin(x))
    return 3 * x


class SeeThroughTest(parameterized.TestCase):

  @parameterized.named_parameters(*EAGER_AND_JIT)
  def test_sees_what_an_inner_capture_takes(self, wrap):
    (out, inner), outer = wrap(capture(capture(g), see_through=True))(X)
    self.assertEqual(list(inner), ['h', 'm'])
    self.assertEqual(list(outer), ['h', 'm'])
    for name in inner:
      np.testing.assert_array_equal(outer[name][0], inner[name][0])
    np.testing.assert_array_equal(outer['h'][0], jnp.sin(X))
    np.testing.assert_array_equal(out, g(X))

  @parameterized.named_parameters(*EAGER_AND_JIT)
  def test_in_a_scan_each_step(self, wrap):
    (_, inner), outer = wrap(capture(capture(scanned), see_through=True))(X)
    self.assertEqual(outer['h'][0].shape, (4, 3))
    np.testing.assert_array_equal(outer['h'][0], inner['h'][0])
    c, steps = X, []
    for _ in range(4):
      steps.append(jnp.sin(c))
      c = 3 * jnp.sin(c)
    np.testing.assert_allclose(outer['h'][0], np.stack(steps), rtol=1e-6)

  @parameterized.named_parameters(*EAGER_AND_JIT)
  def test_sees_the_value_an_inner_plant_planted(self, wrap):
    planted = jnp.array([5.0, 6.0, 7.0])
    out, outer = wrap(capture(plant(g, {'h': (planted,)}),
                              see_through=True))(X)
    np.testing.assert_array_equal(outer['h'][0], planted)
    np.testing.assert_array_equal(out, 3 * planted)
    # A function plant: the value it computes.
    out, outer = wrap(capture(plant(g, {'h': lambda v, i: v + 1}),
                              see_through=True))(X)
    np.testing.assert_array_equal(outer['h'][0], jnp.sin(X) + 1)

  def test_nested_see_through_captures_each_get_every_value(self):
    ((_, a), b), c = capture(
        capture(capture(g), see_through=True), see_through=True)(X)
    for collected in (a, b, c):
      self.assertEqual(list(collected), ['h', 'm'])
      np.testing.assert_array_equal(collected['h'][0], jnp.sin(X))

  def test_a_selection_applies_to_what_it_sees_through(self):
    (_, inner), outer = capture(capture(g), see_through=True,
                                tag='metrics')(X)
    self.assertEqual(list(inner), ['h', 'm'])
    self.assertEqual(list(outer), ['m'])

  def test_a_jit_traced_under_a_plain_capture_is_traced_again(self):
    # The number of see-through captures running is in JAX's jit key: a
    # trace made without the copies is not reused where they are needed.
    inner = jax.jit(capture(g))
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', inner_calls.TakenByInnerCall)
      _, plain = capture(inner)(X)
    self.assertEqual(list(plain), [])
    _, seen = capture(inner, see_through=True)(X)
    self.assertEqual(list(seen), ['h', 'm'])
    np.testing.assert_array_equal(seen['h'][0], jnp.sin(X))

  def test_through_nnx_capture(self):
    block = Block()

    def run(x):
      return nnx.capture(block, nnx.Intermediate)(x)

    with capture_compat.install():
      (out, state), outer = capture(run, see_through=True)(X)
    np.testing.assert_array_equal(outer['h'][0], state['h'].get_value()[0])
    np.testing.assert_array_equal(outer['h'][0], jnp.sin(X))
    np.testing.assert_array_equal(out, 3 * X)

  def test_see_through_must_be_a_bool(self):
    with self.assertRaisesRegex(TypeError, 'see_through must be True or'):
      capture(g, see_through='yes')


class NamesTheInnerCallTest(parameterized.TestCase):

  @parameterized.named_parameters(*EAGER_AND_JIT)
  def test_a_capture_of_everything_warns(self, wrap):
    with self.assertWarnsRegex(
        inner_calls.TakenByInnerCall,
        r"capture: 'h', 'm' were taken by capture\(g\) inside the call.*"
        'see_through=True'):
      (_, inner), outer = wrap(capture(capture(g)))(X)
    self.assertEqual(list(inner), ['h', 'm'])
    self.assertEqual(list(outer), [])

  def test_what_the_outer_capture_still_sees_is_not_named(self):
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      (_, inner), outer = capture(capture(g, tag='metrics'))(X)
    self.assertEqual(list(outer), ['h'])
    (warning,) = caught
    self.assertIn("'m' was taken by capture(g)", str(warning.message))
    self.assertNotIn("'h'", str(warning.message))

  def test_a_name_selected_but_taken_is_an_error_naming_the_call(self):
    with self.assertRaisesRegex(
        ValueError, r"selected no sow.*'h' was taken by capture\(g\) inside"
        ' the call'):
      capture(capture(g), names=['h'])(X)

  def test_an_inner_plant_is_named(self):
    with self.assertWarnsRegex(inner_calls.TakenByInnerCall,
                               r"'h' was taken by plant\(g\)"):
      _, outer = capture(plant(g, {'h': (X,)}))(X)
    self.assertEqual(list(outer), ['m'])

  @parameterized.named_parameters(
      ('spelling', 'layers.1.h'), ('pattern', 'layers.*.h'))
  def test_an_inner_plant_by_spelling_or_pattern_is_named(self, key):
    def layers(x):
      for i in range(2):
        x = sow(x + 1.0, name=('layers', i, 'h'))
      return x

    fn = ((lambda v, i: v) if '*' not in key else (lambda v, i, n: v))
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      capture(plant(layers, {key: fn}))(X)
    (warning,) = caught
    taken = ("('layers', 1, 'h')" if '*' not in key
             else "('layers', 0, 'h'), ('layers', 1, 'h') were")
    self.assertIn(f'{taken}', str(warning.message))
    self.assertIn('taken by plant(', str(warning.message))

  def test_a_plant_around_a_capture_names_it(self):
    for run in (lambda f: f, jax.jit):
      with self.assertRaisesRegex(
          ValueError, r"never sows 'h'.*'h' was taken by capture\(g\) inside"
          r' the call.*capture\(plant\(f, \.\.\.\), see_through=True\)'):
        run(plant(capture(g), {'h': (X,)}))(X)

  def test_an_inner_nnx_capture_is_named_with_its_module(self):
    block = Block()
    with capture_compat.install(), self.assertWarnsRegex(
        inner_calls.TakenByInnerCall,
        r"\('h',\) was taken by nnx.capture\(Block, Intermediate\)"):
      capture(lambda x: nnx.capture(block, nnx.Intermediate)(x))(X)

  def test_no_warning_when_nothing_was_taken(self):
    with warnings.catch_warnings():
      warnings.simplefilter('error', inner_calls.TakenByInnerCall)
      # The inner capture takes only 'm'; the outer sees 'h' and selects
      # nothing else.
      (_, inner), outer = capture(capture(g, tag='metrics'), names=['h'])(X)
    self.assertEqual(list(inner), ['m'])
    self.assertEqual(list(outer), ['h'])


if __name__ == '__main__':
  absltest.main()
