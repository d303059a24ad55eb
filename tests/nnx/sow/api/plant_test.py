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
"""``plant``: values planted at sow sites, checked against them, per
execution, under ``vmap``, ``grad``, loops and custom derivatives.
"""

import os
import re

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import plant
from flax.nnx.sow import sow
from flax.nnx.sow.transform import inner_calls

import sow_testing


X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


def _program(x):
  """A program with a sow at every kind of site, for plant round trips."""
  h = sow(jnp.sin(x), name='top')

  @jax.jit
  def jitted(v):
    return sow(v * 2, name='jit') + 1

  h = jitted(h)
  h = lax.scan(lambda c, _: (sow(c * 0.5, name='scan') + c, None), h, None,
               length=3)[0]
  h = lax.cond(h[0] > 0, lambda v: sow(v + 1, name='cond'),
               lambda v: sow(v - 1, name='cond'), h)
  h = jax.checkpoint(lambda v: sow(jnp.tanh(v), name='remat'))(h)
  h = jax.vmap(lambda v: sow(v * v, name='vmap'))(h)
  return jnp.sum(sow(h, name='top') ** 2)


def _program_with(sow_fn, x):
  """`_program` with its sows replaced by `sow_fn` (a hand-written oracle)."""
  h = sow_fn(jnp.sin(x), name='top')
  h = sow_fn(h * 2, name='jit') + 1
  for _ in range(3):
    h = sow_fn(h * 0.5, name='scan') + h
  h = sow_fn(h + 1, name='cond') if h[0] > 0 else sow_fn(h - 1, name='cond')
  h = sow_fn(jnp.tanh(h), name='remat')
  h = sow_fn(h * h, name='vmap')
  return jnp.sum(sow_fn(h, name='top') ** 2)


X_PLANT_UNREAD = jnp.arange(3.0)


def _unread_top(x):
  sow(x * 2, name='unread')  # the result is dropped
  return x + 1


def _unread_in_jit(x):
  return jax.jit(_unread_top)(x)


def _unread_in_scan(x):
  def body(carry, x):
    sow(x * 2, name='unread')
    return carry + x, None

  return jax.lax.scan(body, 0.0, x)[0] + x


def _unread_in_cond(x):
  # Both branches sow the same names, as capture requires.
  def branch(x, scale):
    sow(x * scale, name='unread')
    return x + scale

  return jax.lax.cond(
      x[0] > -1, lambda x: branch(x, 2.0), lambda x: branch(x, 3.0), x
  )


_UNREAD = {
    'top': (_unread_top, 1),
    'jit': (_unread_in_jit, 1),
    'scan': (_unread_in_scan, 1),
    'cond': (_unread_in_cond, 1),
}


