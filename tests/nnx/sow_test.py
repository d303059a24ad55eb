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
"""Tests of the core transform: sow, capture, perturb.

Every expected value is recomputed independently: directly with NumPy or
jax.numpy outside of any sow machinery, or as an analytic gradient.
"""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import export
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow import perturb
from flax.nnx.sow import plant
from flax.nnx.sow.transform import primitive
from flax.nnx.sow import sow
from flax.nnx.sow import sow_p

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


def harvest_jaxpr(f, *args):
  """The jaxpr `capture` sees for f: traced while harvesting."""
  with primitive.harvesting(True):
    return jax.make_jaxpr(f)(*args).jaxpr


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Pair:
  a: jax.Array
  b: jax.Array


class ProposalExamplesTest(absltest.TestCase):
  """The proposal's examples, verbatim in substance, against oracles."""

  def test_features(self):
    w1 = jnp.array([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0]])
    w2 = jnp.array([1.5, -1.0])
    layer = lambda x: jnp.tanh(x @ w1)
    head = lambda y: y @ w2

    def f(x):
      y = layer(x)
      sow(y, name='features')
      return head(y)

    out, collected = capture(f)(X)
    y = np.tanh(np.asarray(X) @ np.asarray(w1))
    sow_testing.assert_close(collected['features'][0], y)
    sow_testing.assert_close(out, y @ np.asarray(w2))
    self.assertLen(collected['features'], 1)
    np.testing.assert_array_equal(out, f(X))

  def test_grad_x(self):
    def loss(x):
      return jnp.sum(perturb(x, name='grad_x') ** 2)

    grad, collected = capture(jax.grad(loss))(X)
    np.testing.assert_array_equal(collected['grad_x'][0], 2 * np.asarray(X))
    np.testing.assert_array_equal(grad, 2 * np.asarray(X))

  def test_custom_vjp_backward_sows(self):
    @jax.custom_vjp
    def h(x):
      return x**2

    def h_fwd(x):
      return h(x), x

    def h_bwd(x, g):
      gx = 2 * x * g
      sow(gx, name='grad_h')
      return (gx,)

    h.defvjp(h_fwd, h_bwd)
    loss = lambda x: jnp.sum(h(x))
    x = jnp.arange(3.0)
    grad, collected = capture(jax.grad(loss))(x)
    np.testing.assert_array_equal(collected['grad_h'][0], [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(grad, [0.0, 2.0, 4.0])
    self.assertEqual(list(collected), ['grad_h'])


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
    _, collected = capture(lambda: sow(2.5, name='c'))()
    self.assertEqual(float(collected['c'][0]), 2.5)

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

  def test_tuple_name(self):
    _, collected = capture(lambda x: sow(x, name=('layers', 0, 'h')))(X)
    np.testing.assert_array_equal(collected[('layers', 0, 'h')][0], X)

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


def _custom_jvp_identity_rule(f):
  g = jax.custom_jvp(f)
  g.defjvp(lambda p, t: (g(*p), jnp.cos(p[0]) * t[0]))
  return g


def _custom_vjp_identity_rule(f):
  g = jax.custom_vjp(f)
  g.defvjp(lambda x: (g(x), x), lambda x, ct: (jnp.cos(x) * ct,))
  return g


class CaptureTest(parameterized.TestCase):

  def test_out_is_bitwise_f(self):
    def f(x, scale):
      h = sow(jnp.exp(jnp.sin(x)) @ jnp.outer(x, x), name='h')
      return jnp.tanh(h) * scale

    out, _ = capture(f)(X, 3.0)
    np.testing.assert_array_equal(out, f(X, 3.0))
    out, _ = capture(jax.jit(f))(X, 3.0)
    np.testing.assert_array_equal(out, jax.jit(f)(X, 3.0))

  def test_name_sown_twice_in_call_order(self):
    def f(x):
      for i in range(3):
        x = sow(x + i, name='x')
      return x

    _, collected = capture(f)(X)
    self.assertLen(collected['x'], 3)
    for i, expected in enumerate([X, X + 1, X + 1 + 2]):  # as f adds
      np.testing.assert_array_equal(collected['x'][i], expected)

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

  def test_pytree_sows(self):
    def f(x):
      sow({'a': x, 'b': [x * 2, (x * 3,)]}, name='dict')
      sow(Pair(a=x, b=-x), name='dataclass')
      sow((), name='empty')
      return x

    _, collected = capture(f)(X)
    d = collected['dict'][0]
    np.testing.assert_array_equal(d['b'][1][0], X * 3)
    self.assertEqual(list(d), ['a', 'b'])
    self.assertIsInstance(collected['dataclass'][0], Pair)
    np.testing.assert_array_equal(collected['dataclass'][0].b, -X)
    self.assertEqual(collected['empty'], ((),))

  def test_non_array_arguments_reach_f_unchanged(self):
    marker = object()
    seen = {}

    def f(x, flag, n, label, nothing, obj, *, scale):
      seen.update(flag=flag, n=n, label=label, nothing=nothing, obj=obj,
                  scale=scale)
      if flag:  # Python control flow on a static argument
        x = sow(x * n, name=label)
      return x * scale

    out, collected = capture(f)(X, True, 3, 'lbl', None, marker, scale=2.0)
    self.assertEqual(
        seen,
        dict(flag=True, n=3, label='lbl', nothing=None, obj=marker, scale=2.0),
    )
    self.assertIs(type(seen['n']), int)
    np.testing.assert_array_equal(collected['lbl'][0], X * 3)
    np.testing.assert_array_equal(out, X * 6)

  def test_numpy_arguments_are_traced(self):
    x = np.asarray(X)
    out, collected = capture(lambda v: sow(v * 2, name='v'))(x)
    np.testing.assert_array_equal(collected['v'][0], x * 2)
    np.testing.assert_array_equal(out, x * 2)

  def test_keeps_signature(self):
    def my_function(x, y=1):
      """Doc."""
      return x + y

    wrapped = capture(my_function)
    self.assertEqual(wrapped.__name__, 'my_function')
    self.assertEqual(wrapped.__doc__, 'Doc.')
    self.assertIs(wrapped.__wrapped__, my_function)

  def test_not_callable(self):
    with self.assertRaisesRegex(TypeError, 'capture: expected a callable'):
      capture(3)

  def test_bad_names_filter(self):
    with self.assertRaisesRegex(TypeError, 'capture: names must be'):
      capture(lambda x: x, names=3)
    with self.assertRaisesRegex(TypeError, 'capture: name must be'):
      capture(lambda x: x, names=[1.5])

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


class SelectionTest(parameterized.TestCase):

  @staticmethod
  def f(x):
    sow(x, name='a', tag='act')
    sow(x * 2, name='b', tag='act')
    sow(x * 3, name='c', tag='metric')
    sow(x * 4, name=('layer', 0))
    return x

  @parameterized.named_parameters(
      ('all', {}, ['a', 'b', 'c', ('layer', 0)]),
      ('tag', dict(tag='act'), ['a', 'b']),
      ('name', dict(names='c'), ['c']),
      ('names', dict(names=['a', ('layer', 0)]), ['a', ('layer', 0)]),
      ('predicate', dict(names=lambda n: isinstance(n, tuple)),
       [('layer', 0)]),
      ('tag_and_names', dict(tag='act', names={'b', 'c'}), ['b']),
  )
  def test_select(self, kwargs, expected):
    _, collected = capture(self.f, **kwargs)(X)
    self.assertEqual(list(collected), expected)

  def test_unselected_sows_stay_for_an_enclosing_capture(self):
    inner = capture(self.f, tag='act')
    (_, inner_collected), outer_collected = capture(inner)(X)
    self.assertEqual(list(inner_collected), ['a', 'b'])
    self.assertEqual(list(outer_collected), ['c', ('layer', 0)])
    np.testing.assert_array_equal(outer_collected['c'][0], X * 3)
    # The unselected sows stay in the program; outside of a capture they
    # carry no effect, so a plain jit of `inner` pays nothing for them.
    self.assertEqual(count_sows(jax.make_jaxpr(inner)(X).jaxpr), 2)
    self.assertEqual(jax.make_jaxpr(inner)(X).effects, set())
    self.assertEqual(count_sows(harvest_jaxpr(inner, X)), 2)

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
    (_, inner_collected), outer_collected = capture(capture(f, tag='a'))(X)
    self.assertEqual(list(inner_collected), ['a'])
    np.testing.assert_array_equal(
        outer_collected['b'][0], jnp.stack([X * 2, (X * 2 + 1) * 2])
    )

  def test_nested_inside_jit_and_scan(self):
    def g(x):
      x = jax.jit(self.f)(x)
      return lax.scan(lambda c, _: (self.f(c), None), x, None, length=2)[0]

    (_, inner), outer = jax.jit(capture(capture(g, tag='metric')))(X)
    self.assertEqual(list(inner), ['c'])
    self.assertLen(inner['c'], 2)
    self.assertEqual(inner['c'][1].shape, (2, 3))
    self.assertEqual(list(outer), ['a', 'b', ('layer', 0)])
    np.testing.assert_array_equal(outer['b'][1], jnp.stack([X * 2, X * 2]))


class ControlFlowTest(parameterized.TestCase):

  def test_jit_nested(self):
    @jax.jit
    def inner(x):
      return jnp.sin(sow(x * 2, name='inner'))

    @jax.jit
    def outer(x):
      return inner(sow(x + 1, name='outer'))

    out, collected = capture(outer)(X)
    np.testing.assert_array_equal(out, outer(X))
    np.testing.assert_array_equal(collected['outer'][0], X + 1)
    np.testing.assert_array_equal(collected['inner'][0], (X + 1) * 2)

  def test_closed_call(self):
    from jax._src.lax.eval_jaxpr import eval_jaxpr_p  # pylint: disable=g-import-not-at-top

    body = harvest_jaxpr(lambda x: sow(x * 5, name='in_call') + 1, X)
    closed = jax.extend.core.ClosedJaxpr(body, ())

    def f(x):
      return eval_jaxpr_p.bind(x, jaxpr=closed)[0]

    self.assertIn('closed_call', str(jax.make_jaxpr(f)(X)))
    out, collected = capture(f)(X)
    np.testing.assert_array_equal(collected['in_call'][0], X * 5)
    np.testing.assert_array_equal(out, X * 5 + 1)

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
    out, _ = capture(f, names=['unrelated'])(X)  # nothing selected: runs
    np.testing.assert_array_equal(out, f(X))

  def test_while_loop_with_sows_is_refused(self):
    def f(x):
      return lax.while_loop(lambda c: c[0] < 5,
                            lambda c: sow(c + 1, name='step'), x)

    with self.assertRaisesRegex(
        NotImplementedError, r"while_loop .* sows 'step'"
    ):
      capture(f)(X)

  def test_a_sown_constant_is_an_array_when_staged(self):
    # A name predicate is asked about the whole program, so the call is
    # staged and its jaxpr evaluated, whose sow of a constant has literal
    # operands: they come back as JAX arrays, as `sow` returns them.
    out, collected = capture(lambda: sow(3.0, name='c'),
                             names=lambda name: True)()
    self.assertIsInstance(out, jax.Array)
    self.assertIsInstance(collected['c'][0], jax.Array)
    np.testing.assert_array_equal(out, 3.0)

  def test_a_staged_capture_returns_the_last_clobber_only(self):
    # Staged, each clobber supersedes the values before it: the program
    # returns one value for the name, not one per sow.
    def f(x):
      for i in range(5):
        x = sow(x * (i + 1.0), name='c', mode='clobber')
      return x

    closed = jax.make_jaxpr(capture(f))(X)
    self.assertLen(closed.jaxpr.outvars, 2)  # out, and the last clobber
    out, collected = jax.jit(capture(f))(X)
    np.testing.assert_array_equal(collected['c'][0], out)

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

  def test_unsupported_higher_order_primitive_is_refused(self):
    matrix = jnp.array([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 4.0]])

    def f(b):
      matvec = lambda v: sow(matrix @ v, name='matvec')
      solve = lambda mv, r: r / jnp.diag(matrix)
      return lax.custom_linear_solve(matvec, b, solve, symmetric=True)

    np.testing.assert_array_equal(f(X), X / jnp.diag(matrix))
    with self.assertRaisesRegex(
        NotImplementedError, r"primitive 'custom_linear_solve' .*'matvec'"
    ):
      capture(f)(X)

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

      (grad, outer) = capture(jax.grad(loss))(X)
      np.testing.assert_array_equal(grad, jnp.full(3, 100.0))
      self.assertEqual(list(outer), ['seen'])
      sow_testing.assert_close(outer['seen'][0], jnp.sum(X * 3.0))

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


class CompositionTest(parameterized.TestCase):

  @staticmethod
  def f(x):
    h = sow(jnp.tanh(x * 2.0), name='h')
    return jnp.sum(h**2)

  def test_jit_of_capture_is_one_computation(self):
    jaxpr = jax.make_jaxpr(jax.jit(capture(self.f)))(X)
    self.assertLen(jaxpr.eqns, 1)
    self.assertEqual(jaxpr.eqns[0].primitive.name, 'jit')
    self.assertEqual(count_sows(jaxpr.jaxpr), 0)
    self.assertEqual(jaxpr.effects, set())
    out, collected = jax.jit(capture(self.f))(X)
    sow_testing.assert_close(collected['h'][0], jnp.tanh(X * 2))
    sow_testing.assert_close(out, self.f(X))

  @staticmethod
  def first_order(x):
    h = sow(jnp.tanh(x * 2.0), name='h')
    sow({'sum': jnp.sum(h), 'two': 2.0}, name='stats', tag='metrics')
    sow(h * 3.0, name='other', tag='other')
    return jnp.sum(h**2)

  def first_order_by_hand(self, x):
    h = np.tanh(np.asarray(x) * 2.0)
    return np.sum(h**2), h

  def test_staged_first_order_capture_is_one_closed_call(self):
    # Only copying equations: staged as one call of a rewritten jaxpr.
    jaxpr = jax.make_jaxpr(capture(self.first_order, tag='metrics'))(X)
    self.assertLen(jaxpr.eqns, 1)
    self.assertIs(jaxpr.eqns[0].primitive, jax.extend.core.primitives.
                  closed_call_p)
    self.assertEqual(count_sows(jaxpr.jaxpr), 2)  # 'h' and 'other' stay
    self.assertEqual(jaxpr.effects, set())
    with jax.enable_checks(True):
      out, collected = jax.jit(capture(self.first_order))(X)
    expected_out, h = self.first_order_by_hand(X)
    sow_testing.assert_close(out, expected_out)
    self.assertEqual(list(collected), ['h', 'stats', 'other'])
    sow_testing.assert_close(collected['h'][0], h)
    sow_testing.assert_close(collected['stats'][0]['sum'], h.sum())
    self.assertEqual(collected['stats'][0]['two'], 2.0)
    sow_testing.assert_close(collected['other'][0], 3 * h)

  def test_staged_rewrite_composes(self):
    xs = jnp.stack([X, X * 2, -X])
    # vmap of the staged call, against each example alone.
    _, collected = jax.vmap(jax.jit(capture(self.first_order)))(xs)
    for i, x in enumerate(xs):
      sow_testing.assert_close(
          collected['h'][0][i], self.first_order_by_hand(x)[1])
    # grad through it, against the analytic derivative of sum(tanh(2x)).
    def loss(x):
      _, c = jax.jit(capture(self.first_order))(x)
      return c['stats'][0]['sum']

    t = np.tanh(2 * np.asarray(X))
    sow_testing.assert_close(jax.grad(loss)(X), 2 * (1 - t**2))
    # An enclosing capture still sees the sows the inner one leaves.
    (_, inner), outer = capture(
        jax.jit(capture(self.first_order, tag='metrics'))
    )(X)
    self.assertEqual(list(inner), ['stats'])
    self.assertEqual(list(outer), ['h', 'other'])
    sow_testing.assert_close(
        outer['other'][0], 3 * self.first_order_by_hand(X)[1])

  def test_staged_rewrite_compiles_like_returning_the_values(self):
    def by_hand(x):
      h = jnp.tanh(x * 2.0)
      return jnp.sum(h**2), h, jnp.sum(h), 2.0, h * 3.0

    def ops(f):
      text = jax.jit(f).lower(X).compile().as_text()
      return sorted(
          line.split('=', 1)[1].split('(', 1)[0].split()[-1]
          for line in text.splitlines()
          if ' = ' in line and not line.lstrip().startswith('ROOT')
      )

    self.assertEqual(ops(capture(self.first_order)), ops(by_hand))

  def test_vmap_of_capture(self):
    xs = jnp.stack([X, X * 2, X * 3, X * 4])
    out, collected = jax.vmap(capture(self.f))(xs)
    sow_testing.assert_close(collected['h'][0], jnp.tanh(xs * 2))
    sow_testing.assert_close(out, jax.vmap(self.f)(xs))

  @parameterized.named_parameters(('axis0', 0), ('axis1', 1))
  def test_capture_of_vmap_has_batch_axis_leading(self, in_axis):
    xs = jnp.stack([X, X * 2, X * 3, X * 4], axis=in_axis)
    const = jnp.ones(2)

    def g(x):
      sow({'batched': x * 2, 'unbatched': const}, name='v')
      return x

    _, collected = capture(jax.vmap(g, in_axes=in_axis))(xs)
    np.testing.assert_array_equal(
        collected['v'][0]['batched'], jnp.moveaxis(xs, in_axis, 0) * 2
    )
    # A value that does not depend on the mapped inputs gets the axis too,
    # as jax.vmap's outputs do: each example has its own entry.
    np.testing.assert_array_equal(
        collected['v'][0]['unbatched'], jnp.broadcast_to(const, (4, 2))
    )

  # capture(jax.vmap(f)) lays out sown values as jax.vmap(capture(f)) does:
  # the axis of a transformation comes before the axes of what it contains.
  # Oracle: jax.vmap(capture(f)), which vmaps capture's outputs.

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

  def test_scan_of_vmap_of_jit_puts_the_loop_axis_first(self):
    # The vmap batches the jit equation of each step (its name stack reads
    # vmap(), the sow inside does not): the vmap is inside the loop all the
    # same, so the loop axis comes first.
    double = jax.vmap(jax.jit(lambda v: sow(v * 2, name='s')))

    def f(x):  # x: (5, 3), mapped inside each step
      return lax.scan(lambda c, _: (double(c), None), x, None, length=4)[0]

    xs = jnp.stack([X, X + 1, X + 2, X + 3, X + 4])
    for wrap in (lambda g: g, jax.jit):
      _, collected = wrap(capture(f))(xs)
      self.assertEqual(collected['s'][0].shape, (4, 5, 3))
      for k in range(4):
        np.testing.assert_array_equal(
            collected['s'][0][k], xs * 2.0 ** (k + 1)
        )
    # Planted values have that layout too: the carry after the last step is
    # what was planted at step 3, ones for example 2 only.
    marked = jnp.zeros((4, 5, 3), jnp.float32).at[3, 2].set(1.0)
    out = plant(f, {'s': (marked,)})(xs)
    np.testing.assert_array_equal(out, marked[3])

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

  def test_plant_round_trip_under_vmap_of_scan(self):
    def f(x):
      step = lambda c, _: (sow(jnp.sin(c), name='s') * 2, None)
      return lax.scan(step, x, None, length=4)[0]

    xs = jnp.stack([X, X + 1, X + 2, X + 3, X + 4])
    out, collected = capture(jax.vmap(f))(xs)
    np.testing.assert_array_equal(plant(jax.vmap(f), collected)(xs), out)
    # A planted value reaches its own example and step only.
    marked = jnp.zeros((5, 4, 3), jnp.float32).at[2, 3].set(1.0)
    out = plant(jax.vmap(f), {'s': (marked,)})(xs)
    np.testing.assert_array_equal(out[2], 2 * jnp.ones(3))
    np.testing.assert_array_equal(np.delete(np.asarray(out), 2, 0), 0.0)

  def test_planting_per_example_into_a_constant_sow(self):
    # The zero sown under vmap is broadcast, so each example takes its own
    # planted value; gradients with respect to them are per example.
    def f(x):
      return x + sow(jnp.zeros_like(x[0]), name='p')

    xs = jnp.stack([X, X + 1])  # (2, 3)
    _, collected = capture(jax.vmap(f))(xs)
    self.assertEqual(collected['p'][0].shape, (2,))
    loss = lambda p: jnp.sum(
        plant(jax.vmap(f), {'p': (p,)})(xs) ** 2
        * jnp.array([[1.0], [3.0]], jnp.float32))
    grad = jax.grad(loss)(jnp.zeros(2, jnp.float32))
    # d/dp_b sum_i w_b (x_bi + p_b)^2 = 2 w_b sum_i x_bi at p = 0
    want = 2 * jnp.array([1.0, 3.0], jnp.float32) * jnp.sum(xs, axis=1)
    sow_testing.assert_close(grad, want)

  def test_grad_through_capture_equals_grad(self):
    grad = jax.grad(lambda x: capture(self.f)(x)[0])(X)
    sow_testing.assert_close(grad, jax.grad(self.f)(X))
    # and against the analytic derivative of sum(tanh(2x)^2)
    t = np.tanh(2 * np.asarray(X))
    sow_testing.assert_close(grad, 4 * t * (1 - t**2))

  def test_grad_of_captured_values(self):
    def collected_sum(x):
      return jnp.sum(capture(self.f)(x)[1]['h'][0])

    t = np.tanh(2 * np.asarray(X))
    sow_testing.assert_close(jax.grad(collected_sum)(X), 2 * (1 - t**2))

  def test_capture_under_outer_trace_with_closure(self):
    @jax.jit
    def outer(x, y):
      return capture(lambda v: sow(v * y, name='vy'))(x)

    out, collected = outer(X, jnp.float32(3.0))
    np.testing.assert_array_equal(collected['vy'][0], X * 3)
    np.testing.assert_array_equal(out, X * 3)

  def test_compiled_artifact_contract(self):
    compiled = jax.jit(capture(self.f)).lower(X).compile()
    for x in (X, X + 0.5):
      out, collected = compiled(x)
      sow_testing.assert_close(collected['h'][0], jnp.tanh(x * 2))
      sow_testing.assert_close(out, self.f(x))
    with self.assertRaises(TypeError):
      compiled(jnp.ones(4))

  def test_eager_capture_of_jit_with_changing_argument_kinds(self):
    # The compiled runners are found by tree and leaf types: a Python number
    # where an array was, and back, must each get a runner of their own.
    captured = capture(jax.jit(lambda x, n: sow(x * n, name='xn') + 1))
    for x, n in ((X, 2.0), (np.asarray(X), 2.0), (X, jnp.float32(3.0)),
                 (2.0, 4), (X, 2.0)):
      out, collected = captured(x, n)
      expected = np.asarray(x, np.float32) * np.float32(n)
      sow_testing.assert_close(collected['xn'][0], expected)
      sow_testing.assert_close(out, expected + 1)

  def test_transformed_subjaxprs_are_cached(self):
    jitted = jax.jit(lambda x: sow(x * 2, name='h') + 1)
    f = lambda x: jitted(x) * 3  # not itself a jit function: general path
    capture(f)(X)
    before = interpreter.transform.cache_info()
    for _ in range(3):
      capture(f)(X)
    after = interpreter.transform.cache_info()
    self.assertEqual(after.misses, before.misses)
    self.assertEqual(after.hits, before.hits + 3)


class PerturbTest(parameterized.TestCase):

  @staticmethod
  def loss(w, x):
    h = perturb(jnp.tanh(x * w), name='h')
    return jnp.sum(h**2)

  @staticmethod
  def dloss_dh(w, x):
    return 2 * np.tanh(np.asarray(x) * np.asarray(w))

  def test_grad_and_jit(self):
    for f in (jax.grad(self.loss), jax.jit(jax.grad(self.loss))):
      _, collected = capture(f)(1.5, X)
      sow_testing.assert_close(collected['h'][0], self.dloss_dh(1.5, X))

  def test_value_and_grad(self):
    (value, grad), collected = capture(jax.value_and_grad(self.loss))(1.5, X)
    sow_testing.assert_close(value, self.loss(1.5, X))
    sow_testing.assert_close(grad, jax.grad(self.loss)(1.5, X))
    sow_testing.assert_close(collected['h'][0], self.dloss_dh(1.5, X))

  def test_vjp(self):
    def f(x):
      out, pullback = jax.vjp(lambda v: jnp.sin(perturb(v, name='v')) * 3, x)
      return pullback(jnp.ones_like(out))[0]

    _, collected = capture(f)(X)
    sow_testing.assert_close(collected['v'][0], 3 * np.cos(X))

  def test_per_example_gradients_under_vmap(self):
    xs = jnp.stack([X, X * 2, X * -1])
    per_example = jax.vmap(jax.grad(self.loss), in_axes=(None, 0))
    _, collected = capture(per_example)(1.5, xs)
    expected = np.stack([self.dloss_dh(1.5, x) for x in xs])
    sow_testing.assert_close(collected['h'][0], expected)

  def test_per_step_gradients_under_scan(self):
    ws = jnp.array([0.5, 1.0, 2.0], jnp.float32)

    def loss(x):
      def body(c, w):
        c = perturb(jnp.sin(c * w), name='step')
        return c, None
      return jnp.sum(lax.scan(body, x, ws)[0])

    _, collected = capture(jax.grad(loss))(X)
    # Oracle: back-propagate by hand through c_{k+1} = sin(c_k * w_k).
    cs = [np.asarray(X, np.float64)]
    for w in np.asarray(ws):
      cs.append(np.sin(cs[-1] * w))
    grads = [np.ones(3)]
    for k in reversed(range(len(ws))):
      grads.insert(0, grads[0] * np.cos(cs[k] * ws[k]) * ws[k])
    # d loss / d c_{k+1} for k = 0, 1, 2, stacked in step order.
    sow_testing.assert_close(collected['step'][0], np.stack(grads[1:]))

  def test_symbolically_zero_gradient_runs_no_backward_pass(self):
    # JAX proves the cotangent of `y` is zero and skips perturb's backward
    # rule, so nothing is sown (documented under Limitations).
    def loss(x):
      y = perturb(x, name='blocked')
      return jnp.sum(x) + jnp.sum(lax.stop_gradient(y))

    _, collected = capture(jax.grad(loss))(X)
    self.assertNotIn('blocked', collected)

  def test_numerically_zero_gradient_is_sown(self):
    def loss(x):
      return jnp.sum(perturb(x, name='zero') * 0.0)

    _, collected = capture(jax.grad(loss))(X)
    np.testing.assert_array_equal(collected['zero'][0], np.zeros(3))

  def test_discarded_perturb_has_no_backward_pass(self):
    # The result of perturb is never used, so the loss does not depend on it
    # and JAX never runs its backward rule: there is no gradient to report.
    def loss(x):
      perturb(x, name='discarded')
      return jnp.sum(x)

    _, collected = capture(jax.grad(loss))(X)
    self.assertNotIn('discarded', collected)

  def test_no_gradient_no_sow(self):
    out, collected = capture(self.loss)(1.5, X)
    self.assertEqual(collected, {})
    np.testing.assert_array_equal(out, self.loss(1.5, X))

  def test_integer_value_is_rejected(self):
    with self.assertRaisesRegex(TypeError, r"perturb\(name='i'\): only"):
      perturb(jnp.arange(3), name='i')

  def test_bad_name(self):
    with self.assertRaisesRegex(TypeError, r'perturb\(name=3\)'):
      perturb(X, name=3)


if __name__ == '__main__':
  absltest.main()
