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
"""The rules of ``custom_jvp``, ``custom_vjp`` and ``custom_vmap`` calls
(``transform/rules/custom_derivatives.py``): their bodies' sows are
captured, their custom rules are kept, and no sow leaks from them.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import sow
from flax.nnx.sow.transform import inner_calls

import sow_testing


X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


class CustomDerivativesTest(parameterized.TestCase):

  def test_custom_jvp_and_custom_vjp_bodies_are_reached(self):
    @jax.custom_jvp
    def cj(x):
      return sow(jnp.sin(x), name='in_jvp_body')

    cj.defjvp(lambda p, t: (cj(p[0]), t[0]))

    @jax.custom_vjp
    def cv(x):
      return sow(x * 2, name='in_vjp_body')

    cv.defvjp(lambda x: (cv(x), None), lambda _, g: (g,))

    out, collected = capture(lambda x: cv(cj(x)))(X)
    sow_testing.assert_close(collected['in_jvp_body'][0], jnp.sin(X))
    sow_testing.assert_close(collected['in_vjp_body'][0], jnp.sin(X) * 2)
    sow_testing.assert_close(out, jnp.sin(X) * 2)

  def test_custom_rules_without_sows_are_kept(self):
    @jax.custom_jvp
    def f(x):
      return jnp.sin(x)

    f.defjvp(lambda p, t: (f(p[0]), 100.0 * t[0]))  # recognisable rule
    g = lambda x: jnp.sum(sow(f(x), name='out'))
    grad, collected = capture(jax.grad(g))(X)
    np.testing.assert_array_equal(grad, jnp.full(3, 100.0))
    grad_through = jax.grad(lambda x: capture(g)(x)[0])(X)
    np.testing.assert_array_equal(grad_through, jnp.full(3, 100.0))
    sow_testing.assert_close(collected['out'][0], jnp.sin(X))

  def test_derivative_rules_calling_the_function_do_not_leak_sows(self):
    # Under differentiation, a rule that calls the function runs its sows
    # again: they must stay inside the capture (found by the fuzzer).
    @jax.custom_vjp
    def f(x):
      sow(x * 3.0, name='h')
      return jnp.sin(x)

    f.defvjp(lambda x: (f(x), None), lambda _, ct: (100.0 * ct,))

    @jax.custom_jvp
    def g(x):
      sow(x * 3.0, name='h')
      return jnp.sin(x)

    g.defjvp(lambda p, t: (g(p[0]), 100.0 * t[0]))
    for fn in (f, g):
      inner = capture(fn)

      def loss(x, inner=inner):
        out, collected = inner(x)
        sow(jnp.sum(collected['h'][0]), name='seen')
        return jnp.sum(out)

      with self.assertWarns(inner_calls.TakenByInnerCall):
        (grad, outer) = capture(jax.grad(loss))(X)
      np.testing.assert_array_equal(grad, jnp.full(3, 100.0))
      self.assertEqual(list(outer), ['seen'])
      sow_testing.assert_close(outer['seen'][0], jnp.sum(X * 3.0))


class CustomRulesWithSowsTest(parameterized.TestCase):

  def test_custom_vjp_rule_is_kept(self):
    @jax.custom_vjp
    def f(x):
      return sow(jnp.sin(x), name='body') * 2

    f.defvjp(lambda x: (f(x), None),
             lambda _, g: (jnp.full_like(g, 7.0),))  # recognisable

    loss = lambda x: jnp.sum(f(x))
    (value, grad), collected = capture(jax.value_and_grad(loss))(X)
    np.testing.assert_array_equal(grad, jnp.full(3, 7.0))
    sow_testing.assert_close(collected['body'][0], np.sin(X))
    sow_testing.assert_close(value, 2 * np.sum(np.sin(X)))
    grad_through = jax.grad(lambda x: jnp.sum(capture(f)(x)[0]))(X)
    np.testing.assert_array_equal(grad_through, jnp.full(3, 7.0))
    self.assertEqual(len(collected['body']), 1)

  def test_custom_jvp_rule_is_kept(self):
    @jax.custom_jvp
    def f(x):
      return sow(jnp.sin(x), name='body')

    f.defjvp(lambda p, t: (f(p[0]), 5.0 * t[0]))
    grad_through = jax.grad(lambda x: jnp.sum(capture(f)(x)[0]))(X)
    np.testing.assert_array_equal(grad_through, jnp.full(3, 5.0))
    grad, collected = jax.jit(capture(jax.grad(lambda x: jnp.sum(f(x)))))(X)
    np.testing.assert_array_equal(grad, jnp.full(3, 5.0))
    sow_testing.assert_close(collected['body'][0], np.sin(X))

  def test_unselected_sows_inside_are_seen_once_by_an_outer_capture(self):
    @jax.custom_vjp
    def f(x):
      sow(x, name='inner', tag='a')
      return sow(x * 2, name='outer', tag='b')

    f.defvjp(lambda x: (f(x), None), lambda _, g: (g,))
    with self.assertWarns(inner_calls.TakenByInnerCall):
      (_, inner), outer = capture(capture(f, tag='a'))(X)
    self.assertEqual(list(inner), ['inner'])
    self.assertEqual(list(outer), ['outer'])
    self.assertLen(outer['outer'], 1)

  def test_unselected_sows_inside_are_seen_once_under_jit(self):
    # Staged, the body evaluated in place is rewritten as one call that
    # drops the sows the inner capture does not select: it records none.
    @jax.custom_vjp
    def f(x):
      sow(x, name='inner', tag='a')
      return sow(x * 2, name='outer', tag='b')

    f.defvjp(lambda x: (f(x), None), lambda _, g: (g,))
    out, inner = jax.jit(capture(f, tag='a'))(X)
    self.assertEqual(list(inner), ['inner'])
    np.testing.assert_array_equal(inner['inner'][0], X)
    np.testing.assert_array_equal(out, X * 2)
    with self.assertWarns(inner_calls.TakenByInnerCall):
      (_, inner), outer = jax.jit(capture(capture(f, tag='a')))(X)
    self.assertEqual(list(inner), ['inner'])
    self.assertEqual(list(outer), ['outer'])
    self.assertLen(outer['outer'], 1)
    np.testing.assert_array_equal(outer['outer'][0], X * 2)



if __name__ == '__main__':
  absltest.main()