class PlantTest(parameterized.TestCase):

  @parameterized.parameters(False, True)
  def test_an_append_in_a_while_loop_does_not_stop_other_plants(self, jit):
    # Found by the program fuzzer: plant looked for its sites with a capture
    # of every sow, and an append inside a while_loop cannot be captured
    # without a bound: planting any other name into a program whose
    # sub-program has one raised "appended values need a bound". Oracle: the function with the planted value written in.
    def f(x, a=None):
      h = sow(x * 2, name='a') if a is None else a
      # In a sub-program (here a checkpoint), where plant looks for sites.
      return jax.checkpoint(lambda h: lax.while_loop(
          lambda c: c[0] < 2,
          lambda c: (c[0] + 1, sow(c[1] + 1, name='w')), (0, h + 1))[1])(h)

    x = jnp.arange(3.0)
    for values in ({'a': (-x,)}, {'a': lambda v, i: -x}):
      planted = plant(f, values)
      got = (jax.jit(planted) if jit else planted)(x)
      np.testing.assert_array_equal(got, f(x, a=-x))

  def test_plant_a_prng_key(self):
    f = lambda key: jax.random.normal(sow(key, name='k'), (2,))
    np.testing.assert_array_equal(
        plant(f, {'k': (jax.random.key(5),)})(jax.random.key(0)),
        jax.random.normal(jax.random.key(5), (2,)))
    with self.assertRaisesRegex(ValueError, r'key<fry>\[\]'):
      plant(f, {'k': (jnp.zeros((), jnp.uint32),)})(jax.random.key(0))

  def test_round_trip_is_bitwise(self):
    out, collected = capture(_program)(X)
    np.testing.assert_array_equal(plant(_program, collected)(X), out)
    np.testing.assert_array_equal(
        jax.jit(plant(_program, collected))(X), jax.jit(_program)(X)
    )

  @parameterized.parameters('top', 'jit', 'scan', 'cond', 'remat', 'vmap')
  def test_planting_changes_downstream_values(self, name):
    _, collected = capture(_program)(X)
    changed = {name: tuple(jax.tree.map(lambda v: v + 0.25, e)
                           for e in collected[name])}
    got = plant(_program, changed)(X)
    # Oracle: the program written out by hand, with the planted values put in
    # place of the sown ones (one per sow call; scan iterations unrolled).
    replacements = list(changed[name])
    if name == 'scan':
      replacements = list(replacements[0])

    def replace(v, *, name, target=name):
      return replacements.pop(0) if name == target else v

    sow_testing.assert_close(got, _program_with(replace, X))
    self.assertEqual(replacements, [])
    self.assertNotAlmostEqual(float(got), float(_program(X)), places=3)

  def test_planted_values_per_scan_iteration(self):
    def f(x):
      return lax.scan(lambda c, _: (sow(c + 1, name='s'), None), x, None,
                      length=3)[0]

    planted = (jnp.array([[10.0], [20.0], [30.0]]),)
    out = plant(f, {'s': planted})(jnp.zeros(1))
    np.testing.assert_array_equal(out, [30.0])  # the last iteration's value

  def test_grad_with_respect_to_planted_values(self):
    def f(x):
      h = sow(jnp.sin(x), name='h')
      return jnp.sum(h**3)

    _, collected = capture(f)(X)
    grads = jax.grad(lambda v: plant(f, v)(X))(collected)
    sow_testing.assert_close(grads['h'][0], 3 * np.sin(X) ** 2)

  def test_plant_under_vmap_and_tag(self):
    # Both results are read: planting into a sow whose result is unused is
    # an error (UnreadSowTest).
    def f(x):
      a = sow(x, name='a', tag='t')
      return 10 * a + sow(x * 2, name='a') + 1

    # Only the tagged sow is planted; the other one keeps its value.
    out = plant(f, {'a': (jnp.zeros(3, jnp.float32),)}, tag='t')(X)
    np.testing.assert_array_equal(out, 10 * 0 + X * 2 + 1)
    xs = jnp.stack([X, X + 1])
    planted = (jnp.zeros(3, jnp.float32), jnp.ones(3, jnp.float32))
    out = jax.vmap(plant(f, {'a': planted}))(xs)
    np.testing.assert_array_equal(out, jnp.full((2, 3), 10 * 0 + 1 + 1.0))

  def test_unplanted_sows_stay_for_capture(self):
    def f(x):
      a = sow(x, name='a')
      return sow(x * 2, name='b') + 1 + a

    zeros = jnp.zeros(3, jnp.float32)
    with self.assertWarns(inner_calls.TakenByInnerCall):
      out, collected = capture(plant(f, {'a': (zeros,)}))(X)
    self.assertEqual(list(collected), ['b'])
    np.testing.assert_array_equal(out, X * 2 + 1)

  @parameterized.named_parameters(
      ('structure', {'h': ((jnp.zeros(3),),)}, r"values\['h'\]\[0\] has "
       r'structure'),
      ('shape', {'h': (jnp.zeros(4, jnp.float32),)},
       r'float32\[4\], but the sow has float32\[3\]'),
      ('dtype', {'h': (jnp.zeros(3, jnp.int32),)}, r'int32\[3\]'),
      ('too_many', {'h': (jnp.zeros(3, jnp.float32),) * 2},
       r'2 entries but the function sows .h. 1 time\.'),
      ('never_sown', {'nope': (jnp.zeros(3),)}, "never sows 'nope'"),
  )
  def test_mismatches(self, values, message):
    f = lambda x: sow(jnp.sin(x), name='h') + 1
    with self.assertRaisesRegex(ValueError, message):
      plant(f, values)(X)

  def test_too_few_entries(self):
    def f(x):
      return sow(sow(x, name='h') + 1, name='h')

    with self.assertRaisesRegex(ValueError, r'has 1 entries but the function '
                                r'sows .h. more often'):
      plant(f, {'h': (X,)})(X)

  def test_clobber_sites_cannot_be_planted(self):
    f = lambda x: sow(x, name='c', mode='clobber')
    with self.assertRaisesRegex(ValueError, r"'c' is sown with "
                                r"mode='clobber'"):
      plant(f, {'c': (X,)})(X)

  def test_bad_values(self):
    with self.assertRaisesRegex(TypeError, 'plant: values must map'):
      plant(lambda x: x, [X])
    with self.assertRaisesRegex(TypeError, r"values\['h'\] must be a tuple"):
      plant(lambda x: x, {'h': X})
    with self.assertRaisesRegex(TypeError, 'plant: expected a callable'):
      plant(3, {})

  @parameterized.named_parameters(
      ('plain', lambda g: g),
      ('checkpoint', jax.checkpoint),
      ('jit', jax.jit),
      ('scan', lambda g: lambda x: lax.scan(
          lambda c, _: (g(c), None), x, None, length=1)[0]),
  )
  def test_a_plant_around_jax_jacfwd_is_refused(self, inner):
    # Around jacfwd, a plant would put a value per basis vector where jacfwd
    # needs the JVP's primal unbatched: the sow keeps the value it was given
    # and the plant refuses, naming the sow, in every form; broadcast, JAX
    # raised `at vmap out_axes[0]` inside jacfwd.
    g = lambda v: jnp.sin(sow(v * 2.0, name='s'))
    planted = plant(jax.jacfwd(inner(g)), {'s': lambda v, i: v * 3.0})
    with self.assertRaisesRegex(ValueError, r"^plant: the sow 's' "):
      planted(X)


