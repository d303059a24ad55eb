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
"""The ``sow`` primitive: an identity that leaves a named marker.

It returns its value, checks its name, tag and leaves, and outside a capture
changes nothing under JAX's transformations (no effect, no HLO); while a
capture traces, its marker survives dead-code elimination. Every expected
value is recomputed independently, outside any sow machinery.
"""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import export
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import sow
from flax.nnx.sow import sow_p
from flax.nnx.sow.transform import primitive


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


def harvest_jaxpr(f, *args):
  """The jaxpr `capture` sees for f: traced while harvesting."""
  with primitive.harvesting(True):
    return jax.make_jaxpr(f)(*args).jaxpr


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Pair:
  a: jax.Array
  b: jax.Array


def _custom_jvp_identity_rule(f):
  g = jax.custom_jvp(f)
  g.defjvp(lambda p, t: (g(*p), jnp.cos(p[0]) * t[0]))
  return g


def _custom_vjp_identity_rule(f):
  g = jax.custom_vjp(f)
  g.defvjp(lambda x: (g(x), x), lambda x, ct: (jnp.cos(x) * ct,))
  return g


class PrimitiveTest(parameterized.TestCase):

  def test_sow_is_identity_and_returns_the_pytree(self):
    value = {'a': X, 'b': (jnp.ones(2), Pair(jnp.zeros(1), X * 2))}
    out = sow(value, name='v')
    self.assertEqual(
        jax.tree_util.tree_structure(out), jax.tree_util.tree_structure(value)
    )
    for got, want in zip(jax.tree.leaves(out), jax.tree.leaves(value)):
      self.assertIs(got, want)

  def test_python_numbers_become_arrays(self):
    out = sow({'i': 3, 'f': 1.5, 'b': True}, name='n')
    self.assertEqual(out['i'].dtype, jnp.asarray(3).dtype)
    self.assertEqual(out['f'].dtype, jnp.asarray(1.5).dtype)
    self.assertEqual(out['b'].dtype, jnp.bool_)

  @parameterized.named_parameters(
      ('int', 3),
      ('empty_tuple', ()),
      ('float_in_tuple', ('a', 1.5)),
      ('bool_in_tuple', ('a', True)),
      ('list', ['a']),
      ('none', None),
  )
  def test_bad_name(self, name):
    with self.assertRaisesRegex(TypeError, r'sow\(name=.*name must be'):
      sow(X, name=name)

  def test_a_jaxpr_with_sows_prints(self):
    # JAX's jaxpr printer reads a `name` parameter as a function's name (a
    # str): the sow's name is not passed under that key.
    def f(x):
      x = sow(x, name=('block', 0, 'h'), tag='features')
      return sow(2 * x, name='out')

    text = str(jax.make_jaxpr(f)(X))
    self.assertIn("sow_name=('block', 0, 'h')", text)
    self.assertIn('sow_name=out', text)

  def test_unhashable_tag(self):
    with self.assertRaisesRegex(TypeError, r"sow\(name='t'\): tag must be"):
      sow(X, name='t', tag=['x'])

  @parameterized.named_parameters(
      ('str', 'hello'), ('object', object()), ('function', len)
  )
  def test_non_array_leaf(self, leaf):
    with self.assertRaisesRegex(
        TypeError, r"sow\(name='bad'\): every leaf .* at value\['x'\]"
    ):
      sow({'x': leaf}, name='bad')

  def test_identity_under_plain_transforms(self):
    def with_sow(x):
      h = sow(jnp.sin(x), name='h')
      sow(jnp.sum(h), name='bare')
      return jnp.cos(h) * x

    def without_sow(x):
      return jnp.cos(jnp.sin(x)) * x

    xs = jnp.stack([X, X + 1.0])
    checks = {
        'jit': lambda f: jax.jit(f)(X),
        'grad': lambda f: jax.grad(lambda x: jnp.sum(f(x)))(X),
        'vmap': lambda f: jax.vmap(f)(xs),
        'scan': lambda f: lax.scan(lambda c, x: (c, f(x)), 0.0, xs)[1],
        'checkpoint': lambda f: jax.grad(
            lambda x: jnp.sum(jax.checkpoint(f)(x))
        )(X),
        'export': lambda f: export.export(jax.jit(f))(X).call(X),
    }
    for name, run in checks.items():
      with self.subTest(name):
        np.testing.assert_array_equal(run(with_sow), run(without_sow))

  def test_no_effect_and_no_hlo_outside_capture(self):
    def with_sow(x):
      sow(x * 3, name='bare')
      return jnp.sin(sow(x, name='x'))

    def without_sow(x):
      return jnp.sin(x)

    self.assertEqual(jax.make_jaxpr(with_sow)(X).effects, set())
    hlo = lambda f: jax.jit(f).lower(X).as_text().split('\n', 1)[1]
    self.assertEqual(hlo(with_sow), hlo(without_sow))
    self.assertNotIn('token', hlo(with_sow))

  @parameterized.named_parameters(
      ('top', lambda f: f),
      ('jit', jax.jit),
      ('scan', lambda f: lambda x: lax.scan(lambda c, _: (f(c), None), x,
                                            None, length=2)[0]),
      ('cond', lambda f: lambda x: lax.cond(True, f, lambda y: y, x)),
      ('checkpoint', jax.checkpoint),
      ('custom_jvp', lambda f: _custom_jvp_identity_rule(f)),
      ('custom_vjp', lambda f: _custom_vjp_identity_rule(f)),
  )
  def test_bare_sow_survives_dce_while_harvesting(self, wrap):
    def f(x):
      sow(x * 3.0, name='bare')  # result unused
      return jnp.sin(x)

    g = wrap(f)
    grad_of_g = jax.grad(lambda x: jnp.sum(g(x)))
    self.assertGreaterEqual(count_sows(harvest_jaxpr(g, X)), 1)
    self.assertGreaterEqual(count_sows(harvest_jaxpr(grad_of_g, X)), 1)
    self.assertGreaterEqual(
        count_sows(harvest_jaxpr(jax.jit(grad_of_g), X)), 1
    )


