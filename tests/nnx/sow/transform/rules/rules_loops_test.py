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
"""The rules of ``scan`` and ``while_loop`` (``transform/rules/loops.py``):
values stacked along the loop axis, clobbers, zero-trip loops, the axes of
vmaps and loops nested in each other, and what is refused.
"""

import functools
import gc

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import capture
from flax.nnx.sow import sow
from flax.nnx.sow import sow_p
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import rewrite
from flax.nnx.sow.transform.rules import loops
from flax.nnx.sow.transform import inner_calls

from sow_pytree_models import Clipped, PYTREES, clip, lo_hi  # pylint: disable=g-multiple-import
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


def _entries(collected, name):
  return [np.asarray(v) for v in collected[name]]


X_GRAPH_NODES = jnp.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], jnp.float32)


def _info(cached):
  info = cached.cache_info()
  return info.hits, info.misses, info.currsize


class LoopsTest(parameterized.TestCase):

  def test_scan_stacks(self):
    def f(xs):
      def body(c, x):
        sow(c * x, name='cx')
        sow({'c': c}, name='carry')
        return c + x, c
      return lax.scan(body, 1.0, xs)

    xs = jnp.arange(1.0, 5.0)
    out, collected = capture(f)(xs)
    carries = np.array([1.0, 2.0, 4.0, 7.0])
    np.testing.assert_array_equal(collected['cx'][0], carries * np.asarray(xs))
    np.testing.assert_array_equal(collected['carry'][0]['c'], carries)
    np.testing.assert_array_equal(out[1], f(xs)[1])

  def test_reverse_scan(self):
    def f(xs):
      return lax.scan(lambda c, x: (c + x, sow(c, name='c')), 0.0, xs,
                      reverse=True)

    xs = jnp.arange(1.0, 5.0)
    (_, ys), collected = capture(f)(xs)
    # ys and sown values are both indexed like xs.
    np.testing.assert_array_equal(collected['c'][0], ys)
    np.testing.assert_array_equal(ys, [9.0, 7.0, 4.0, 0.0])

  def test_nested_scans_stack_both_axes(self):
    def f(x):
      def outer(c, i):
        def inner(d, j):
          sow(d * 10 + i + j, name='ij')
          return d, None
        return lax.scan(inner, c, jnp.arange(3.0))[0], None
      return lax.scan(outer, x, jnp.arange(2.0))[0]

    _, collected = capture(f)(X)
    got = collected['ij'][0]
    self.assertEqual(got.shape, (2, 3, 3))
    expected = np.asarray(X)[None, None] * 10 + (
        np.arange(2.0)[:, None, None] + np.arange(3.0)[None, :, None]
    )
    sow_testing.assert_close(got, expected)

  def test_fori_loop_static_and_map(self):
    def f(x):
      x = lax.fori_loop(0, 4, lambda i, c: sow(c + i, name='fori'), x)
      return lax.map(lambda r: sow(r * 2, name='map'), x)

    _, collected = capture(f)(X)
    # c_{i+1} = c_i + i, sown after the addition.
    # The same additions in the same order: bitwise.
    fori_expected = np.stack([X, X + 1, X + 1 + 2, X + 1 + 2 + 3])
    np.testing.assert_array_equal(collected['fori'][0], fori_expected)
    np.testing.assert_array_equal(collected['map'][0], (X + 1 + 2 + 3) * 2)

  def test_while_loop_with_sows_is_refused(self):
    def f(x):
      return lax.while_loop(lambda c: c[0] < 5,
                            lambda c: sow(c + 1, name='step'), x)

    with self.assertRaisesRegex(
        NotImplementedError, r"while_loop .* sows 'step'"
    ):
      capture(f)(X)

  def test_fori_loop_with_traced_bounds_is_refused(self):
    def f(x, n):
      return lax.fori_loop(0, n, lambda i, c: sow(c + i, name='dyn'), x)

    with self.assertRaisesRegex(NotImplementedError, "while_loop .*'dyn'"):
      jax.jit(capture(f))(X, jnp.int32(3))
    # Eagerly the bounds are concrete, as in a direct call: a scan.
    out, collected = capture(f)(X, jnp.int32(3))
    np.testing.assert_array_equal(out, f(X, 3))
    # The carry after each step: c + i for i = 0, 1, 2.
    np.testing.assert_array_equal(
        collected['dyn'][0], np.stack([X, X + 1, X + 3])
    )

  def test_while_loop_without_selected_sows_runs(self):
    def f(x):
      x = sow(x, name='before')
      return lax.while_loop(
          lambda c: c[0] < 5, lambda c: sow(c + 1, name='other'), x
      )

    out, collected = capture(f, names=['before'])(X)
    np.testing.assert_array_equal(out, f(X))
    np.testing.assert_array_equal(collected['before'][0], X)
    (out, _), outer = capture(capture(lambda x: jnp.sum(x)))(X)
    self.assertEqual(outer, {})