class PlantCompositionTest(parameterized.TestCase):

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



class PlantIntoCustomDerivativesTest(parameterized.TestCase):

  @parameterized.parameters('custom_vjp', 'custom_jvp')
  def test_planted_value_is_used_inside_the_function(self, kind):
    def function(x):
      return jnp.sin(sow(x * 2, name='h'))

    if kind == 'custom_vjp':
      custom = jax.custom_vjp(function)
      custom.defvjp(
          lambda x: (custom(x), x),
          lambda x, g: (g * 2 * jnp.cos(2 * x),),
      )
    else:
      custom = jax.custom_jvp(function)
      custom.defjvp(
          lambda primals, tangents: (
              custom(*primals),
              2 * jnp.cos(2 * primals[0]) * tangents[0],
          )
      )
    planted = jnp.array([0.5, 1.0, -1.5], X.dtype)
    out = plant(custom, {'h': (planted,)})(X)
    np.testing.assert_array_equal(out, jnp.sin(planted))


class PlantThroughCustomRulesTest(parameterized.TestCase):

  @parameterized.parameters('custom_vjp', 'custom_jvp')
  def test_plant_reaches_a_sow_an_inner_capture_leaves(self, kind):
    def body(x):
      sow(jnp.int32(3), name='b')
      return sow(jnp.sin(x * 0.5), name='a') * 3.0 + 1.0

    if kind == 'custom_vjp':
      g = jax.custom_vjp(body)
      g.defvjp(lambda x: (g(x), None), lambda _, ct: (ct * 7.0,))
    else:
      g = jax.custom_jvp(body)
      g.defjvp(lambda p, t: (g(p[0]), 7.0 * t[0]))
    inner = lambda x: capture(g, names=('b',))(x)[0]
    planted = {'a': (jnp.full(3, 2.0, jnp.float32),)}  # X's, also x64

    # 'a' reaches the output only through the re-bound primitive: planting
    # it there changes the output (the inner capture once kept 'a' only in
    # a copy whose value nothing read, and plant refused).
    np.testing.assert_array_equal(plant(inner, planted)(X), jnp.full(3, 7.0))
    np.testing.assert_array_equal(
        jax.jit(plant(inner, planted))(X), jnp.full(3, 7.0))
    # Differentiated inside: the user's rule is still the one applied.
    def through_vjp(x):
      out, pullback = jax.vjp(inner, x)
      return out + 0.0 * pullback(jnp.ones_like(out))[0]

    np.testing.assert_array_equal(
        plant(through_vjp, planted)(X), jnp.full(3, 7.0))
    np.testing.assert_array_equal(
        jax.grad(lambda x: jnp.sum(inner(x)))(X), jnp.full(3, 7.0))
    # An outer capture sees 'a' once, with the value f computes.
    with self.assertWarns(inner_calls.TakenByInnerCall):
      (_, taken), outer = capture(capture(g, names=('b',)))(X)
    self.assertEqual(list(taken), ['b'])
    self.assertEqual(list(outer), ['a'])
    self.assertLen(outer['a'], 1)
    sow_testing.assert_close(outer['a'][0], np.sin(X * 0.5))


