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
"""Every higher-order primitive of JAX 0.10.2 with a sow inside: captured by
its rule, or refused with an error naming it (the main guide's coverage
table lists exactly these tests).
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import perturb
from flax.nnx.sow import sow
from flax.nnx.sow.transform import inner_calls

import sow_testing


X = jnp.array([0.5, -1.0, 2.0], jnp.float32)


def primitive_names(f, *args):
  return {e.primitive.name for e in jax.make_jaxpr(f)(*args).eqns}


X_CORE = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


X_EAGER = jnp.array([0.5, -1.0, 2.0], jnp.float32)  # the models' dtype, also x64


class CoverageTest(absltest.TestCase):
  """Each test name appears in the guide's coverage table."""

  def test_jit(self):
    f = jax.jit(lambda x: sow(x * 2, name='v') + 1)
    self.assertIn('jit', primitive_names(f, X))
    _, collected = capture(f)(X)
    np.testing.assert_array_equal(collected['v'][0], X * 2)

  def test_closed_call_and_call(self):
    from flax.nnx.sow.transform._jax import eval_jaxpr_p  # pylint: disable=g-import-not-at-top
    from flax.nnx.sow.transform import primitive  # pylint: disable=g-import-not-at-top

    with primitive.harvesting(True):
      body = jax.make_jaxpr(lambda x: sow(x * 2, name='v') + 1)(X)
    f = lambda x: eval_jaxpr_p.bind(x, jaxpr=body)[0]
    self.assertIn('closed_call', primitive_names(f, X))
    _, collected = capture(f)(X)
    np.testing.assert_array_equal(collected['v'][0], X * 2)

  def test_custom_jvp_call(self):
    @jax.custom_jvp
    def f(x):
      return sow(jnp.sin(x), name='v')

    f.defjvp(lambda p, t: (f(p[0]), 3.0 * t[0]))
    self.assertIn('custom_jvp_call', primitive_names(f, X))
    grad, collected = capture(jax.grad(lambda x: jnp.sum(f(x))))(X)
    sow_testing.assert_close(collected['v'][0], np.sin(X))
    np.testing.assert_array_equal(grad, jnp.full(3, 3.0))

  def test_custom_vjp_call(self):
    @jax.custom_vjp
    def f(x):
      return sow(jnp.sin(x), name='v')

    f.defvjp(lambda x: (f(x), None), lambda _, g: (4.0 * g,))
    self.assertIn('custom_vjp_call', primitive_names(f, X))
    grad = jax.grad(lambda x: jnp.sum(capture(f)(x)[0]))(X)
    np.testing.assert_array_equal(grad, jnp.full(3, 4.0))

  def test_custom_vmap_call(self):
    from jax.custom_batching import custom_vmap  # pylint: disable=g-import-not-at-top

    @custom_vmap
    def f(x):
      return sow(x * 2, name='v')

    # A recognisable batching rule: it must still be used.
    f.def_vmap(lambda axis_size, in_batched, x: (x * 5, in_batched[0]))
    self.assertIn('custom_vmap_call', primitive_names(f, X))
    xs = jnp.stack([X, X + 1])
    out, collected = jax.vmap(capture(f))(xs)
    np.testing.assert_array_equal(out, xs * 5)
    np.testing.assert_array_equal(collected['v'][0], xs * 2)

  def test_custom_root(self):
    def f(x):
      return lax.custom_root(
          lambda y: sow(y, name='guess') ** 2 - x,
          jnp.float32(1.0),
          lambda g, y0: lax.fori_loop(0, 20, lambda _, y: y - g(y) / (2 * y),
                                      y0),
          lambda g, y: y / 2.0,
      )

    out, collected = capture(f)(jnp.float32(2.0))
    sow_testing.assert_close(out, np.sqrt(2.0))
    # The solver calls f once per Newton step, inside a static fori_loop
    # (a scan): the guesses are stacked. Oracle: Newton's iteration by hand.
    guesses, y = [], 1.0
    for _ in range(20):
      guesses.append(y)
      y = y - (y * y - 2.0) / (2 * y)
    sow_testing.assert_close(collected['guess'][0], guesses)

  def test_scan(self):
    f = lambda x: lax.scan(lambda c, _: (sow(c + 1, name='v'), None), x,
                           None, length=4)[0]
    self.assertIn('scan', primitive_names(f, X))
    _, collected = capture(f)(X)
    np.testing.assert_array_equal(collected['v'][0],
                                  X[None] + jnp.arange(1.0, 5.0)[:, None])

  def test_cond(self):
    f = lambda x: lax.switch(1, [lambda y: sow(y, name='v'),
                                 lambda y: sow(-y, name='v')], x)
    self.assertIn('cond', primitive_names(f, X))
    _, collected = capture(f)(X)
    np.testing.assert_array_equal(collected['v'][0], -X)
    bad = lambda x: lax.cond(x[0] > 0, lambda y: sow(y, name='v'),
                             lambda y: y, x)
    with self.assertRaisesRegex(ValueError, 'branches of a cond/switch'):
      capture(bad)(X)

  def test_while(self):
    def clobber(x):
      sow(x, name='v', mode='clobber')
      return lax.while_loop(lambda c: c[0] < 3,
                            lambda c: sow(c + 1, name='v', mode='clobber'), x)

    self.assertIn('while', primitive_names(clobber, X))
    _, collected = capture(clobber)(X)
    np.testing.assert_array_equal(collected['v'][0], X + 1 + 1 + 1)
    append = lambda x: lax.while_loop(lambda c: c[0] < 3,
                                      lambda c: sow(c + 1, name='v'), x)
    with self.assertRaisesRegex(NotImplementedError,
                                "while_loop .* sows 'v' with mode='append'"):
      capture(append)(X)
    # With a bound: the steps in a buffer, and the count.
    _, collected = capture(append, max_steps=4)(X)
    steps, = collected['v']
    self.assertEqual(int(steps.count), 3)
    np.testing.assert_array_equal(
        steps.values, np.stack([X + 1, X + 2, X + 3, np.zeros_like(X)]))

  def test_remat(self):
    f = jax.checkpoint(lambda x: sow(jnp.sin(x), name='v') * 2)
    self.assertIn('remat2', primitive_names(f, X))
    _, collected = capture(f)(X)
    sow_testing.assert_close(collected['v'][0], np.sin(X))

  def test_shard_map_and_pmap(self):
    # One CPU device here; the 8-device layout is in rules_shard_map_test.
    f = jax.pmap(lambda x: sow(x * 2, name='v'))
    xs = X[:1]
    _, collected = capture(f)(xs)
    np.testing.assert_array_equal(collected['v'][0], xs * 2)
    names = {e.primitive.name
             for e in jax.make_jaxpr(f)(xs).eqns[0].params['jaxpr'].eqns}
    self.assertIn('shard_map', names)

  def test_custom_linear_solve(self):
    f = lambda b: lax.custom_linear_solve(
        lambda v: sow(v * 2, name='v'), b, lambda mv, r: r / 2,
        symmetric=True)
    self.assertIn('custom_linear_solve', primitive_names(f, X))
    with self.assertRaisesRegex(
        NotImplementedError, "primitive 'custom_linear_solve' .* 'v'"):
      capture(f)(X)

  def test_linear_call(self):
    from jax.custom_derivatives import linear_call  # pylint: disable=g-import-not-at-top

    f = lambda x: linear_call(lambda _, v: sow(v * 2, name='v'),
                              lambda _, t: t * 2, None, x)
    # Eagerly (the trace hands the bind to the rule table) and staged (the
    # interpreter plans the equation): refused, naming the primitive.
    for run in (capture(f), jax.jit(capture(f))):
      with self.assertRaisesRegex(NotImplementedError,
                                  "primitive 'linear_call' .* 'v'"):
        run(X)

  def test_run_state(self):
    from jax._src.state.discharge import run_state  # pylint: disable=g-import-not-at-top

    def f(x):
      def body(ref):
        ref[...] = sow(ref[...] * 2, name='v')
      return run_state(body)(x)

    with self.assertRaisesRegex(NotImplementedError,
                                "primitive 'run_state' .* 'v'"):
      capture(f)(X)

  def test_reduction_computations(self):
    f = lambda x: lax.reduce(x, np.float32(0), lambda a, b: sow(a + b, name='v'), (0,))
    with self.assertRaisesRegex(NotImplementedError,
                                "primitive 'reduce' .* 'v'"):
      capture(f)(X)

  def test_callbacks(self):
    # The callback is opaque Python run by the runtime, outside tracing: a
    # sow inside it is a plain identity there and cannot be collected.
    def host(v):
      return np.asarray(sow(v, name='v')) * 2

    f = lambda x: jax.pure_callback(
        host, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    out, collected = capture(f)(X)
    np.testing.assert_array_equal(out, X * 2)
    self.assertEqual(dict(collected), {})

  def test_no_sow_inside_is_bound_unchanged(self):
    f = lambda b: lax.custom_linear_solve(lambda v: v * 2, b,
                                          lambda mv, r: r / 2, symmetric=True)
    out, collected = capture(lambda x: sow(f(x), name='v'))(X)
    np.testing.assert_array_equal(out, X / 2)
    np.testing.assert_array_equal(collected['v'][0], X / 2)


class UnsupportedPrimitiveTest(parameterized.TestCase):

  def test_unsupported_higher_order_primitive_is_refused(self):
    matrix = jnp.array([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 4.0]])

    def f(b):
      matvec = lambda v: sow(matrix @ v, name='matvec')
      solve = lambda mv, r: r / jnp.diag(matrix)
      return lax.custom_linear_solve(matvec, b, solve, symmetric=True)

    np.testing.assert_array_equal(f(X_CORE), X_CORE / jnp.diag(matrix))
    with self.assertRaisesRegex(
        NotImplementedError, r"primitive 'custom_linear_solve' .*'matvec'"
    ):
      capture(f)(X_CORE)


