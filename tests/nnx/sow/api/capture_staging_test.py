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
"""The sows ``capture`` takes as they are staged into its own trace
(``transform/staged_sows.py``): the program it stages, and the records in
program order.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import sow
from flax.nnx.sow.lift import graph_calls
from flax.nnx.sow.transform import staged_sows
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.selection import Selection


def _primitives(jaxpr) -> list[str]:
  names = []
  for eqn in jaxpr.eqns:
    names.append(eqn.primitive.name)
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      names.extend(_primitives(sub))
  return names


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


class ProgramOrderTest(parameterized.TestCase):
  """Records in program order where collected sows mix with equations."""

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