class SownKeysTest(parameterized.TestCase):

  @parameterized.parameters(False, True)
  def test_a_sown_prng_key(self, jit):
    # A key's dtype is one of JAX's extended dtypes, which NumPy cannot
    # represent (found by the NNX fuzzer, as an internal TypeError); sown
    # directly and from a scan body.
    key = jax.random.key(0)

    def f(key):
      key = sow(jax.random.split(key)[0], name='k')
      keys = lax.scan(lambda k, _: (k, sow(jax.random.fold_in(k, 1),
                                            name='ks')), key, None,
                      length=3)[1]
      return jax.random.normal(key, (2,)), keys

    run = jax.jit(capture(f)) if jit else capture(f)
    _, collected = run(key)
    (k,), (ks,) = collected['k'], collected['ks']
    self.assertTrue(jax.dtypes.issubdtype(k.dtype, jax.dtypes.prng_key))
    np.testing.assert_array_equal(
        jax.random.key_data(k), jax.random.key_data(jax.random.split(key)[0]))
    self.assertEqual(ks.shape, (3,))
    np.testing.assert_array_equal(
        jax.random.key_data(ks),
        jax.random.key_data(jnp.stack([jax.random.fold_in(k, 1)] * 3)))


class LoopModesTest(parameterized.TestCase):
  """The modes of sows inside loops."""

  @parameterized.named_parameters(('forward', False), ('reverse', True))
  def test_clobber_in_scan_is_the_last_iteration(self, reverse):
    xs = jnp.arange(1.0, 5.0)

    def f(xs):
      def body(c, x):
        sow(c * x, name='last', mode='clobber')
        sow(c, name='all')
        return c + x, None
      return lax.scan(body, 1.0, xs, reverse=reverse)[0]

    _, collected = capture(f)(xs)
    carries = []
    c = 1.0
    order = list(np.asarray(xs))[::-1] if reverse else list(np.asarray(xs))
    for x in order:
      carries.append((c, c * x))
      c = c + x
    self.assertEqual(collected['last'][0].shape, ())
    self.assertEqual(float(collected['last'][0]), carries[-1][1])
    self.assertEqual(collected['all'][0].shape, (4,))

  def test_clobber_in_scan_of_length_zero_records_nothing(self):
    def f(x):
      sow(x, name='c', mode='clobber')
      return lax.scan(
          lambda c, _: (sow(c + 1, name='c', mode='clobber'), None), x, None,
          length=0,
      )[0]

    _, collected = capture(f)(X)
    np.testing.assert_array_equal(collected['c'][0], X)  # the value before

  @parameterized.named_parameters(('runs', 0.0, 5.0), ('zero_trips', 9.0, 9.0))
  def test_clobber_in_while_loop(self, start, expected_last):
    def f(x):
      sow(x, name='c', mode='clobber')  # the value for a zero-trip loop
      return lax.while_loop(
          lambda c: c < 5.0, lambda c: sow(c + 1, name='c', mode='clobber'), x
      )

    out, collected = capture(f)(jnp.float32(start))
    self.assertLen(collected['c'], 1)
    self.assertEqual(float(collected['c'][0]), expected_last)
    self.assertEqual(float(out), expected_last)
    _, collected = jax.jit(capture(f))(jnp.float32(start))
    self.assertEqual(float(collected['c'][0]), expected_last)

  def test_clobber_in_while_loop_without_prior_value_is_refused(self):
    def f(x):
      return lax.while_loop(
          lambda c: c < 5.0, lambda c: sow(c + 1, name='c', mode='clobber'), x
      )

    with self.assertRaisesRegex(
        NotImplementedError, r"(?s)clobbers 'c' but may run zero times.*"
        r'nothing was sown under that name before the loop'
    ):
      capture(f)(jnp.float32(0))

  def test_clobber_prior_value_must_match(self):
    def f(x):
      sow(jnp.stack([x, x]), name='c', mode='clobber')
      return lax.while_loop(
          lambda c: c < 5.0, lambda c: sow(c + 1, name='c', mode='clobber'), x
      )

    with self.assertRaisesRegex(NotImplementedError, r"float32\[2\]"):
      capture(f)(jnp.float32(0))

  def test_fori_loop_with_traced_bounds_behaves_as_while_loop(self):
    def f(x, n):
      sow(x, name='c', mode='clobber')
      return lax.fori_loop(
          0, n, lambda i, c: sow(c + i, name='c', mode='clobber'), x
      )

    for n, expected in ((4, 6.0), (0, 0.0)):
      _, collected = jax.jit(capture(f))(jnp.float32(0), jnp.int32(n))
      self.assertEqual(float(collected['c'][0]), expected)

  def test_append_in_while_loop_is_refused(self):
    def f(x):
      return lax.while_loop(lambda c: c < 5.0,
                            lambda c: sow(c + 1, name='step'), x)

    with self.assertRaisesRegex(NotImplementedError,
                                r"while_loop .* sows 'step' with mode='append'"):
      capture(f)(jnp.float32(0))

  def test_sow_in_while_condition_is_refused(self):
    def f(x):
      return lax.while_loop(lambda c: sow(c, name='cond') < 5.0,
                            lambda c: c + 1, x)

    with self.assertRaisesRegex(NotImplementedError, 'condition of a while'):
      capture(f)(jnp.float32(0))