class EagerShardMapTest(absltest.TestCase):

  def _mesh_and_input(self):
    # However many devices the process has (Flax's CI runs with 4).
    n = jax.device_count()
    mesh = jax.make_mesh((n,), ('x',),
                         axis_types=(jax.sharding.AxisType.Auto,))
    x = jnp.sin(jnp.arange(2.0 * n, dtype=jnp.float32))
    return n, mesh, x

  def test_an_eager_shard_map_gives_its_per_shard_values(self):
    # JAX runs an eager shard_map primitive by primitive, where no trace
    # sees a sow: the capture stages it (its body runs once) and its rule
    # returns the per-shard values, as under jax.jit.
    n, mesh, x = self._mesh_and_input()
    spec = jax.sharding.PartitionSpec('x')
    runs = []

    def body(xs):
      runs.append(1)
      return sow(jnp.sin(xs) * 2, name='s') + 1

    f = jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec)
    expected = (jnp.sin(x) * 2).reshape(n, 2)
    results = [capture(f)(x), jax.jit(capture(f))(x),
               capture(jax.jit(f))(x)]
    self.assertLen(runs, 3)  # the eager call ran its Python once
    for out, collected in results:
      np.testing.assert_array_equal(out, results[0][0])
      self.assertLen(collected['s'], 1)
      np.testing.assert_array_equal(collected['s'][0], results[0][1]['s'][0])
    sow_testing.assert_close(results[0][0], jnp.sin(x) * 2 + 1)
    sow_testing.assert_close(results[0][1]['s'][0], expected)
    np.testing.assert_array_equal(f(x), results[0][0])  # outside a capture

  def test_under_transforms_and_in_a_loop_as_under_jit(self):
    _, mesh, x = self._mesh_and_input()
    spec = jax.sharding.PartitionSpec('x')
    f = jax.shard_map(
        lambda xs: sow(jnp.sin(xs) * 2, name='s') + perturb(xs, name='p'),
        mesh=mesh, in_specs=spec, out_specs=spec)
    cases = {
        'grad': lambda x: jax.grad(lambda y: jnp.sum(f(y) ** 2))(x),
        'vmap': lambda x: jax.vmap(f)(jnp.stack([x, x + 1])),
        'jvp': lambda x: jax.jvp(f, (x,), (jnp.ones_like(x),))[1],
        'loop': lambda x: f(f(x)),
    }
    for name, g in cases.items():
      with self.subTest(name):
        eager = capture(g)(x)
        staged = jax.jit(capture(g))(x)
        self.assertEqual(jax.tree.structure(eager), jax.tree.structure(staged))
        self.assertNotEqual(eager[1], {})
        for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(staged)):
          np.testing.assert_array_equal(a, b)

  def test_sows_an_eager_capture_leaves_reach_an_enclosing_one(self):
    n, mesh, x = self._mesh_and_input()
    spec = jax.sharding.PartitionSpec('x')
    f = jax.shard_map(
        lambda xs: sow(xs * 3, name='kept') + sow(xs, name='inner', tag='t'),
        mesh=mesh, in_specs=spec, out_specs=spec)
    with self.assertWarns(inner_calls.TakenByInnerCall):
      (out, inner), outer = capture(capture(f, tag='t'))(x)
    np.testing.assert_array_equal(out, f(x))
    self.assertEqual(list(inner), ['inner'])
    self.assertEqual(list(outer), ['kept'])
    np.testing.assert_array_equal(outer['kept'][0], (x * 3).reshape(n, 2))
    np.testing.assert_array_equal(inner['inner'][0], x.reshape(n, 2))

  def test_an_eager_shard_map_without_sows_runs_as_a_direct_call(self):
    _, mesh, x = self._mesh_and_input()
    spec = jax.sharding.PartitionSpec('x')
    plain = jax.shard_map(lambda xs: xs * 2, mesh=mesh, in_specs=spec,
                          out_specs=spec)
    out, collected = capture(plain)(x)
    np.testing.assert_array_equal(out, plain(x))
    self.assertEqual(collected, {})


if __name__ == '__main__':
  absltest.main()
