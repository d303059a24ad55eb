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
"""The rule of ``cond``/``switch`` (``transform/rules/cond.py``): the taken
branch's sows, branches that must agree, and a cond under ``vmap``.
"""

from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
from jax.interpreters import batching
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import sow
from flax.nnx.sow.transform import _jax

import sow_testing


X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


class CondTest(parameterized.TestCase):

  @parameterized.named_parameters(('true', 1.0), ('false', -1.0))
  def test_cond(self, sign):
    def f(x):
      return lax.cond(x[0] > 0, lambda y: sow(y * 2, name='b') + 1,
                      lambda y: sow(y * 3, name='b') - 1, x)

    x = X.at[0].set(sign)
    out, collected = capture(f)(x)
    factor = 2 if sign > 0 else 3
    np.testing.assert_array_equal(collected['b'][0], x * factor)
    np.testing.assert_array_equal(out, f(x))

  def test_switch(self):
    branches = [lambda y, k=k: sow({'v': y + k}, name='s') for k in range(3)]
    f = lambda i, x: lax.switch(i, branches, x)
    for i in range(3):
      _, collected = jax.jit(capture(f))(i, X)
      np.testing.assert_array_equal(collected['s'][0]['v'], X + i)

  @parameterized.named_parameters(('true', 1.0), ('false', -1.0))
  def test_cond_of_constants_after_a_collected_sow_under_jit(self, sign):
    # A sow staged straight into the capture's trace is collected there,
    # and the cond then holds the only sow equations; on JAX 0.10.0 and
    # 0.10.1 the staging trace keeps effectful equations behind closures,
    # which the capture once failed to read, losing 'kc' (issue 50).
    def f(x):
      sow(x, name='a')
      kc = lax.cond(x[0] > 0, lambda: sow(jnp.full(2, 5.0), name='kc'),
                    lambda: sow(jnp.full(2, 7.0), name='kc'))
      return x[:2] + kc

    x = X.at[0].set(sign)
    out, collected = jax.jit(capture(f))(x)
    self.assertEqual(sorted(collected), ['a', 'kc'])
    constant = 5.0 if sign > 0 else 7.0
    np.testing.assert_array_equal(collected['a'][0], x)
    np.testing.assert_array_equal(collected['kc'][0], np.full(2, constant))
    np.testing.assert_array_equal(out, x[:2] + constant)

  @parameterized.named_parameters(
      ('names', lambda y: sow(y, name='a'), lambda y: sow(y, name='b')),
      ('missing', lambda y: sow(y, name='a'), lambda y: y),
      ('structure', lambda y: sow(y, name='a'),
       lambda y: sow((y,), name='a')[0]),
      ('shape', lambda y: (sow(y, name='a'), y)[1],
       lambda y: (sow(y[:2], name='a'), y)[1]),
      ('dtype', lambda y: (sow(y, name='a'), y)[1],
       lambda y: (sow(y.astype(jnp.int32), name='a'), y)[1]),
  )
  def test_cond_branches_must_agree(self, true_fun, false_fun):
    f = lambda x: lax.cond(x[0] > 0, true_fun, false_fun, x)
    with self.assertRaisesRegex(
        ValueError, r'(?s)branches of a cond/switch.*branch 0 sows.*branch 1'
    ):
      capture(f)(X)
    # With the cond's sows not selected, it runs.
    g = lambda x: f(sow(x, name='unrelated'))
    out, collected = capture(g, names=['unrelated'])(X)
    np.testing.assert_array_equal(out, f(X))
    self.assertEqual(list(collected), ['unrelated'])

  def test_deep_nesting(self):
    # jit inside scan inside cond inside custom_vjp.
    @jax.jit
    def leaf(c):
      return sow(jnp.sin(c), name='deep') * 2

    def scanned(x):
      return lax.scan(lambda c, _: (leaf(c), None), x, None, length=3)[0]

    @jax.custom_vjp
    def outer(x):
      return lax.cond(x[0] > -10, scanned, lambda y: scanned(y * 0), x)

    outer.defvjp(lambda x: (outer(x), None), lambda _, g: (g,))

    out, collected = capture(outer)(X)
    expected, steps = np.asarray(X), []
    for _ in range(3):
      steps.append(np.sin(expected))
      expected = np.sin(expected) * 2
    sow_testing.assert_close(collected['deep'][0], np.stack(steps))
    sow_testing.assert_close(out, expected)


