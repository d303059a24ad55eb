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
"""The eager interpretation: a trace that sees each bind as it happens.

``eager.run`` runs a call under ``EagerTrace``, which records the sows a
``Scope``'s request handles as they are bound, with concrete values, and
hands every other primitive to JAX's eager evaluation (``eager.py``).
"""

from absl.testing import absltest
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow.transform import eager
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.selection import Selection


sow = primitive.sow
X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


def f(x):
  y = sow(jnp.sin(x), name='a')
  z = sow(y * 2, name='b', tag='t')
  sow(z + y, name='a')
  return z + 1


def run(fun, *args, request=Request(Selection())):
  scope = Scope(request)
  out = eager.run(scope, lambda: fun(*args))
  return out, scope


def named(scope):
  return [site.name for site, _ in scope.records]


class EagerTraceTest(absltest.TestCase):

  def test_records_concrete_values_as_they_are_bound(self):
    out, scope = run(f, X)
    np.testing.assert_array_equal(out, f(X))
    self.assertEqual(named(scope), ['a', 'b', 'a'])
    for _, (value,) in scope.records:
      self.assertIsInstance(value, jax.Array)
      self.assertNotIsInstance(value, jax.core.Tracer)
    np.testing.assert_array_equal(scope.records[1][1][0], jnp.sin(X) * 2)

  def test_the_python_runs_on_every_call(self):
    calls = []

    def counted(x):
      calls.append(1)
      return sow(x, name='x')

    for _ in range(3):
      run(counted, X)
    self.assertLen(calls, 3)

  def test_unhandled_sows_reach_the_enclosing_interpretation(self):
    inner = Scope(Request(Selection(tag='t')))
    outer = Scope(Request(Selection()))
    out = eager.run(outer, lambda: eager.run(inner, lambda: f(X)))
    np.testing.assert_array_equal(out, f(X))
    self.assertEqual(named(inner), ['b'])
    self.assertEqual(named(outer), ['a', 'a'])

  def test_where_it_can_run(self):
    self.assertTrue(eager.can_run())
    self.assertTrue(run(eager.can_run)[0])
    seen = []
    jax.jit(lambda x: seen.append(eager.can_run()) or x)(X)
    self.assertEqual(seen, [False])

  def test_a_custom_jvp_function_runs_its_python_under_the_trace(self):
    @jax.custom_jvp
    def g(x):
      return sow(jnp.sin(x), name='inside')

    g.defjvp(lambda p, t: (g(*p), jnp.cos(p[0]) * t[0]))
    out, scope = run(g, X)
    np.testing.assert_array_equal(out, jnp.sin(X))
    self.assertEqual(named(scope), ['inside'])

  def test_a_jit_without_sows_is_called_as_it_is(self):
    g = jax.jit(lambda x: jnp.cos(x) * 2)
    out, scope = run(lambda x: sow(g(x), name='out'), X)
    np.testing.assert_array_equal(out, g(X))
    self.assertEqual(named(scope), ['out'])

  def test_a_higher_order_primitive_with_a_sow_and_no_rule_is_refused(self):
    def solve(b):
      return lax.custom_linear_solve(
          lambda v: sow(v * 2, name='v'), b, lambda mv, r: r / 2,
          symmetric=True)

    with self.assertRaisesRegex(
        NotImplementedError,
        r"primitive 'custom_linear_solve' .* contains sows 'v'"):
      run(solve, X)


if __name__ == '__main__':
  absltest.main()