class ZeroTripLoopTest(parameterized.TestCase):

  # Under one tag, the second clobber replaces the first record; under two,
  # both records stay, and the loop must take the later one.
  @parameterized.parameters((None, None), ('first', 'second'))
  def test_zero_trip_while_keeps_the_last_value_sown_before(self, tag1, tag2):
    def f(x, n):
      sow(x, name='s', tag=tag1, mode='clobber')
      sow(x + 1, name='s', tag=tag2, mode='clobber')

      def body(carry):
        i, v = carry
        return i + 1, sow(v * 3, name='s', mode='clobber')

      return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]

    _, collected = jax.jit(capture(f))(X, 0)
    np.testing.assert_array_equal(collected['s'][0], np.asarray(X) + 1)
    _, collected = jax.jit(capture(f))(X, 2)
    sow_testing.assert_close(collected['s'][0], np.asarray(X) * 3 * 3)


  @parameterized.parameters('eager', 'jit')
  def test_zero_trip_scan_gives_every_append_site_an_empty_stack(self, mode):
    # Per iteration the clobber supersedes the append; with no iteration,
    # neither ran: the append site gives the stack of no values, as a scan's
    # ys do, and the clobber nothing (found by the long fuzz profile).
    def f(x, n):
      sow(x * 2, name='s')

      def body(c, _):
        sow(c + 1, name='s')
        return sow(c * 3, name='s', mode='clobber'), None

      return lax.scan(body, x, None, length=n)[0]

    def run(n):
      run = capture(functools.partial(f, n=n))
      return (jax.jit(run) if mode == 'jit' else run)(X)[1]

    collected = run(0)
    self.assertLen(collected['s'], 2)
    np.testing.assert_array_equal(collected['s'][0], np.asarray(X) * 2)
    self.assertEqual(collected['s'][1].shape, (0, 3))
    self.assertEqual(collected['s'][1].dtype, X.dtype)
    # A loop that runs: the last clobber replaces every earlier entry.
    collected = run(2)
    self.assertLen(collected['s'], 1)
    sow_testing.assert_close(collected['s'][0], np.asarray(X) * 9)