class CondModesTest(parameterized.TestCase):

  def test_cond_branches_must_agree_on_mode(self):
    def f(x):
      return lax.cond(x[0] > 0, lambda y: sow(y, name='m'),
                      lambda y: sow(y, name='m', mode='clobber'), x)

    with self.assertRaisesRegex(
        ValueError, r"(?s)branch 0 sows 'm' \(clobber.*branch 1 sows 'm' "
        r'\(append'
    ):
      capture(f)(X)


class BatchedCondTest(absltest.TestCase):
  """capture(jax.vmap(f)) where vmap batches the control flow of ``f``."""

  def test_jax_cond_batching_rule_is_jax_own(self):
    # The batched-index refusal lives in sow_p.bind: importing flax.nnx.sow
    # replaces no rule of JAX for the whole process.
    rule = batching.fancy_primitive_batchers[lax.cond_p]
    self.assertEqual(rule.__module__, 'jax._src.lax.control_flow.conditionals')

  def test_vmap_of_cond_with_batched_index_refuses_nested_sows(self):
    # The refusal comes from binding a sow under JAX's cond batching rule
    # (no global patch of that rule): sows nested in a jit or in an inner
    # cond of a branch are reached too.
    xs = jnp.stack([X, -X])
    jitted = lambda v: lax.cond(
        v[0] > 0, jax.jit(lambda u: sow(u * 2, name='j')),
        jax.jit(lambda u: sow(u * 3, name='j')), v)
    with self.assertRaisesRegex(NotImplementedError, r"\('j'\)"):
      capture(jax.vmap(jitted))(xs)

    def inner_cond(v):
      # The inner index is a constant of the branch, so it stays unbatched
      # (and the inner cond a cond) while the outer index is batched.
      branch = lambda u: lax.cond(jnp.array(True), lambda w: sow(w, name='i'),
                                  lambda w: sow(-w, name='i'), u)
      return lax.cond(v[0] > 0, branch, branch, v)

    with self.assertRaisesRegex(NotImplementedError, r"\('i'\)"):
      capture(jax.vmap(inner_cond))(xs)

  def test_vmap_of_cond_with_traced_unbatched_index_is_captured(self):
    # A traced index that does not depend on the mapped inputs keeps the
    # cond: each example takes the same branch. Oracle: that branch by hand.
    xs = jnp.stack([X, -X])
    f = lambda v, i: lax.switch(i, [lambda u: sow(u * 2, name='b'),
                                    lambda u: sow(u * 3, name='b')], v)
    for i, factor in ((0, 2), (1, 3)):
      out, collected = capture(jax.vmap(f, in_axes=(0, None)))(
          xs, jnp.int32(i))
      self.assertLen(collected['b'], 1)
      np.testing.assert_array_equal(collected['b'][0], np.asarray(xs) * factor)
      np.testing.assert_array_equal(out, np.asarray(xs) * factor)

  def test_contract_the_cond_batching_rule_names_its_locals(self):
    # The refusal reads the locals `index_dim` and `branches` of JAX's cond
    # batching rule (`_jax.branches_of_batched_cond`): the day JAX renames
    # them, this fails, naming them.
    code = _jax._COND_BATCHING_CODE
    for name in _jax.COND_BATCHING_LOCALS:
      self.assertIn(name, code.co_varnames,
                    f'{code.co_name} no longer has a local {name!r}')
    self.assertTrue(_jax._COND_LOCALS_READABLE)

  def test_without_the_locals_every_sow_under_the_rule_is_refused(self):
    # On a JAX whose rule names them otherwise, a sow bound under its frame
    # is refused whether or not the index is batched: never recorded for
    # branches an example did not take.
    xs = jnp.stack([X, -X])
    f = lambda v, i: lax.switch(i, [lambda u: sow(u * 2, name='b'),
                                    lambda u: sow(u * 3, name='b')], v)
    batched = lambda v: lax.cond(v[0] > 0, lambda u: sow(u, name='c'),
                                 lambda u: sow(-u, name='c'), v)
    with mock.patch.object(_jax, '_COND_LOCALS_READABLE', False):
      with self.assertRaisesRegex(NotImplementedError, r"\('c'\)"):
        capture(jax.vmap(batched))(xs)
      with self.assertRaisesRegex(NotImplementedError, r"\('b'\)"):
        capture(jax.vmap(f, in_axes=(0, None)))(xs, jnp.int32(0))
    # With them, the unbatched index is captured (the test above).
    _, collected = capture(jax.vmap(f, in_axes=(0, None)))(xs, jnp.int32(0))
    np.testing.assert_array_equal(collected['b'][0], np.asarray(xs) * 2)


