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
"""Planted values: the one check of a planted value, the occurrence
counters and the functions of ``plant(f, {name: fn})`` (``planting.py``)."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow.transform import planting
from flax.nnx.sow.transform import sites


# JAX's default float: float32, or float64 under JAX_ENABLE_X64.
FLOAT = jnp.zeros(()).dtype
PAIR = jax.tree_util.tree_structure((0, 0))


class CheckValueTest(absltest.TestCase):

  def test_the_leaves_of_a_matching_value(self):
    leaves = planting.check_value((1.0, jnp.zeros(2)), PAIR,
                                  [((), FLOAT), ((2,), FLOAT)], where='here')
    self.assertLen(leaves, 2)
    self.assertIsInstance(leaves[0], jax.Array)

  def test_another_structure_shape_or_dtype_is_refused(self):
    avals = [((), FLOAT), ((2,), FLOAT)]
    with self.assertRaisesRegex(ValueError, r'^here has structure'):
      planting.check_value([1.0, jnp.zeros(2)], PAIR, avals, where='here')
    with self.assertRaisesRegex(
        ValueError, rf'^here has a leaf of {FLOAT.name}\[3\], but the sow'
        rf' has {FLOAT.name}\[2\]\.$'):
      planting.check_value((1.0, jnp.zeros(3)), PAIR, avals, where='here')
    with self.assertRaisesRegex(ValueError, 'int32'):
      planting.check_value((1.0, jnp.zeros(2, jnp.int32)), PAIR, avals,
                           where='here')

  def test_what_a_function_returned(self):
    with self.assertRaisesRegex(
        ValueError, r'returned a leaf of .*; it must return a value like the'
        ' one it receives'):
      planting.check_value((1.0, jnp.zeros(3)), PAIR,
                           [((), FLOAT), ((2,), FLOAT)], where='fn',
                           returned=True)


class CounterTest(absltest.TestCase):

  def test_a_static_count(self):
    counter = planting.Counter(0)
    self.assertEqual([counter.next(), counter.next()], [0, 1])
    counter.advance(3, end=None)
    self.assertEqual(counter.index, 5)
    self.assertEqual(counter.static_count, 5)
    self.assertTrue(counter.seen)

  def test_after_a_dynamic_count_only_the_traced_end_is_known(self):
    counter = planting.Counter(0)
    counter.next()
    end = jnp.int32(7)
    counter.advance(None, end)
    self.assertIsNone(counter.static_count)
    self.assertIs(counter.index, end)
    self.assertEqual(int(counter.next()), 7)
    self.assertEqual(int(counter.index), 8)

  def test_a_traced_start(self):
    def indices(start):
      counter = planting.Counter(start)
      return counter.next(), counter.next()

    self.assertEqual(jax.jit(indices)(jnp.int32(4)), (4, 5))


class FunctionsTest(absltest.TestCase):

  def test_fn_gets_each_value_and_its_index(self):
    site = sites.Site('h', None, 'append', jax.tree_util.tree_structure(0),
                      (((3,), FLOAT),))
    fns = planting.Functions({'h': lambda value, i: value * i})
    (out,) = fns.apply(site, [jnp.ones(3)], 2)
    np.testing.assert_array_equal(out, [2.0, 2.0, 2.0])

  def test_fn_maps_over_the_axes_of_vmaps_inside(self):
    site = sites.Site('h', None, 'append', jax.tree_util.tree_structure(0),
                      (((2, 3), FLOAT),), vmapped=1)
    seen = []

    def fn(value, index):
      seen.append(value.shape)
      return value + index

    fns = planting.Functions({'h': fn})
    (out,) = fns.apply(site, [jnp.zeros((2, 3))], 1)
    self.assertEqual(seen, [(3,)])
    np.testing.assert_array_equal(out, np.ones((2, 3)))

  def test_memo_makes_once_per_jaxpr_and_request(self):
    fns = planting.Functions({})
    made = []
    key = object()
    for _ in range(2):
      fns.memo(key, 'request', lambda: made.append(1) or len(made))
    self.assertEqual(made, [1])


class HoistTracersTest(absltest.TestCase):

  def test_tracer_constants_become_the_last_inputs(self):
    def f(outer):
      closed = jax.make_jaxpr(lambda x: x * outer + 1.0)(jnp.ones(2))
      jaxpr, consts, hoisted = planting.hoist_tracers(closed.jaxpr,
                                                      closed.consts)
      self.assertEqual(consts, [])
      self.assertLen(hoisted, 1)
      self.assertLen(jaxpr.invars, 2)
      return jax.core.eval_jaxpr(jaxpr, consts, jnp.ones(2), *hoisted)[0]

    np.testing.assert_array_equal(jax.jit(f)(jnp.float32(3.0)), [4.0, 4.0])

  def test_without_tracers_the_jaxpr_is_kept(self):
    closed = jax.make_jaxpr(lambda x: x + jnp.arange(2.0))(jnp.ones(2))
    jaxpr, consts, hoisted = planting.hoist_tracers(closed.jaxpr,
                                                    closed.consts)
    self.assertIs(jaxpr, closed.jaxpr)
    self.assertEqual(hoisted, [])
    self.assertLen(consts, len(closed.consts))


if __name__ == '__main__':
  absltest.main()