class SeveralSitesOfOneBodyTest(parameterized.TestCase):
  """Sites of equal shape in one body: each value goes to its own name."""

  @parameterized.parameters('eager', 'jit')
  def test_plant_into_several_sites_of_one_jit_body(self, mode):
    @jax.jit
    def g(x):
      a = sow(x + 1, name='a')
      b = sow(x * 2, name='b')
      c = sow(x - 3, name='c')
      return a * 100 + b * 10 + c

    pa, pc = X * 0 + 7, X * 0 - 5
    planted = plant(g, {'a': (pa,), 'c': (pc,)})
    if mode == 'jit':
      planted = jax.jit(planted)
    out = planted(X)
    expected = np.float32(7) * 100 + (np.asarray(X) * 2) * 10 + np.float32(-5)
    sow_testing.assert_close(out, expected)

  def test_plant_into_several_sites_of_one_scan_body(self):
    xs = jnp.arange(4.0)

    def f(xs):
      def body(c, x):
        a = sow(x + 1, name='a')
        b = sow(x * 2, name='b')
        return c + 10 * a + b, None

      return lax.scan(body, 0.0, xs)[0]

    pa = jnp.array([5.0, 6.0, 7.0, 8.0])
    out = plant(f, {'a': (pa,)})(xs)
    sow_testing.assert_close(out, np.sum(10 * np.asarray(pa) + 2 * xs))


