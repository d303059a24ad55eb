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
"""``capture``: what it returns and which sows it takes.

The values of each name in call order, pytrees, the function's signature
and arguments, tags and name filters, nested captures, the modes of a sow
(``append``, ``clobber``), names, literals and weak types. Programs here
have no higher-order primitive with a sow inside (the rules of ``rules/``
have tests of their own). Every expected value is recomputed independently:
directly with NumPy or jax.numpy outside of any sow machinery.
"""

import dataclasses

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import sow
from flax.nnx.sow import sow_p
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import inner_calls

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


class CaptureTest(parameterized.TestCase):

  def test_a_sown_python_number_is_captured_as_an_array(self):
    _, collected = capture(lambda: sow(2.5, name='c'))()
    self.assertIsInstance(collected['c'][0], jax.Array)
    self.assertEqual(float(collected['c'][0]), 2.5)

  def test_tuple_name(self):
    _, collected = capture(lambda x: sow(x, name=('layers', 0, 'h')))(X)
    np.testing.assert_array_equal(collected[('layers', 0, 'h')][0], X)

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
      ('tag_and_names', dict(tag='act', names={'b'}), ['b']),
      ('pattern', dict(names='layer.*'), [('layer', 0)]),
      ('spelled', dict(names=['layer.0', 'a']), ['a', ('layer', 0)]),
      ('glob', dict(names='*'), ['a', 'b', 'c']),
  )
  def test_select(self, kwargs, expected):
    _, collected = capture(self.f, **kwargs)(X)
    self.assertEqual(list(collected), expected)

  def test_unselected_sows_stay_for_an_enclosing_capture(self):
    inner = capture(self.f, tag='act')
    with self.assertWarns(inner_calls.TakenByInnerCall):
      (_, inner_collected), outer_collected = capture(inner)(X)
    self.assertEqual(list(inner_collected), ['a', 'b'])
    self.assertEqual(list(outer_collected), ['c', ('layer', 0)])
    np.testing.assert_array_equal(outer_collected['c'][0], X * 3)
    # The unselected sows stay in the program; outside of a capture they
    # carry no effect, so a plain jit of `inner` pays nothing for them.
    self.assertEqual(count_sows(jax.make_jaxpr(inner)(X).jaxpr), 2)
    self.assertEqual(jax.make_jaxpr(inner)(X).effects, set())
    self.assertEqual(count_sows(harvest_jaxpr(inner, X)), 2)


class ModesTest(parameterized.TestCase):

  def test_bad_mode(self):
    with self.assertRaisesRegex(ValueError, r"sow\(name='m'\): mode must be"):
      sow(X, name='m', mode='stack')

  def test_clobber_keeps_the_last_value(self):
    def f(x):
      sow(x, name='c', mode='clobber')
      sow(x * 2, name='c', mode='clobber')
      sow(x, name='a')
      sow(x + 1, name='a')
      return x

    _, collected = capture(f)(X)
    self.assertLen(collected['c'], 1)
    np.testing.assert_array_equal(collected['c'][0], X * 2)
    self.assertLen(collected['a'], 2)

  def test_clobber_replaces_appended_entries(self):
    def f(x):
      sow(x, name='n')
      sow(x + 1, name='n')
      sow(x + 2, name='n', mode='clobber')
      sow(x + 3, name='n')
      return x

    _, collected = capture(f)(X)
    self.assertLen(collected['n'], 2)
    np.testing.assert_array_equal(collected['n'][0], X + 2)
    np.testing.assert_array_equal(collected['n'][1], X + 3)


class StagedCaptureTest(parameterized.TestCase):
  """A capture under a staging trace."""

  def test_a_sown_constant_is_an_array_when_staged(self):
    # A sow of a Python constant, under a name predicate: its value comes
    # back as a JAX array, as `sow` returns it, eagerly and staged.
    captured = capture(lambda: sow(3.0, name='c'), names=lambda name: True)
    for out, collected in (captured(), jax.jit(captured)()):
      self.assertIsInstance(out, jax.Array)
      self.assertIsInstance(collected['c'][0], jax.Array)
      np.testing.assert_array_equal(out, 3.0)
      np.testing.assert_array_equal(collected['c'][0], 3.0)

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


class NamesTest(parameterized.TestCase):

  def test_a_single_string_selects_that_name_not_its_letters(self):
    def f(x):
      for name in ('hidden', 'h', 'i', 'd'):
        x = sow(x + 1, name=name)
      return x

    _, collected = capture(f, names='hidden')(X)
    self.assertEqual(list(collected), ['hidden'])

  def test_bool_is_not_a_name_part(self):
    with self.assertRaisesRegex(TypeError, 'name must be'):
      sow(X, name=('layer', True))


class WeakTypeTest(absltest.TestCase):

  def test_sown_python_number_stays_weakly_typed(self):
    # JAX converts a Python float weakly: 2.0 * a bfloat16 array is bfloat16.
    x = jnp.ones(3, jnp.bfloat16)
    self.assertEqual((2.0 * x).dtype, jnp.bfloat16)
    out, collected = capture(lambda x: sow(2.0, name='c') * x)(x)
    self.assertEqual(out.dtype, jnp.bfloat16)
    self.assertTrue(collected['c'][0].weak_type)


class LiteralsTest(absltest.TestCase):

  def test_a_sown_constant_is_returned_as_a_jax_array(self):
    out, collected = capture(lambda x: sow(3, name='c'))(X)
    expected = jnp.asarray(3)  # what a direct call of sow(3) returns
    for value in (out, collected['c'][0]):
      self.assertIsInstance(value, jax.Array)
      self.assertEqual(value.dtype, expected.dtype)
      self.assertEqual(value.weak_type, expected.weak_type)
      self.assertEqual(int(value), 3)


if __name__ == '__main__':
  absltest.main()