def linearized_checkpoint_while(x):
  """``jax.linearize`` of a ``checkpoint``ed while_loop of 3 steps sowing
  ``'h'``; the linearized function applied to ones."""

  def body(c):
    i, h = c
    return i + 1, sow(jnp.sin(h) * 1.5, name='h')

  loop = lambda v: lax.while_loop(lambda c: c[0] < 3, body, (0, v))[1]
  y, lin = jax.linearize(jax.checkpoint(loop), x)
  return y, lin(jnp.ones_like(x))


class RematTest(parameterized.TestCase):
  """How a sow is split by the partial evaluation behind ``jax.checkpoint``
  (``_sow_partial_eval_custom``)."""

  def test_while_harvesting_the_recomputed_part_records_nothing(self):
    # The known program records the sow once; the recomputed part gets its
    # values from an identity without the effect. Left to JAX, the sow's
    # outputs were residuals, which the while_loop's partial evaluation
    # asserts it has none of.
    g = lambda x: jnp.sum(jax.checkpoint(
        lambda v: jnp.sin(sow(v * 3.0, name='a')))(x))
    jaxpr = harvest_jaxpr(jax.grad(g), X)
    self.assertEqual(count_sows(jaxpr), 1)
    linearized = harvest_jaxpr(linearized_checkpoint_while, X)
    # Two while_loops (JAX runs the loop twice: the known half, then the
    # whole loop for the tangents), each sowing once.
    self.assertEqual(count_sows(linearized), 2)

  def test_outside_a_capture_jax_splits_it_as_any_equation(self):
    # No effect: the recomputed part holds the sow itself, as JAX would
    # recompute it, and the program's gradient is unchanged.
    g = lambda x: jnp.sum(jax.checkpoint(
        lambda v: jnp.sin(sow(v * 3.0, name='a')))(x))
    plain = lambda x: jnp.sum(jnp.sin(x * 3.0))
    jaxpr = jax.make_jaxpr(jax.grad(g))(X).jaxpr
    self.assertEqual(count_sows(jaxpr), 2)
    np.testing.assert_allclose(jax.grad(g)(X), jax.grad(plain)(X), rtol=1e-6)


