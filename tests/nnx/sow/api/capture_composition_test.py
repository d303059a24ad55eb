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
"""``capture`` composed with JAX's transformations: ``jit``, ``vmap`` and
``grad`` around it and inside it, and what a staged capture compiles to.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import sow
from flax.nnx.sow import sow_p

import sow_testing


X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


def count_sows(jaxpr) -> int:
  """Number of sow equations in a jaxpr, at any depth."""
  n = 0
  for eqn in jaxpr.eqns:
    if eqn.primitive is sow_p:
      n += 1
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      n += count_sows(sub)
  return n


class CompositionTest(parameterized.TestCase):

  @staticmethod
  def f(x):
    h = sow(jnp.tanh(x * 2.0), name='h')
    return jnp.sum(h**2)

  def test_jit_of_capture_is_one_computation(self):
    jaxpr = jax.make_jaxpr(jax.jit(capture(self.f)))(X)
    self.assertLen(jaxpr.eqns, 1)
    self.assertEqual(jaxpr.eqns[0].primitive.name, 'jit')
    self.assertEqual(count_sows(jaxpr.jaxpr), 0)
    self.assertEqual(jaxpr.effects, set())
    out, collected = jax.jit(capture(self.f))(X)
    sow_testing.assert_close(collected['h'][0], jnp.tanh(X * 2))
    sow_testing.assert_close(out, self.f(X))

  @staticmethod
  def first_order(x):
    h = sow(jnp.tanh(x * 2.0), name='h')
    sow({'sum': jnp.sum(h), 'two': 2.0}, name='stats', tag='metrics')
    sow(h * 3.0, name='other', tag='other')
    return jnp.sum(h**2)

  def first_order_by_hand(self, x):
    h = np.tanh(np.asarray(x) * 2.0)
    return np.sum(h**2), h

  def test_staged_first_order_capture_is_one_closed_call(self):
    # Only copying equations: staged as one call of a rewritten jaxpr.
    jaxpr = jax.make_jaxpr(capture(self.first_order, tag='metrics'))(X)
    self.assertLen(jaxpr.eqns, 1)
    self.assertIs(jaxpr.eqns[0].primitive, jax.extend.core.primitives.
                  closed_call_p)
    self.assertEqual(count_sows(jaxpr.jaxpr), 2)  # 'h' and 'other' stay
    self.assertEqual(jaxpr.effects, set())
    with jax.enable_checks(True):
      out, collected = jax.jit(capture(self.first_order))(X)
    expected_out, h = self.first_order_by_hand(X)
    sow_testing.assert_close(out, expected_out)
    self.assertEqual(list(collected), ['h', 'stats', 'other'])
    sow_testing.assert_close(collected['h'][0], h)
    sow_testing.assert_close(collected['stats'][0]['sum'], h.sum())
    self.assertEqual(collected['stats'][0]['two'], 2.0)
    sow_testing.assert_close(collected['other'][0], 3 * h)

  def test_staged_rewrite_compiles_like_returning_the_values(self):
    def by_hand(x):
      h = jnp.tanh(x * 2.0)
      return jnp.sum(h**2), h, jnp.sum(h), 2.0, h * 3.0

    def ops(f):
      text = jax.jit(f).lower(X).compile().as_text()
      return sorted(
          line.split('=', 1)[1].split('(', 1)[0].split()[-1]
          for line in text.splitlines()
          if ' = ' in line and not line.lstrip().startswith('ROOT')
      )

    self.assertEqual(ops(capture(self.first_order)), ops(by_hand))

  def test_vmap_of_capture(self):
    xs = jnp.stack([X, X * 2, X * 3, X * 4])
    out, collected = jax.vmap(capture(self.f))(xs)
    sow_testing.assert_close(collected['h'][0], jnp.tanh(xs * 2))
    sow_testing.assert_close(out, jax.vmap(self.f)(xs))

  @parameterized.named_parameters(('axis0', 0), ('axis1', 1))
  def test_capture_of_vmap_has_batch_axis_leading(self, in_axis):
    xs = jnp.stack([X, X * 2, X * 3, X * 4], axis=in_axis)
    const = jnp.ones(2)

    def g(x):
      sow({'batched': x * 2, 'unbatched': const}, name='v')
      return x

    _, collected = capture(jax.vmap(g, in_axes=in_axis))(xs)
    np.testing.assert_array_equal(
        collected['v'][0]['batched'], jnp.moveaxis(xs, in_axis, 0) * 2
    )
    # A value that does not depend on the mapped inputs gets the axis too,
    # as jax.vmap's outputs do: each example has its own entry.
    np.testing.assert_array_equal(
        collected['v'][0]['unbatched'], jnp.broadcast_to(const, (4, 2))
    )

  def _assert_same_layout(self, f, xs):
    _, got = capture(jax.vmap(f))(xs)
    _, want = jax.vmap(capture(f))(xs)
    self.assertEqual(list(got), list(want))
    for name in want:
      for g, w in zip(jax.tree.leaves(got[name]), jax.tree.leaves(want[name])):
        np.testing.assert_array_equal(g, w, err_msg=repr(name))
    return got

  def test_grad_through_capture_equals_grad(self):
    grad = jax.grad(lambda x: capture(self.f)(x)[0])(X)
    sow_testing.assert_close(grad, jax.grad(self.f)(X))
    # and against the analytic derivative of sum(tanh(2x)^2)
    t = np.tanh(2 * np.asarray(X))
    sow_testing.assert_close(grad, 4 * t * (1 - t**2))

  def test_grad_of_captured_values(self):
    def collected_sum(x):
      return jnp.sum(capture(self.f)(x)[1]['h'][0])

    t = np.tanh(2 * np.asarray(X))
    sow_testing.assert_close(jax.grad(collected_sum)(X), 2 * (1 - t**2))

  def test_capture_under_outer_trace_with_closure(self):
    @jax.jit
    def outer(x, y):
      return capture(lambda v: sow(v * y, name='vy'))(x)

    out, collected = outer(X, jnp.float32(3.0))
    np.testing.assert_array_equal(collected['vy'][0], X * 3)
    np.testing.assert_array_equal(out, X * 3)

  def test_compiled_artifact_contract(self):
    compiled = jax.jit(capture(self.f)).lower(X).compile()
    for x in (X, X + 0.5):
      out, collected = compiled(x)
      sow_testing.assert_close(collected['h'][0], jnp.tanh(x * 2))
      sow_testing.assert_close(out, self.f(x))
    with self.assertRaises(TypeError):
      compiled(jnp.ones(4))

  def test_eager_capture_of_jit_with_changing_argument_kinds(self):
    # The compiled runners are found by tree and leaf types: a Python number
    # where an array was, and back, must each get a runner of their own.
    captured = capture(jax.jit(lambda x, n: sow(x * n, name='xn') + 1))
    for x, n in ((X, 2.0), (np.asarray(X), 2.0), (X, jnp.float32(3.0)),
                 (2.0, 4), (X, 2.0)):
      out, collected = captured(x, n)
      expected = np.asarray(x, np.float32) * np.float32(n)
      sow_testing.assert_close(collected['xn'][0], expected)
      sow_testing.assert_close(out, expected + 1)


class LinearTransposeTest(absltest.TestCase):

  def test_cotangents_pass_through_a_sow(self):
    # The oracle: the transpose of x -> 3 x is ct -> 3 ct.
    def f(x):
      return 3 * sow(x, name='h')

    (ct_x,) = jax.linear_transpose(f, X)(jnp.ones_like(X))
    np.testing.assert_array_equal(ct_x, np.full(3, 3.0, np.float32))


if __name__ == '__main__':
  absltest.main()