class LoopAxesTest(parameterized.TestCase):
  """Where the loop axis goes among the axes of vmaps."""

  @staticmethod
  def f(x):
    h = sow(jnp.tanh(x * 2.0), name='h')
    return jnp.sum(h**2)

  @staticmethod
  def first_order(x):
    h = sow(jnp.tanh(x * 2.0), name='h')
    sow({'sum': jnp.sum(h), 'two': 2.0}, name='stats', tag='metrics')
    sow(h * 3.0, name='other', tag='other')
    return jnp.sum(h**2)

  def first_order_by_hand(self, x):
    h = np.tanh(np.asarray(x) * 2.0)
    return np.sum(h**2), h

  def _assert_same_layout(self, f, xs):
    _, got = capture(jax.vmap(f))(xs)
    _, want = jax.vmap(capture(f))(xs)
    self.assertEqual(list(got), list(want))
    for name in want:
      for g, w in zip(jax.tree.leaves(got[name]), jax.tree.leaves(want[name])):
        np.testing.assert_array_equal(g, w, err_msg=repr(name))
    return got

  def test_vmap_of_scan_puts_the_batch_axis_first(self):
    def f(x):
      step = lambda c, _: (sow(c * 2, name='s'), None)
      return lax.scan(step, x, None, length=4)[0]

    xs = jnp.stack([X, X + 1, X + 2, X + 3, X + 4])  # (5, 3): batch 5
    got = self._assert_same_layout(f, xs)
    self.assertEqual(got['s'][0].shape, (5, 4, 3))
    self._assert_same_layout(jax.jit(f), xs)  # through a jit as well

  def test_scan_of_vmap_puts_the_loop_axis_first(self):
    double = jax.vmap(lambda v: sow(v * 2, name='s'))

    def f(x):  # x: (5, 3), mapped inside each step
      return lax.scan(lambda c, _: (double(c), None), x, None, length=4)[0]

    xs = jnp.stack([X, X + 1, X + 2, X + 3, X + 4])
    _, collected = capture(f)(xs)
    self.assertEqual(collected['s'][0].shape, (4, 5, 3))
    # step k holds 2^(k+1) * x: exact powers of two.
    for k in range(4):
      np.testing.assert_array_equal(collected['s'][0][k], xs * 2.0 ** (k + 1))

  def test_nested_loops_and_vmaps_nest_their_axes(self):
    # scan(length 2) > vmap(batch 5) > scan(length 3): axes (2, 5, 3, ...).
    def inner(x):
      step = lambda c, _: (sow(c + 1, name='s'), None)
      return lax.scan(step, x, None, length=3)[0]

    def f(xs):
      step = lambda c, _: (jax.vmap(inner)(c), None)
      return lax.scan(step, xs, None, length=2)[0]

    xs = jnp.stack([X, X + 1, X + 2, X + 3, X + 4])
    _, collected = capture(f)(xs)
    got = collected['s'][0]
    self.assertEqual(got.shape, (2, 5, 3, 3))
    for i in range(2):
      for b in range(5):
        c = xs[b] + 3.0 * i  # the carry when the inner scan starts
        for j in range(3):
          np.testing.assert_array_equal(got[i, b, j], c + (j + 1.0))


class AxesUnderDifferentiationTest(absltest.TestCase):

  def test_scanned_values_keep_the_loop_axis_first_under_grad(self):
    # Differentiation leaves jvp/transpose marks in the name stack; only
    # vmaps add leading axes, so the loop axis stays first.
    xs = jnp.arange(12.0).reshape(4, 3)

    def loss(xs):
      def body(c, x):
        return c + jnp.sum(sow(jnp.sin(x), name='h') ** 2), None

      return lax.scan(body, 0.0, xs)[0]

    grad, collected = capture(jax.grad(loss))(xs)
    self.assertEqual(collected['h'][0].shape, (4, 3))
    sow_testing.assert_close(collected['h'][0], np.sin(np.asarray(xs)))
    x = np.asarray(xs)
    sow_testing.assert_close(grad, 2 * np.sin(x) * np.cos(x))

  def test_grad_inside_a_loop_body_keeps_the_outer_loop_axis_first(self):
    # The inner scan, inside the outer body, is marked jvp/transpose by the
    # grad around it: no vmap axis for the outer loop to go after.
    xs = jnp.arange(24.0).reshape(2, 4, 3) / 10

    def inner(c, x):
      return c + jnp.sum(sow(jnp.sin(x), name='h') ** 2), None

    def f(xs):
      def outer(c, row):
        g = jax.grad(lambda r: lax.scan(inner, 0.0, r)[0])(row)
        return c + jnp.sum(g), None

      return lax.scan(outer, 0.0, xs)[0]

    _, collected = capture(f)(xs)
    self.assertEqual(collected['h'][0].shape, (2, 4, 3))
    sow_testing.assert_close(collected['h'][0], np.sin(np.asarray(xs)))


