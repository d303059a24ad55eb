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
"""``Steps`` and ``LoopBounds`` (``transform/steps.py``), built by hand: the
mask, truncation and filled steps of a buffer, the bounds a capture asks
for and what it refuses. The loops that make them are tested with the
``while_loop`` rule (``rules/rules_while_steps_test.py``).
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow.transform.steps import holds_steps
from flax.nnx.sow.transform.steps import LoopBounds
from flax.nnx.sow.transform.steps import Steps

VALUES = jnp.arange(12.0).reshape(4, 3)  # 4 steps of a (3,) value


class StepsTest(absltest.TestCase):

  def test_mask_filled_and_truncation(self):
    steps = Steps(VALUES, jnp.int32(2))
    self.assertEqual(steps.axis, 0)
    self.assertEqual(steps.max_steps, 4)
    np.testing.assert_array_equal(steps.mask, [True, True, False, False])
    np.testing.assert_array_equal(steps.filled(), VALUES[:2])
    self.assertFalse(steps.truncated)
    self.assertTrue(Steps(VALUES, jnp.int32(6)).truncated)

  def test_a_count_per_example_puts_the_step_axis_after_it(self):
    steps = Steps({'h': jnp.zeros((2, 5, 3))}, jnp.array([1, 5], jnp.int32))
    self.assertEqual(steps.axis, 1)
    self.assertEqual(steps.max_steps, 5)
    np.testing.assert_array_equal(
        steps.mask, np.arange(5)[None] < np.array([1, 5])[:, None])
    with self.assertRaisesRegex(ValueError, 'needs one concrete count'):
      steps.filled()

  def test_filled_refuses_truncated_and_traced_counts(self):
    with self.assertRaisesRegex(ValueError, 'ran 6 steps, more than the 4'):
      Steps(VALUES, jnp.int32(6)).filled()

    def traced(count):
      return Steps(VALUES, count).filled()

    with self.assertRaisesRegex(ValueError, 'needs one concrete count'):
      jax.jit(traced)(jnp.int32(2))

  def test_is_a_pytree_of_values_and_count(self):
    steps = Steps({'a': VALUES}, jnp.int32(3))
    leaves, tree = jax.tree_util.tree_flatten(steps)
    self.assertLen(leaves, 2)
    doubled = jax.tree_util.tree_map(lambda x: x * 2, steps)
    self.assertIsInstance(doubled, Steps)
    np.testing.assert_array_equal(doubled.values['a'], VALUES * 2)
    self.assertTrue(holds_steps(tree))
    self.assertTrue(holds_steps(jax.tree_util.tree_structure((1, [steps]))))
    self.assertFalse(holds_steps(jax.tree_util.tree_structure((1, [2]))))

  def test_a_value_without_leaves_has_no_max_steps(self):
    with self.assertRaisesRegex(ValueError, 'has no leaves'):
      _ = Steps({}, jnp.int32(0)).max_steps


class LoopBoundsTest(parameterized.TestCase):

  def test_one_bound_for_every_name(self):
    bounds = LoopBounds.make(8, 'error', where='capture')
    self.assertEqual(bounds.bound('h'), 8)
    self.assertEqual(bounds.bound(('layers', 0, 'h')), 8)
    bounds.check_used(set(), where='capture')  # nothing named: nothing unused

  def test_bounds_by_name(self):
    bounds = LoopBounds.make({'h': 3, ('a', 1): 5}, 'truncate',
                             where='capture')
    self.assertEqual(bounds.bound('h'), 3)
    self.assertEqual(bounds.bound(('a', 1)), 5)
    self.assertIsNone(bounds.bound('other'))
    self.assertEqual(bounds.on_overflow, 'truncate')
    bounds.check_used({'h', ('a', 1)}, where='capture')
    with self.assertRaisesRegex(
        ValueError, r"max_steps bounds \('a', 1\), which no while_loop"):
      bounds.check_used({'h'}, where='capture')

  def test_none_bounds_nothing(self):
    self.assertIsNone(LoopBounds.make(None, 'error', where='c').bound('h'))

  def test_hashable_and_equal_by_value(self):
    a = LoopBounds.make({'h': 3}, 'error', where='c')
    b = LoopBounds.make({'h': 3}, 'error', where='c')
    self.assertEqual(a, b)
    self.assertEqual(hash(a), hash(b))
    self.assertNotEqual(a, LoopBounds.make({'h': 4}, 'error', where='c'))

  @parameterized.parameters(0, -2, True, 1.0, '4', None)
  def test_bad_bounds(self, bound):
    if bound is None:
      with self.assertRaisesRegex(ValueError, r"max_steps\['h'\] must be"):
        LoopBounds.make({'h': bound}, 'error', where='capture')
      return
    with self.assertRaisesRegex(ValueError,
                                'capture: max_steps must be a positive int'):
      LoopBounds.make(bound, 'error', where='capture')

  def test_bad_names_and_policies(self):
    with self.assertRaisesRegex(TypeError, 'max_steps'):
      LoopBounds.make({3: 2}, 'error', where='capture')
    with self.assertRaisesRegex(ValueError, 'empty mapping'):
      LoopBounds.make({}, 'error', where='capture')
    with self.assertRaisesRegex(ValueError, 'on_overflow must be one of'):
      LoopBounds.make(3, 'wrap', where='capture')


if __name__ == '__main__':
  absltest.main()
