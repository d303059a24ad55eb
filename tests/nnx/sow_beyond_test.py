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
"""Beyond the proposal: remat, modes and loops, plant, custom rules, speed."""

import functools
import logging

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
from jax.interpreters import batching
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import perturb
from flax.nnx.sow import plant
from flax.nnx.sow import sow
import sow_testing

X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)
W = jnp.array([0.5, -1.5, 2.0], jnp.float32)


class RematTest(parameterized.TestCase):

  @parameterized.product(
      policy=[None, jax.checkpoint_policies.nothing_saveable,
              jax.checkpoint_policies.everything_saveable],
      prevent_cse=[True, False],
  )
  def test_sows_inside_checkpoint(self, policy, prevent_cse):
    def block(x):
      h = sow(jnp.sin(x * W), name='h')
      return jnp.tanh(h)

    f = jax.checkpoint(block, policy=policy, prevent_cse=prevent_cse)
    out, collected = capture(f)(X)
    sow_testing.assert_close(collected['h'][0], np.sin(X * W))
    np.testing.assert_array_equal(out, f(X))
    loss = lambda x: jnp.sum(f(x) ** 2)
    grad, collected = capture(jax.grad(loss))(X)
    sow_testing.assert_close(collected['h'][0], np.sin(X * W))
    sow_testing.assert_close(grad, jax.grad(loss)(X))
    grad_through = jax.grad(lambda x: capture(loss)(x)[0])(X)
    sow_testing.assert_close(grad_through, jax.grad(loss)(X))

  def test_static_argnums(self):
    @functools.partial(jax.checkpoint, static_argnums=(1,))
    def f(x, power):
      return sow(x**power, name='pow')

    _, collected = capture(lambda x: f(x, 3))(X)
    sow_testing.assert_close(collected['pow'][0], X**3)

  def test_perturb_inside_remat_matches_no_remat(self):
    def block(x):
      return jnp.sum(perturb(jnp.sin(x * W), name='g') ** 2)

    _, with_remat = capture(jax.grad(jax.checkpoint(block)))(X)
    _, without = capture(jax.grad(block))(X)
    sow_testing.assert_close(with_remat['g'][0], without['g'][0])
    sow_testing.assert_close(with_remat['g'][0], 2 * np.sin(np.asarray(X * W)))

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

  def test_cond_branches_must_agree_on_mode(self):
    def f(x):
      return lax.cond(x[0] > 0, lambda y: sow(y, name='m'),
                      lambda y: sow(y, name='m', mode='clobber'), x)

    with self.assertRaisesRegex(
        ValueError, r"(?s)branch 0 sows 'm' \(clobber.*branch 1 sows 'm' "
        r'\(append'
    ):
      capture(f)(X)


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


class PlantTest(parameterized.TestCase):

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
    # an error (sow_plant_unread_test.py).
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


class CustomRulesWithSowsTest(parameterized.TestCase):

  def test_custom_vjp_rule_is_kept(self):
    @jax.custom_vjp
    def f(x):
      return sow(jnp.sin(x), name='body') * 2

    f.defvjp(lambda x: (f(x), None),
             lambda _, g: (jnp.full_like(g, 7.0),))  # recognisable

    loss = lambda x: jnp.sum(f(x))
    (value, grad), collected = capture(jax.value_and_grad(loss))(X)
    np.testing.assert_array_equal(grad, jnp.full(3, 7.0))
    sow_testing.assert_close(collected['body'][0], np.sin(X))
    sow_testing.assert_close(value, 2 * np.sum(np.sin(X)))
    grad_through = jax.grad(lambda x: jnp.sum(capture(f)(x)[0]))(X)
    np.testing.assert_array_equal(grad_through, jnp.full(3, 7.0))
    self.assertEqual(len(collected['body']), 1)

  def test_custom_jvp_rule_is_kept(self):
    @jax.custom_jvp
    def f(x):
      return sow(jnp.sin(x), name='body')

    f.defjvp(lambda p, t: (f(p[0]), 5.0 * t[0]))
    grad_through = jax.grad(lambda x: jnp.sum(capture(f)(x)[0]))(X)
    np.testing.assert_array_equal(grad_through, jnp.full(3, 5.0))
    grad, collected = jax.jit(capture(jax.grad(lambda x: jnp.sum(f(x)))))(X)
    np.testing.assert_array_equal(grad, jnp.full(3, 5.0))
    sow_testing.assert_close(collected['body'][0], np.sin(X))

  def test_unselected_sows_inside_are_seen_once_by_an_outer_capture(self):
    @jax.custom_vjp
    def f(x):
      sow(x, name='inner', tag='a')
      return sow(x * 2, name='outer', tag='b')

    f.defvjp(lambda x: (f(x), None), lambda _, g: (g,))
    (_, inner), outer = capture(capture(f, tag='a'))(X)
    self.assertEqual(list(inner), ['inner'])
    self.assertEqual(list(outer), ['outer'])
    self.assertLen(outer['outer'], 1)

  def test_unselected_sows_inside_are_seen_once_under_jit(self):
    # Staged, the body evaluated in place is rewritten as one call that
    # drops the sows the inner capture does not select: it records none.
    @jax.custom_vjp
    def f(x):
      sow(x, name='inner', tag='a')
      return sow(x * 2, name='outer', tag='b')

    f.defvjp(lambda x: (f(x), None), lambda _, g: (g,))
    out, inner = jax.jit(capture(f, tag='a'))(X)
    self.assertEqual(list(inner), ['inner'])
    np.testing.assert_array_equal(inner['inner'][0], X)
    np.testing.assert_array_equal(out, X * 2)
    (_, inner), outer = jax.jit(capture(capture(f, tag='a')))(X)
    self.assertEqual(list(inner), ['inner'])
    self.assertEqual(list(outer), ['outer'])
    self.assertLen(outer['outer'], 1)
    np.testing.assert_array_equal(outer['outer'][0], X * 2)


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
    (_, taken), outer = capture(capture(g, names=('b',)))(X)
    self.assertEqual(list(taken), ['b'])
    self.assertEqual(list(outer), ['a'])
    self.assertLen(outer['a'], 1)
    sow_testing.assert_close(outer['a'][0], np.sin(X * 0.5))