class InlinedCallUnderVmapTest(absltest.TestCase):

  def test_vmap_of_an_inlined_call_inside_a_loop_stays_inside(self):
    # An inlined jit of a staged capture leaves a closed_call, which the vmap
    # inside the scan body batches: its axis comes after the loop axis.
    def f(x):
      return sow(sow(x * 2, name='a') + 1, name='b')

    inner = jax.jit(capture(f, names='a'), inline=True)

    def g(batch):
      def step(c, _):
        return jax.vmap(inner)(c)[0], None

      return lax.scan(step, batch, None, length=4)[0]

    batch = jnp.arange(15.0).reshape(5, 3)
    _, collected = capture(g, names='b')(batch)
    self.assertEqual(collected['b'][0].shape, (4, 5, 3))
    expected, c = [], np.asarray(batch)
    for _ in range(4):
      c = c * np.float32(2) + np.float32(1)
      expected.append(c)
    np.testing.assert_array_equal(collected['b'][0], np.stack(expected))


class LoopSelectionTest(parameterized.TestCase):

  @staticmethod
  def f(x):
    sow(x, name='a', tag='act')
    sow(x * 2, name='b', tag='act')
    sow(x * 3, name='c', tag='metric')
    sow(x * 4, name=('layer', 0))
    return x

  def test_unselected_sows_leave_no_effect_for_an_outer_jit(self):
    # Sows left in place inside a jit must not keep the effect they carry
    # while a capture traces: it would cost every call of the outer jit.
    inner = jax.jit(lambda x: sow(x * 2, name='b', tag='b') + 1)

    def f(x):
      sow(x, name='a', tag='a')
      return lax.scan(lambda c, _: (inner(c), None), x, None, length=2)[0]

    jaxpr = jax.make_jaxpr(jax.jit(capture(f, tag='a')))(X)
    self.assertEqual(jaxpr.effects, set())
    self.assertEqual(jaxpr.eqns[0].params['jaxpr'].effects, set())
    self.assertEqual(count_sows(jaxpr.jaxpr), 1)  # 'b' is still there
    with self.assertWarns(inner_calls.TakenByInnerCall):
      (_, inner_collected), outer_collected = capture(capture(f, tag='a'))(X)
    self.assertEqual(list(inner_collected), ['a'])
    np.testing.assert_array_equal(
        outer_collected['b'][0], jnp.stack([X * 2, (X * 2 + 1) * 2])
    )

  def test_nested_inside_jit_and_scan(self):
    def g(x):
      x = jax.jit(self.f)(x)
      return lax.scan(lambda c, _: (self.f(c), None), x, None, length=2)[0]

    with self.assertWarns(inner_calls.TakenByInnerCall):
      (_, inner), outer = jax.jit(capture(capture(g, tag='metric')))(X)
    self.assertEqual(list(inner), ['c'])
    self.assertLen(inner['c'], 2)
    self.assertEqual(inner['c'][1].shape, (2, 3))
    self.assertEqual(list(outer), ['a', 'b', ('layer', 0)])
    np.testing.assert_array_equal(outer['b'][1], jnp.stack([X * 2, X * 2]))


class LoopOrderTest(parameterized.TestCase):

  def test_order_across_nesting(self):
    def f(x):
      sow(x, name='n')
      x = jax.jit(lambda y: sow(y + 1, name='n'))(x)
      x = lax.scan(lambda c, _: (c, sow(c + 2, name='n')), x, None, 1)[0]
      return sow(x + 3, name='n')

    _, collected = capture(f)(X)
    self.assertLen(collected['n'], 4)
    np.testing.assert_array_equal(collected['n'][0], X)
    np.testing.assert_array_equal(collected['n'][1], X + 1)
    np.testing.assert_array_equal(collected['n'][2], (X + 1 + 2)[None])
    np.testing.assert_array_equal(collected['n'][3], X + 1 + 3)


class RematInScanTest(parameterized.TestCase):

  def test_remat_in_scan(self):
    @jax.checkpoint
    def step(c, w):
      return sow(jnp.sin(c * w), name='c'), None

    ws = jnp.array([0.5, 1.0, 2.0], jnp.float32)
    _, collected = capture(lambda x: lax.scan(step, x, ws)[0])(X)
    expected, c = [], np.asarray(X)
    for w in np.asarray(ws):
      c = np.sin(c * w)
      expected.append(c)
    sow_testing.assert_close(collected['c'][0], np.stack(expected))


