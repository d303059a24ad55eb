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
"""Sows collected as they are staged (``flax.nnx.sow.transform.staged_sows``).

The staged program is checked against the hand-written function that
returns the same values (no sow left, nothing else added), and the records
against values recomputed directly, in program order, also where collected
sows mix with sows that stay equations: inside a ``scan``, inside a ``jit``
whose trace JAX reuses from its cache (so no sow of it is staged during the
capture), under another tag, or inside a nested capture.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow.transform import staged_sows
from flax.nnx.sow.transform import primitive
from flax.nnx.sow import sow
from flax.nnx.sow.lift import graph_calls
from flax.nnx.sow.transform.selection import Selection
from flax.nnx.sow.transform.request import Request


def _primitives(jaxpr) -> list[str]:
  names = []
  for eqn in jaxpr.eqns:
    names.append(eqn.primitive.name)
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      names.extend(_primitives(sub))
  return names


def _entries(collected, name):
  return [np.asarray(v) for v in collected[name]]


class StagedProgramTest(absltest.TestCase):

  def test_jit_capture_stages_the_hand_written_program(self):
    def f(x):
      for i in range(5):
        x = sow(jnp.tanh(x) * 2.0, name=('layer', i))
      return x

    def by_hand(x):
      hidden = []
      for _ in range(5):
        x = jnp.tanh(x) * 2.0
        hidden.append(x)
      return x, hidden

    x = jnp.ones(3)
    staged = jax.make_jaxpr(capture(f))(x)
    self.assertNotIn('sow', _primitives(staged.jaxpr))
    (call,) = staged.jaxpr.eqns  # one closed_call, nothing else
    inner = call.params['call_jaxpr'].jaxpr
    self.assertEqual(
        [e.primitive.name for e in inner.eqns],
        [e.primitive.name for e in jax.make_jaxpr(by_hand)(x).jaxpr.eqns],
    )
    out, collected = jax.jit(capture(f))(x)
    want_out, want_hidden = by_hand(x)
    np.testing.assert_array_equal(out, want_out)
    self.assertEqual(list(collected), [('layer', i) for i in range(5)])
    for i, value in enumerate(want_hidden):
      np.testing.assert_array_equal(collected[('layer', i)][0], value)

  def test_only_selected_sows_are_taken(self):
    request = Request(Selection(tag='a'))

    def f(x):
      sow(x + 1.0, name='kept', tag='a')
      sow(x + 2.0, name='other', tag='b')
      return x

    with graph_calls.updating():
      closed, outcome = graph_calls.Prepared(f, (jnp.ones(2),), {}).trace(request)
    self.assertEqual([s.site.name for s in outcome.harvested.sows], ['kept'])
    self.assertEqual(outcome.harvested.marked, 1)  # 'other' stays
    self.assertEqual(_primitives(closed.jaxpr).count('sow'), 1)

  def test_predicates_and_planting_are_not_taken_at_staging(self):
    self.assertFalse(staged_sows.eligible(
        Request(Selection(names=lambda n: True))))
    self.assertFalse(staged_sows.eligible(Request(
        Selection(), planted=Selection())))
    self.assertTrue(staged_sows.eligible(Request(Selection())))


def _block(x):
  return sow(jnp.sin(x) + 1.0, name='h')


_JITTED_BLOCK = jax.jit(_block)


class ProgramOrderTest(parameterized.TestCase):
  """Records in program order where collected sows mix with equations."""

  @parameterized.parameters(False, True)
  def test_cached_jit_between_collected_sows(self, under_jit):
    # The block is traced once, before the capture: inside it, JAX reuses
    # that trace for every call, so its sows are never staged again.
    with primitive.harvesting(True):
      _JITTED_BLOCK.trace(jnp.ones(2))

    def f(x):
      for _ in range(3):
        x = _JITTED_BLOCK(x)
        x = sow(x * 3.0, name='h')
      return x

    want, x = [], jnp.arange(2.0)
    for _ in range(3):
      x = jnp.sin(x) + 1.0
      want.append(x)
      x = x * 3.0
      want.append(x)
    run = capture(f)
    out, collected = (jax.jit(run) if under_jit else run)(jnp.arange(2.0))
    got = _entries(collected, 'h')
    self.assertLen(got, 6)
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=1e-6)
    np.testing.assert_allclose(out, want[-1], rtol=1e-6)

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

  def test_first_sow_order_of_names_across_kinds(self):
    def f(x):
      sow(x, name='first')
      x = _JITTED_BLOCK(x)  # 'h', from JAX's cache after the first call
      sow(x, name='last')
      return x

    for _ in range(2):
      _, collected = capture(f)(jnp.ones(2))
      self.assertEqual(list(collected), ['first', 'h', 'last'])

  def test_unselected_sows_reach_an_enclosing_capture(self):
    def f(x):
      a = sow(x + 1.0, name='a', tag='inner')
      b = sow(x + 2.0, name='b', tag='outer')
      return a * b

    def outer(x):
      out, inner = capture(f, tag='inner')(x)
      return out, inner

    (out, inner), collected = jax.jit(capture(outer, tag='outer'))(1.0)
    np.testing.assert_allclose(out, 6.0)
    self.assertEqual(list(inner), ['a'])
    np.testing.assert_allclose(inner['a'][0], 2.0)
    self.assertEqual(list(collected), ['b'])
    np.testing.assert_allclose(collected['b'][0], 3.0)

  def test_clobber_and_vmap(self):
    def f(x):
      for i in range(3):
        sow(x * i, name='last', mode='clobber')
      return jax.vmap(lambda r: sow(r * 2.0, name='rows'))(x)

    x = jnp.arange(6.0).reshape(3, 2)
    for run in (capture(f), jax.jit(capture(f))):
      out, collected = run(x)
      np.testing.assert_array_equal(collected['last'][0], x * 2)
      self.assertLen(collected['last'], 1)
      np.testing.assert_array_equal(collected['rows'][0], x * 2.0)
      np.testing.assert_array_equal(out, x * 2.0)

  def test_python_number_sown(self):
    out, collected = jax.jit(capture(lambda x: sow(2.0, name='c') * x))(3.0)
    np.testing.assert_allclose(out, 6.0)
    np.testing.assert_allclose(collected['c'][0], 2.0)

  def test_literal_left_as_a_sow_equation_comes_back_as_a_jax_array(self):
    # The sows capture leaves as equations (a clobber, another tag's) are
    # evaluated one by one, eagerly: a literal read there must not reach
    # the result raw (a JAX-internal TypedFloat, say). Oracle: what f
    # returns outside capture.
    def f(x):
      kept = sow(2.5, name='kept', mode='clobber')
      other = sow(np.int32(7), name='other', tag='elsewhere')
      return x, kept, other

    x = jnp.arange(3.0)
    direct = f(x)
    for run in (capture(f), capture(f, names=('kept',))):
      out, collected = run(x)
      np.testing.assert_array_equal(collected['kept'][0], 2.5)
      for got, want in zip(out, direct):
        self.assertIsInstance(got, jax.Array)
        self.assertEqual(got.dtype, want.dtype)
        self.assertEqual(got.weak_type, want.weak_type)
        np.testing.assert_array_equal(got, want)

  def test_gradient_through_collected_sows(self):
    def f(x):
      h = sow(jnp.sin(x), name='h')
      return jnp.sum(h * h)

    def loss(x):
      out, collected = capture(f)(x)
      return out + jnp.sum(collected['h'][0])

    x = jnp.array([0.3, -0.7])
    want = jax.grad(lambda x: jnp.sum(jnp.sin(x) ** 2 + jnp.sin(x)))(x)
    np.testing.assert_allclose(jax.grad(loss)(x), want, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(x), want, rtol=1e-6)


if __name__ == '__main__':
  absltest.main()