class EagerPlantTest(parameterized.TestCase):
  """Outside any trace, ``plant(f, ...)`` is a direct call of ``f``."""

  def test_the_python_runs_on_every_call_with_concrete_values(self):
    calls = []

    def f(x, scale):
      calls.append(scale)
      h = sow(jnp.sin(x), name='h')
      # A value read on the host works, as in f itself.
      h = h * scale if float(h.sum()) > 0 else -h
      return jnp.sum(sow(h, name='out') ** 2)

    def by_hand(h, scale):  # f with the planted value written in
      h = h * scale if float(h.sum()) > 0 else -h
      return jnp.sum(h ** 2)

    for scale in (1.0, 2.0, 3.0):
      planted = plant(f, {'h': (X * scale,)})
      np.testing.assert_array_equal(planted(X, scale), by_hand(X * scale,
                                                              scale))
      steered = plant(f, {'h': lambda v, i: v + i + scale})
      np.testing.assert_array_equal(
          steered(X, scale), by_hand(jnp.sin(X) + scale, scale))
    self.assertEqual(calls, [1.0, 1.0, 2.0, 2.0, 3.0, 3.0])

  def test_a_value_read_only_by_a_jit_is_read(self):
    # The jit takes JAX's compiled path in other calls; a plant sees it.
    g = jax.jit(lambda h: h * 3)
    g(X)
    capture(lambda x: g(sow(x, name='x')))(X)  # its fast path recorded
    f = lambda x: g(sow(x + 1, name='h'))
    for _ in range(2):
      np.testing.assert_array_equal(
          plant(f, {'h': (jnp.ones(3, X.dtype),)})(X), jnp.full(3, 3.0, X.dtype))

  def test_a_value_returned_or_kept_in_a_variable_is_read(self):
    from flax import nnx  # pylint: disable=g-import-not-at-top

    class Cache(nnx.Module):

      def __init__(self):
        self.kv = nnx.Variable(jnp.zeros(3, X.dtype))

      def __call__(self, x):
        self.kv[...] = sow(x * 2, name='kv')
        return x + 1

    cache = Cache()
    zeros = jnp.zeros(3, X.dtype)
    out = plant(cache, {'kv': (zeros - 5,)})(X)
    np.testing.assert_array_equal(out, X + 1)
    np.testing.assert_array_equal(cache.kv[...], zeros - 5)
    returned = plant(lambda x: sow(x * 2, name='r'), {'r': (zeros + 7,)})(X)
    np.testing.assert_array_equal(returned, zeros + 7)

  def test_an_unread_value_is_refused_after_the_call(self):
    calls = []

    def f(x):
      calls.append(1)
      sow(x * 2, name='dropped')  # its result is never used
      return sow(x, name='kept') + 1

    with self.assertRaisesRegex(
        ValueError,
        r"plant: the sow 'dropped' \(tag=None, at .*"
        + re.escape(os.path.basename(__file__)) + r':\d+ .*never uses'):
      plant(f, {'dropped': (X + 10,), 'kept': (X + 20,)})(X)
    self.assertLen(calls, 1)  # eager: the call ran, then the check
    # Read on the host only (by NumPy) is not a use JAX can see: refused
    # too (the guide's limitations say so).
    with self.assertRaisesRegex(ValueError, r"'host' .*never uses"):
      plant(lambda x: np.asarray(sow(x, name='host')).sum() + x,
            {'host': (X + 10,)})(X)

  def test_a_pattern_plant_is_a_direct_call_too(self):
    calls = []

    def f(x):
      for i in range(3):
        x = sow(jnp.sin(x) + i, name=('layers', i, 'h'))
        if not isinstance(x, jax.core.Tracer):  # (under jax.jit below)
          calls.append(float(x.sum()))  # concrete, as in f itself
      # Inside a jit too: named when the call meets it.
      return jax.jit(lambda y: sow(y * 2, name=('layers', 3, 'h')))(x)

    def by_hand(x, layer):  # f with layer `layer` zeroed, written out
      for i in range(3):
        x = jnp.sin(x) + i
        x = 0.0 * x if i == layer else x
      return 0.0 * x if layer == 3 else x * 2

    seen = []

    def zero(layer):
      def fn(value, index, name):
        seen.append((name, index))
        return jnp.where(name[1] == layer, 0.0, value)
      return fn

    for layer in range(4):
      calls.clear()
      seen.clear()
      out = plant(f, {'layers.*.h': zero(layer)})(X)
      sow_testing.assert_close(out, by_hand(X, layer))
      self.assertLen(calls, 3)
      self.assertEqual([n for n, _ in seen],
                       [('layers', i, 'h') for i in range(4)])
      # Concrete where the call runs eagerly (not inside the jit).
      self.assertEqual([int(i) for _, i in seen[:3]], [0, 0, 0])
      seen.clear()
      calls.clear()
      sow_testing.assert_close(
          jax.jit(plant(f, {'layers.*.h': zero(layer)}))(X), out)
      self.assertEqual(calls, [])

  def test_a_pattern_plant_refuses_as_staged(self):
    def f(x):
      for i in range(2):
        x = sow(x + 1, name=('layers', i, 'h'))
      return x

    for run in (lambda g: g, jax.jit):
      with self.assertRaisesRegex(
          ValueError, r"pattern 'layer\.\*\.h' selects no sow.*closest names:"
          r" \('layers', \d, 'h'\)"):
        run(plant(f, {'layer.*.h': lambda v, i, n: v}))(X)
      with self.assertRaisesRegex(ValueError, 'selected by both'):
        run(plant(f, {'layers.*.h': lambda v, i, n: v,
                      ('layers', 1, 'h'): lambda v, i: v}))(X)
      with self.assertRaisesRegex(ValueError, 'selected by both'):
        run(plant(f, {'layers.*.h': lambda v, i, n: v,
                      '*.1.h': lambda v, i, n: v}))(X)
      # One spelling of two names (a str name and a tuple) is ambiguous.
      g = lambda x: sow(sow(x, name='a.b'), name=('a', 'b'))
      with self.assertRaisesRegex(ValueError, 'spells 2 names'):
        run(plant(g, {'a.b': lambda v, i: v}))(X)

  def test_under_jit_the_same_values(self):
    def f(x):
      h = sow(jnp.sin(x), name='h')
      return jax.lax.fori_loop(0, 2, lambda i, c: sow(c * 2, name='l'), h)

    values = {'h': (X,), 'l': lambda v, i: v + i}
    np.testing.assert_array_equal(plant(f, values)(X),
                                  jax.jit(plant(f, values))(X))


class UnreadSowTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(k, *v) for k, v in _UNREAD.items()])
  def test_planting_an_unread_sow_is_refused(self, f, count):
    out, collected = capture(f)(X_PLANT_UNREAD)
    self.assertLen(collected['unread'], count)  # it is a sow, and it runs
    with self.assertRaisesRegex(
        ValueError,
        r"plant: the sow 'unread' \(tag=None, at .*"
        + re.escape(os.path.basename(__file__)) + r':\d+ .*never uses',
    ):
      plant(f, {'unread': collected['unread']})(X_PLANT_UNREAD)
    # Capturing it is still fine, and so is planting another name.
    self.assertTrue(bool((capture(f)(X_PLANT_UNREAD)[0] == out).all()))

  def test_a_read_sow_next_to_it_is_planted(self):
    def f(x):
      sow(x * 2, name='unread')
      return sow(x * 3, name='read') + 1

    np.testing.assert_array_equal(
        plant(f, {'read': (jnp.zeros(3),)})(X_PLANT_UNREAD), jnp.ones(3)
    )

  def test_partly_read_value_is_planted(self):
    # One leaf of two is read: planting changes that leaf's use.
    def f(x):
      a, _ = sow((x, 2 * x), name='pair')
      return a + 1

    np.testing.assert_array_equal(
        plant(f, {'pair': ((jnp.zeros(3), jnp.zeros(3)),)})(X_PLANT_UNREAD), jnp.ones(3)
    )

  def test_result_read_only_as_scan_output_is_planted(self):
    # Read by the body's outputs (the scan's ys): not unread, even though
    # the caller drops the ys; planting changes the ys.
    def f(xs):
      def body(c, x):
        return c, sow(x, name='y')

      return jax.lax.scan(body, 0.0, xs)[1]

    np.testing.assert_array_equal(
        plant(f, {'y': (jnp.full(3, 7.0),)})(X_PLANT_UNREAD), jnp.full(3, 7.0)
    )


class NumpyIntegerNamesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('int64', np.int64), ('int32', np.int32), ('uint8', np.uint8)
  )
  def test_numpy_integers_are_ints_in_names(self, kind):
    def f(x):
      for i in np.arange(3).astype(kind):
        x = sow(x + 1, name=('layers', i))
      return x

    _, collected = capture(f)(X_PLANT_UNREAD)
    self.assertEqual(
        list(collected), [('layers', 0), ('layers', 1), ('layers', 2)]
    )
    for name in collected:
      self.assertIs(type(name[1]), int)
    # Selected and planted with either form of the index.
    _, one = capture(f, names=[('layers', kind(1))])(X_PLANT_UNREAD)
    self.assertEqual(list(one), [('layers', 1)])
    planted = plant(f, {('layers', kind(1)): (jnp.zeros(3),)})(X_PLANT_UNREAD)
    np.testing.assert_array_equal(planted, jnp.ones(3))

  @parameterized.named_parameters(
      ('bool', True), ('numpy_bool', np.bool_(True)), ('float', 1.0),
      ('numpy_float', np.float32(1.0)),
  )
  def test_other_scalars_are_still_refused(self, part):
    with self.assertRaisesRegex(TypeError, 'name must be a str or'):
      sow(X_PLANT_UNREAD, name=('layers', part))


if __name__ == '__main__':
  absltest.main()
