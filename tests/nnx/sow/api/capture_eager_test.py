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
"""``capture`` outside any JAX trace: a direct call of ``f`` whose sows are
recorded as they are bound (``transform/eager.py``).
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import capture
from flax.nnx.sow import sow
from flax.nnx.sow.transform import eager
from flax.nnx.sow.transform import inner_calls


X = jnp.array([0.5, -1.0, 2.0], jnp.float32)  # the models' dtype, also x64


class EagerTraceTest(absltest.TestCase):

  def test_the_python_runs_on_every_call(self):
    calls = []
    scale = {'k': 1.0}

    def f(x):
      calls.append(scale['k'])
      return sow(x * scale['k'], name='h')

    for k in (1.0, 2.0, 4.0):
      scale['k'] = k
      out, collected = capture(f)(X)
      np.testing.assert_array_equal(out, X * k)
      np.testing.assert_array_equal(collected['h'][0], X * k)
    self.assertEqual(calls, [1.0, 2.0, 4.0])

  def test_values_are_concrete(self):
    def f(x):
      h = sow(x * 2, name='h')
      return h if float(h.sum()) > 0 else -h

    out, collected = capture(f)(X)
    np.testing.assert_array_equal(out, f(X))
    np.testing.assert_array_equal(collected['h'][0], X * 2)
    self.assertIsInstance(collected['h'][0], jax.Array)

  def test_variables_are_updated_in_place(self):
    # BatchNorm's statistics and Dropout's RNG counter, as a direct call
    # updates them, on the module given and on one closed over.
    class Model(nnx.Module):

      def __init__(self, rngs):
        self.linear = nnx.Linear(3, 3, rngs=rngs)
        self.norm = nnx.BatchNorm(3, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)

      def __call__(self, x):
        return self.dropout(sow(self.norm(self.linear(x)), name='h'))

    x = jnp.stack([X, 2 * X, -X])
    for closed_over in (False, True):
      model = Model(nnx.Rngs(0))
      twin = nnx.clone(model)
      if closed_over:
        out, collected = capture(lambda x: model(x))(x)
      else:
        out, collected = capture(lambda m, x: m(x))(model, x)
      expected = twin(x)
      np.testing.assert_array_equal(out, expected)
      np.testing.assert_array_equal(model.norm.mean[...], twin.norm.mean[...])
      self.assertFalse(np.allclose(model.norm.mean[...], 0))
      self.assertEqual(model.dropout.rngs.count[...],
                       twin.dropout.rngs.count[...])
      self.assertEqual(model.dropout.rngs.count[...], 1)
      self.assertLen(collected['h'], 1)

  def test_a_custom_jvp_function_runs_once(self):
    runs = []

    @jax.custom_jvp
    def g(x):
      runs.append(None)
      return sow(jnp.tanh(x), name='in_g')

    g.defjvp(lambda primals, tangents: (g(*primals), tangents[0]))
    out, collected = capture(lambda x: g(x) * 2)(X)
    self.assertLen(runs, 1)  # as in a direct call
    np.testing.assert_array_equal(out, jnp.tanh(X) * 2)
    np.testing.assert_array_equal(collected['in_g'][0], jnp.tanh(X))

  def test_under_grad_and_vmap_inside(self):
    def f(x):
      dx = jax.grad(lambda a: jnp.sum(sow(a ** 2, name='sq')))(x)
      v = jax.vmap(lambda a: sow(a + 1, name='vm'))(x)
      return dx + v

    out, collected = capture(f)(X)
    np.testing.assert_array_equal(out, 2 * X + X + 1)
    np.testing.assert_array_equal(collected['sq'][0], X ** 2)
    np.testing.assert_array_equal(collected['vm'][0], X + 1)

  def test_nested_captures_split_the_sows(self):
    def f(x):
      a = sow(x + 1, name='a', tag='inner')
      return sow(a * 2, name='b')

    def outer(x):
      out, inner = capture(f, tag='inner')(x)
      self.assertEqual(list(inner), ['a'])
      return out

    with self.assertWarns(inner_calls.TakenByInnerCall):
      out, collected = capture(outer)(X)
    self.assertEqual(list(collected), ['b'])
    np.testing.assert_array_equal(collected['b'][0], (X + 1) * 2)
    np.testing.assert_array_equal(out, (X + 1) * 2)

  def test_a_name_predicate_runs_the_call_eagerly(self):
    # The predicate is asked about each name as the call meets it (once per
    # name and call), inside jits too: a value read with float() works
    # where it works in f itself, and the Python runs on every call.
    asked, calls = [], []
    inner = jax.jit(lambda x: sow(x + 1, name='in_jit') * sow(
        x, name=('skip', 1)))

    def f(x):
      calls.append(1)
      h = sow(x * 2, name='h')
      for i in range(2):
        h = sow(h + i, name=('skip', i))
      scale = 2.0 if float(h.sum()) > 0 else -2.0
      return sow(inner(h) * scale, name='h', tag='t')

    def wanted(name):
      asked.append(name)
      return not isinstance(name, tuple)

    for _ in range(2):
      out, collected = capture(f, names=wanted)(X)
      h = X * 2 + 1
      np.testing.assert_array_equal(out, f(X))
      self.assertEqual(list(collected), ['h', 'in_jit'])
      self.assertLen(collected['h'], 2)
      np.testing.assert_array_equal(collected['h'][0], X * 2)
      np.testing.assert_array_equal(collected['in_jit'][0], h + 1)
    self.assertLen(calls, 4)  # two captures, and two direct calls
    self.assertEqual(asked, ['h', ('skip', 0), ('skip', 1), 'in_jit'] * 2)
    # With a tag, only the names of sows with that tag are asked about.
    asked.clear()
    _, collected = capture(f, tag='t', names=wanted)(X)
    self.assertEqual(list(collected), ['h'])
    self.assertLen(collected['h'], 1)
    self.assertEqual(asked, ['h'])

  def test_runs_eagerly_at_the_top_level_only(self):
    seen = []

    def f(x):
      # Inside an eager capture a nested one runs eagerly too.
      seen.append(eager.can_run())
      return sow(x, name='h')

    self.assertTrue(eager.can_run())
    capture(f)(X)
    jax.jit(capture(f))(X)
    jax.grad(lambda x: capture(f)(x)[0].sum())(X)
    self.assertEqual(seen, [True, False, False])


if __name__ == '__main__':
  absltest.main()