class MarkerTest(parameterized.TestCase):
  """The marker a capture reads: its effect, parameters and batching."""

  def test_the_effect_is_there_only_while_harvesting(self):
    f = lambda x: sow(x * 2, name='h')
    self.assertEqual(jax.make_jaxpr(f)(X).effects, set())
    with primitive.harvesting(True):
      closed = jax.make_jaxpr(f)(X)
    self.assertEqual(closed.effects, {primitive.sow_effect})

  def test_harvesting_keys_the_tracing_caches(self):
    traces = []

    @jax.jit
    def f(x):
      traces.append(primitive.harvesting.value)
      return sow(x, name='h')

    f(X)
    with primitive.harvesting(True):
      jax.make_jaxpr(f)(X)
    f(X)
    self.assertEqual(traces, [False, True])

  def test_parameters(self):
    f = lambda x: sow({'a': x}, name=('b', np.int64(1), 'h'), tag='t',
                      mode='clobber')
    (eqn,) = jax.make_jaxpr(f)(X).eqns
    self.assertIs(eqn.primitive, sow_p)
    self.assertEqual(eqn.params['sow_name'], ('b', 1, 'h'))
    self.assertIsInstance(eqn.params['sow_name'][1], int)
    self.assertEqual(eqn.params['tag'], 't')
    self.assertEqual(eqn.params['mode'], 'clobber')
    self.assertEqual(eqn.params['tree'],
                     jax.tree_util.tree_structure({'a': 0}))
    self.assertNotIn('meta', eqn.params)
    (eqn,) = jax.make_jaxpr(lambda x: primitive.sow_with_meta(
        x, name='m', tag=None, mode='append', meta=('k', 1)))(X).eqns
    self.assertEqual(eqn.params['meta'], ('k', 1))

  def test_sow_equations_and_keys_at_any_depth(self):
    def f(x):
      x = sow(x, name='top', tag='t')
      return jax.jit(lambda y: sow(y * 2, name=('inner', 0)))(x)

    jaxpr = jax.make_jaxpr(f)(X).jaxpr
    self.assertEqual(
        [e.params['sow_name'] for e in primitive.sow_equations(jaxpr)],
        ['top', ('inner', 0)])
    self.assertEqual(primitive.sow_keys(jaxpr),
                     {('top', 't'), (('inner', 0), None)})

  def test_while_harvesting_vmap_broadcasts_and_counts_the_axes(self):
    f = lambda x: sow((x, jnp.float32(1.0)), name='p')
    xs = jnp.stack([X, X])
    (plain,) = primitive.sow_equations(jax.make_jaxpr(jax.vmap(f))(xs).jaxpr)
    self.assertEqual(plain.params['vmapped'], 0)
    self.assertEqual(plain.invars[1].aval.shape, ())
    with primitive.harvesting(True):
      jaxpr = jax.make_jaxpr(jax.vmap(jax.vmap(f)))(jnp.stack([xs] * 4))
    (eqn,) = primitive.sow_equations(jaxpr.jaxpr)
    self.assertEqual(eqn.params['vmapped'], 2)
    self.assertEqual(eqn.invars[1].aval.shape, (4, 2))
    np.testing.assert_array_equal(jax.vmap(f)(xs)[0], xs)

  @parameterized.named_parameters(
      ('bad_mode', dict(mode='stack'), ValueError, 'mode'),
      ('unhashable_meta', dict(meta=['m']), TypeError, 'meta'),
  )
  def test_bad_parameters(self, kwargs, error, message):
    kwargs = dict(dict(tag=None, mode='append', meta=None), **kwargs)
    with self.assertRaisesRegex(error, message):
      primitive.sow_with_meta(X, name='p', **kwargs)

  def test_names(self):
    self.assertEqual(primitive.check_name(('a', np.int32(2)), where='w'),
                     ('a', 2))
    self.assertEqual(primitive.name_part(True), None)
    self.assertEqual(primitive.name_part(np.int8(3)), 3)
    with self.assertRaisesRegex(TypeError, r'^w: name must be'):
      primitive.check_name(('a', 2.0), where='w')

  def test_is_sowable(self):
    self.assertTrue(primitive.is_sowable({'a': X, 'b': 3, 'c': np.ones(2)}))
    self.assertFalse(primitive.is_sowable(['text']))


if __name__ == '__main__':
  absltest.main()