class CompiledSpeedTest(absltest.TestCase):

  def test_eager_capture_of_jit_compiles_once(self):
    @jax.jit
    def f(x):
      for i in range(4):
        x = sow(jnp.tanh(x * (i + 1)), name='layer')
      return x

    capture(f)(X)  # warm up: one trace, one compilation
    x1 = X + 1.0
    # A jitted function is captured as a jitted runner per call structure:
    # later calls neither trace nor compile.
    with self.assertNoLogs(level=logging.WARNING):
      with jax.log_compiles(True):
        for _ in range(3):
          out, collected = capture(f)(x1)
    np.testing.assert_array_equal(out, f(x1))
    self.assertLen(collected['layer'], 4)
    np.testing.assert_array_equal(collected['layer'][3], out)

  def test_eager_capture_of_inner_jit_compiles_once(self):
    inner = jax.jit(lambda x: sow(jnp.tanh(x), name='h') * 2)
    f = lambda x: inner(x) + 1  # not a jit function: the general path

    capture(f)(X)  # warm up: one compilation of the transformed body
    x1 = X + 1.0
    # An eager `capture` runs f's Python on each call; the jitted body JAX
    # hands over is the one it cached, and so is its transformed body: it
    # is neither traced nor compiled again.
    with sow_testing.count_compiles() as compiles:
      with jax.log_compiles(True), self.assertNoLogs(level=logging.WARNING):
        for _ in range(3):
          out, collected = capture(f)(x1)
    self.assertEmpty(compiles)
    np.testing.assert_array_equal(out, f(x1))
    np.testing.assert_array_equal(collected['h'][0], jnp.tanh(x1))

  def test_compiled_runners_cover_static_and_unhashable_arguments(self):
    @functools.partial(jax.jit, static_argnums=(1,))
    def f(x, power, scale=None):
      del scale
      return sow(x**power, name='p')

    for power in (2, 3, 2):
      out, collected = capture(f)(X, power)
      sow_testing.assert_close(collected['p'][0], X**power)
      np.testing.assert_array_equal(out, f(X, power))
    # An unhashable static leaf cannot key a runner: the general path runs.
    g = jax.jit(lambda x, opts: sow(x * opts['k'], name='g'),
                static_argnums=())
    out, collected = capture(g)(X, {'k': 2.0})
    np.testing.assert_array_equal(collected['g'][0], X * 2)

  def test_eager_capture_runs_the_compiled_body(self):
    # The jit is re-bound, not unrolled: the eager jaxpr has a single jit.
    f = jax.jit(lambda x: sow(jnp.sin(x), name='h') * 2)
    jaxpr = jax.make_jaxpr(capture(f))(X)
    self.assertEqual([e.primitive.name for e in jaxpr.eqns], ['jit'])



class BatchedControlFlowTest(absltest.TestCase):
  """capture(jax.vmap(f)) where vmap batches the control flow of ``f``."""

  def test_jax_cond_batching_rule_is_jax_own(self):
    # The batched-index refusal lives in sow_p.bind: importing flax.nnx.sow
    # replaces no rule of JAX for the whole process.
    rule = batching.fancy_primitive_batchers[lax.cond_p]
    self.assertEqual(rule.__module__, 'jax._src.lax.control_flow.conditionals')

  def test_vmap_of_cond_with_batched_index_refuses_nested_sows(self):
    # The refusal comes from binding a sow under JAX's cond batching rule
    # (no global patch of that rule): sows nested in a jit or in an inner
    # cond of a branch are reached too.
    xs = jnp.stack([X, -X])
    jitted = lambda v: lax.cond(
        v[0] > 0, jax.jit(lambda u: sow(u * 2, name='j')),
        jax.jit(lambda u: sow(u * 3, name='j')), v)
    with self.assertRaisesRegex(NotImplementedError, r"\('j'\)"):
      capture(jax.vmap(jitted))(xs)

    def inner_cond(v):
      # The inner index is a constant of the branch, so it stays unbatched
      # (and the inner cond a cond) while the outer index is batched.
      branch = lambda u: lax.cond(jnp.array(True), lambda w: sow(w, name='i'),
                                  lambda w: sow(-w, name='i'), u)
      return lax.cond(v[0] > 0, branch, branch, v)

    with self.assertRaisesRegex(NotImplementedError, r"\('i'\)"):
      capture(jax.vmap(inner_cond))(xs)

  def test_vmap_of_cond_with_traced_unbatched_index_is_captured(self):
    # A traced index that does not depend on the mapped inputs keeps the
    # cond: each example takes the same branch. Oracle: that branch by hand.
    xs = jnp.stack([X, -X])
    f = lambda v, i: lax.switch(i, [lambda u: sow(u * 2, name='b'),
                                    lambda u: sow(u * 3, name='b')], v)
    for i, factor in ((0, 2), (1, 3)):
      out, collected = capture(jax.vmap(f, in_axes=(0, None)))(
          xs, jnp.int32(i))
      self.assertLen(collected['b'], 1)
      np.testing.assert_array_equal(collected['b'][0], np.asarray(xs) * factor)
      np.testing.assert_array_equal(out, np.asarray(xs) * factor)

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

if __name__ == '__main__':
  absltest.main()
