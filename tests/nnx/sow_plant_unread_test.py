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
"""Planting where it cannot change anything, and NumPy integers in names.

A sow whose result the function never reads takes a planted value without
effect: ``plant`` refuses it, naming the sow and the user's line, wherever
the sow is (top level, ``jit``, ``scan``, ``cond``). A layer index from
``np.arange`` is the int it holds, in every place a name is given.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture, perturb, plant, sow

X = jnp.arange(3.0)


def _unread_top(x):
  sow(x * 2, name='unread')  # the result is dropped
  return x + 1


def _unread_in_jit(x):
  return jax.jit(_unread_top)(x)


def _unread_in_scan(x):
  def body(carry, x):
    sow(x * 2, name='unread')
    return carry + x, None

  return jax.lax.scan(body, 0.0, x)[0] + x


def _unread_in_cond(x):
  # Both branches sow the same names, as capture requires.
  def branch(x, scale):
    sow(x * scale, name='unread')
    return x + scale

  return jax.lax.cond(
      x[0] > -1, lambda x: branch(x, 2.0), lambda x: branch(x, 3.0), x
  )


_UNREAD = {
    'top': (_unread_top, 1),
    'jit': (_unread_in_jit, 1),
    'scan': (_unread_in_scan, 1),
    'cond': (_unread_in_cond, 1),
}


class UnreadSowTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(k, *v) for k, v in _UNREAD.items()])
  def test_planting_an_unread_sow_is_refused(self, f, count):
    out, collected = capture(f)(X)
    self.assertLen(collected['unread'], count)  # it is a sow, and it runs
    with self.assertRaisesRegex(
        ValueError,
        r"plant: the sow 'unread' \(tag=None, at .*"
        r'sow_plant_unread_test.py:\d+ .*never uses',
    ):
      plant(f, {'unread': collected['unread']})(X)
    # Capturing it is still fine, and so is planting another name.
    self.assertTrue(bool((capture(f)(X)[0] == out).all()))

  def test_a_read_sow_next_to_it_is_planted(self):
    def f(x):
      sow(x * 2, name='unread')
      return sow(x * 3, name='read') + 1

    np.testing.assert_array_equal(
        plant(f, {'read': (jnp.zeros(3),)})(X), jnp.ones(3)
    )

  def test_partly_read_value_is_planted(self):
    # One leaf of two is read: planting changes that leaf's use.
    def f(x):
      a, _ = sow((x, 2 * x), name='pair')
      return a + 1

    np.testing.assert_array_equal(
        plant(f, {'pair': ((jnp.zeros(3), jnp.zeros(3)),)})(X), jnp.ones(3)
    )

  def test_result_read_only_as_scan_output_is_planted(self):
    # Read by the body's outputs (the scan's ys): not unread, even though
    # the caller drops the ys; planting changes the ys.
    def f(xs):
      def body(c, x):
        return c, sow(x, name='y')

      return jax.lax.scan(body, 0.0, xs)[1]

    np.testing.assert_array_equal(
        plant(f, {'y': (jnp.full(3, 7.0),)})(X), jnp.full(3, 7.0)
    )


class NumpyIntegerNamesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('int64', np.int64), ('int32', np.int32), ('uint8', np.uint8)
  )
  def test_numpy_integers_are_ints_in_names(self, kind):
    def f(x):
      for i in np.arange(3).astype(kind):
        x = sow(x + 1, name=('layers', i))
      return x

    _, collected = capture(f)(X)
    self.assertEqual(
        list(collected), [('layers', 0), ('layers', 1), ('layers', 2)]
    )
    for name in collected:
      self.assertIs(type(name[1]), int)
    # Selected and planted with either form of the index.
    _, one = capture(f, names=[('layers', kind(1))])(X)
    self.assertEqual(list(one), [('layers', 1)])
    planted = plant(f, {('layers', kind(1)): (jnp.zeros(3),)})(X)
    np.testing.assert_array_equal(planted, jnp.ones(3))

  def test_perturb_name_with_numpy_integer(self):
    def loss(x):
      return jnp.sum(perturb(x, name=('grad', np.int64(0))) ** 2)

    _, collected = capture(jax.grad(loss))(X)
    self.assertEqual(list(collected), [('grad', 0)])
    np.testing.assert_array_equal(collected[('grad', 0)][0], 2 * X)

  @parameterized.named_parameters(
      ('bool', True), ('numpy_bool', np.bool_(True)), ('float', 1.0),
      ('numpy_float', np.float32(1.0)),
  )
  def test_other_scalars_are_still_refused(self, part):
    with self.assertRaisesRegex(TypeError, 'name must be a str or'):
      sow(X, name=('layers', part))


if __name__ == '__main__':
  absltest.main()