class ConstantsInBodiesTest(parameterized.TestCase):

  def test_constants_and_literals_survive(self):
    const = np.arange(3.0, dtype=np.float32)

    def f(x):
      sow(1.5, name='literal')
      sow(const, name='const')
      x = jax.jit(lambda y: (sow(2.0, name='jit_literal'), y)[1])(x)
      x = lax.cond(x[0] < 0, lambda y: (sow(3.0, name='cond_literal'), y)[1],
                   lambda y: (sow(4.0, name='cond_literal'), y)[1], x)
      x = lax.scan(lambda c, _: ((sow(const, name='scan_const'), c)[1], None),
                   x, None, length=2)[0]
      return x

    for run in (capture(f), jax.jit(capture(f))):
      _, collected = run(X)
      self.assertEqual(float(collected['literal'][0]), 1.5)
      np.testing.assert_array_equal(collected['const'][0], const)
      self.assertEqual(float(collected['jit_literal'][0]), 2.0)
      self.assertEqual(float(collected['cond_literal'][0]), 3.0)
      np.testing.assert_array_equal(
          collected['scan_const'][0], np.stack([const, const])
      )


class NestedScanAndCondTest(parameterized.TestCase):
  """Sites of equal shape in one body: each value goes to its own name."""

  def test_nested_scan_and_cond_orders(self):
    xs = jnp.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]])

    def f(xs):
      def outer(c, row):
        def inner(c2, y):
          p = sow(y * 2, name='p')
          q = lax.cond(
              y > 0,
              lambda y: sow(y + 10, name='q'),
              lambda y: sow(y - 10, name='q'),
              y,
          )
          r = sow(y * 3, name='r')
          return c2 + p + q + r, None

        c = lax.scan(inner, c, row)[0]
        return sow(c, name='row_total'), None

      return lax.scan(outer, 0.0, xs)[0]

    out, collected = capture(f)(xs)
    x = np.asarray(xs)
    q = np.where(x > 0, x + 10, x - 10)
    np.testing.assert_array_equal(collected['p'][0], x * 2)
    np.testing.assert_array_equal(collected['q'][0], q)
    np.testing.assert_array_equal(collected['r'][0], x * 3)
    totals, total = [], np.float32(0)
    for i in range(2):  # in the program's order of additions
      for j in range(3):
        total = total + x[i, j] * 2 + q[i, j] + x[i, j] * 3
      totals.append(total)
    sow_testing.assert_close(collected['row_total'][0], np.array(totals))
    sow_testing.assert_close(out, totals[-1])


if __name__ == '__main__':
  absltest.main()