class BatchedWhileTest(absltest.TestCase):
  """capture(jax.vmap(f)) where vmap batches the control flow of ``f``."""

  def test_vmap_of_while_with_batched_predicate_keeps_each_last_value(self):
    # Under vmap, a while_loop whose predicate depends on the mapped inputs
    # runs until every example is done; the examples that finished earlier
    # keep their carries (JAX selects per example). A clobbered sow is a
    # carry of the captured loop, so it keeps each example's own last value,
    # not the value of the extra iterations. Oracle: a Python loop per
    # example.
    def f(x):
      sow(jnp.float32(-1.0), name='last', mode='clobber')

      def body(carry):
        i, v = carry
        sow(v * 10.0 + i, name='last', mode='clobber')
        return i + 1, v + 1.0

      return lax.while_loop(lambda c: c[1] < 3.0, body, (jnp.int32(0), x))

    xs = np.array([0.0, 2.5, 5.0, 1.0], np.float32)
    expected = []
    for x in xs:
      i, v, last = 0, x, np.float32(-1.0)
      while v < 3.0:
        last, i, v = v * 10.0 + i, i + 1, v + 1.0
      expected.append(last)
    for run in (capture(jax.vmap(f)), jax.jit(capture(jax.vmap(f))),
                jax.vmap(capture(f))):
      _, collected = run(jnp.asarray(xs))
      self.assertLen(collected['last'], 1)
      np.testing.assert_allclose(collected['last'][0], expected, rtol=1e-6)


class ScanInProgramOrderTest(parameterized.TestCase):
  """Records in program order where collected sows mix with equations."""

  @parameterized.parameters(False, True)
  def test_scan_between_collected_sows(self, under_jit):
    def f(x):
      x = sow(x + 1.0, name='a')
      x, _ = lax.scan(
          lambda c, _: (sow(c * 2.0, name='a'), None), x, None, length=2
      )
      sow(x - 1.0, name='b')
      return sow(x + 1.0, name='a')

    run = capture(f)
    out, collected = (jax.jit(run) if under_jit else run)(1.0)
    self.assertEqual(list(collected), ['a', 'b'])
    got = _entries(collected, 'a')
    np.testing.assert_allclose(got[0], 2.0)
    np.testing.assert_allclose(got[1], [4.0, 8.0])
    np.testing.assert_allclose(got[2], 9.0)
    np.testing.assert_allclose(_entries(collected, 'b')[0], 7.0)
    np.testing.assert_allclose(out, 9.0)


class ImmutablePytreesThroughScanTest(sow_testing.StateAssertions,
                           parameterized.TestCase):
  """Modules holding an immutable pytree of arrays, through NNX transforms.

  A transform returns new arrays for the pytree, which cannot be set in it:
  it is rebuilt, as a direct call of the transform does. The oracle is that
  direct call on a clone; the sown values are recomputed from the weights.
  """

  def assertLikeTwin(self, model, twin):
    self.assertSameState(model, twin)
    self.assertIs(type(model.bounds), type(twin.bounds))
    self.assertEqual(nnx.graphdef(model), nnx.graphdef(twin))

  def by_hand(self, model, x, lo, hi):
    return clip(x @ model.linear.kernel[...] + model.linear.bias[None], lo, hi)

  @parameterized.parameters(*PYTREES)
  def test_through_scan(self, kind):
    @nnx.vmap(in_axes=0, out_axes=0)
    def make_layers(key):
      return Clipped(kind, nnx.Rngs(key))

    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
    def over_layers(layer, x):
      return layer(x)

    layers = make_layers(jax.random.split(jax.random.key(0), 3))
    twin = nnx.clone(layers)
    kernels, biases = layers.linear.kernel[...], layers.linear.bias[...]
    out, collected = capture(over_layers)(layers, X_GRAPH_NODES)
    np.testing.assert_array_equal(out, over_layers(twin, X_GRAPH_NODES))
    self.assertLikeTwin(layers, twin)
    np.testing.assert_array_equal(lo_hi(layers.bounds)[0],
                                  jnp.full((3, 3), -0.75))
    # By hand: each layer clips to [-0.5, 0.5], then widens its bounds.
    x, expected = X_GRAPH_NODES, []
    for kernel, bias in zip(kernels, biases):
      x = clip(x @ kernel + bias[None], -0.5, 0.5)
      expected.append(x)
    sow_testing.assert_close(collected['h'][0], jnp.stack(expected))

    # The module broadcast to every iteration (it cannot update it there).
    @nnx.scan(in_axes=(None, nnx.Carry, 0), out_axes=(nnx.Carry, 0))
    def over_inputs(layer, carry, x):
      return carry, layer(x)

    layer = Clipped(kind, nnx.Rngs(1), update=False)
    twin = nnx.clone(layer)
    xs = jnp.stack([X_GRAPH_NODES, 2 * X_GRAPH_NODES])
    (_, out), collected = capture(over_inputs)(layer, 0.0, xs)
    np.testing.assert_array_equal(out, over_inputs(twin, 0.0, xs)[1])
    self.assertLikeTwin(layer, twin)
    sow_testing.assert_close(
        collected['h'][0],
        jax.vmap(lambda x: self.by_hand(layer, x, -0.5, 0.5))(xs),
    )


