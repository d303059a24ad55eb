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
"""Eager interpretation (flax.nnx.sow.transform.eager): a capture is a direct call.

Oracles: the direct call of the same function (on a clone, for Variable
updates), values recomputed by hand, and JAX's compile counter.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import capture
from flax.nnx.sow.transform import eager
from flax.nnx.sow import sow
import sow_testing

X = jnp.array([0.5, -1.0, 2.0], jnp.float32)  # the models' dtype, also x64


class EagerTraceTest(absltest.TestCase):

  def test_a_jit_compiled_outside_a_capture_is_seen(self):
    # JAX's compiled fast path, cached by the call outside, never binds:
    # `harvesting` in the jit key sends the call through `bind`.
    inner = jax.jit(lambda x: sow(jnp.sin(x), name='in_jit') * 2)
    np.testing.assert_array_equal(inner(X), jnp.sin(X) * 2)
    inner(X)  # the fast path is now cached
    f = lambda x: inner(x) + 1
    for _ in range(2):
      out, collected = capture(f)(X)
      np.testing.assert_array_equal(out, inner(X) + 1)
      np.testing.assert_array_equal(collected['in_jit'][0], jnp.sin(X))
    with sow_testing.count_compiles() as compiles:
      capture(f)(X + 1)
      inner(X + 1)  # and outside again, as fast as before
    self.assertEmpty(compiles)

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

    out, collected = capture(outer)(X)
    self.assertEqual(list(collected), ['b'])
    np.testing.assert_array_equal(collected['b'][0], (X + 1) * 2)
    np.testing.assert_array_equal(out, (X + 1) * 2)

  def test_an_eager_shard_map_refuses_its_sows(self):
    # JAX runs it primitive by primitive, each a program of its own, where
    # its sows would be lost: refused; under jax.jit, collected.
    mesh = jax.make_mesh((1,), ('x',))
    spec = jax.sharding.PartitionSpec()
    body = lambda x: sow(x * 2, name='s') + 1
    f = jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec)
    with self.assertRaisesRegex(
        NotImplementedError, r"sow 's' cannot be collected.*jax\.jit"
    ):
      capture(f)(X)
    out, collected = capture(lambda x: jax.jit(f)(x))(X)
    np.testing.assert_array_equal(out, X * 2 + 1)
    np.testing.assert_array_equal(collected['s'][0], (X * 2)[None])
    plain = jax.shard_map(lambda x: x * 2, mesh=mesh, in_specs=spec,
                          out_specs=spec)
    out, collected = capture(plain)(X)  # without sows, as a direct call
    np.testing.assert_array_equal(out, X * 2)
    self.assertEqual(collected, {})
    np.testing.assert_array_equal(f(X), X * 2 + 1)  # outside any capture

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