class LoopCachesTest(parameterized.TestCase):
  """The caches keyed by jaxprs: a hit, a miss, and no unbounded growth."""

  @parameterized.named_parameters(
      ('plan', interpreter.cached_plan),
      ('reemittable', rewrite.reemittable),
      ('rewrite', interpreter.rewritten_call),
      ('transform', interpreter.transform),
      ('sow_keys', primitive.sow_keys),
      ('scan_body', loops._scan_body),
      ('while_jaxprs', loops._while_jaxprs),
  )
  def test_fresh_shapes_and_predicates_do_not_grow_it(self, cached):
    # Keyed weakly by jaxprs: entries go with the programs traced per call.
    def f(x):
      def scan_body(c, row):
        return c + sow(jnp.sin(row), name='s', mode='clobber'), None

      def while_body(c):
        return c[0] + 1, sow(c[1] * 2, name='w', mode='clobber')

      sow(x, name='w', mode='clobber')
      scanned = lax.scan(scan_body, jnp.zeros_like(x), x[None])[0]
      looped = lax.while_loop(lambda c: c[0] < 2, while_body, (0, x))[1]
      return jnp.sum(sow(jnp.sin(x), name='h')) + scanned + looped

    def run(n, names):
      x = jnp.arange(n, dtype=jnp.float32)
      return jax.jit(capture(f, names=names))(x)

    run(1, None)
    gc.collect()
    _, misses, size = _info(cached)
    for n in range(2, 6):
      _, collected = run(n, lambda name: name in ('h', 's', 'w'))
      sow_testing.assert_close(collected['h'][0], np.sin(np.arange(n)))
      sow_testing.assert_close(collected['w'][0], 4 * np.arange(n))
    self.assertGreater(_info(cached)[1], misses)  # it was filled
    gc.collect()
    self.assertLessEqual(_info(cached)[2], size)  # and emptied

  def test_loop_bodies_hit_and_miss(self):
    # Loop bodies defined once: JAX caches their jaxprs, so an eager
    # capture, which stages the call afresh, meets the same bodies again.
    def scan_body(c, x):
      return c + jnp.sum(sow(jnp.sin(x), name='h', mode='clobber')), None

    def scanned(xs):
      return lax.scan(scan_body, 0.0, xs)[0]

    def while_body(c):
      i, y = c
      return i + 1, sow(y * 2, name='w', mode='clobber')

    def while_cond(c):
      return c[0] < 3

    def looped(x):
      sow(x, name='w', mode='clobber')  # the value of a zero-trip loop
      return lax.while_loop(while_cond, while_body, (0, x))[1]

    for cached, f, make in ((loops._scan_body, scanned,
                             lambda n: jnp.ones((2, n))),
                            (loops._while_jaxprs, looped,
                             lambda n: jnp.ones(n))):
      with self.subTest(str(cached)):
        capture(f)(make(3))
        hits, misses, _ = _info(cached)
        capture(f)(make(3))
        self.assertEqual(_info(cached)[:2], (hits + 1, misses))
        capture(f)(make(5))  # another body shape: another body
        self.assertEqual(_info(cached)[1], misses + 1)


if __name__ == '__main__':
  absltest.main()
