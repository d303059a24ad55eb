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
"""Behaviours that values alone do not show, pinned deterministically.

Each test names one behaviour: parameters a re-bound primitive must keep
(donation, rematerialization policy), what a cache key must contain, how
names are spelled and selected, weak types, which value a loop that runs
zero times returns, and where planted and sown values go when one body holds
several sites of the same shape (which only the randomized fuzzer exercised
before, after minutes). Oracles are recomputed directly in NumPy or read off
the program JAX builds for a direct call.
"""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import capture_compat
from flax.nnx.sow import capture
from flax.nnx.sow import perturb
from flax.nnx.sow import plant
from flax.nnx.sow import sow
import sow_testing

X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


def _eqns(closed, primitive_name):
  """The equations named ``primitive_name`` in ``closed``, at any depth."""
  found = []

  def visit(jaxpr):
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == primitive_name:
        found.append(eqn)
      for param in eqn.params.values():
        for sub in param if isinstance(param, tuple) else (param,):
          if isinstance(sub, jax.extend.core.ClosedJaxpr):
            visit(sub.jaxpr)
          elif isinstance(sub, jax.extend.core.Jaxpr):
            visit(sub)

  visit(closed.jaxpr)
  return found


class RebindKeepsParametersTest(absltest.TestCase):
  """A primitive re-bound with sows taken out keeps what the user asked."""

  def test_jit_keeps_donating_its_arguments(self):
    donating = jax.jit(lambda x: sow(x * 2, name='h') + 1, donate_argnums=0)
    direct_x = jnp.ones(4)
    donating(direct_x)
    # The oracle: a direct call donates (deletes) its argument on this
    # backend; an eager capture binds the same jit, so it must too.
    self.assertTrue(direct_x.is_deleted())
    x = jnp.ones(4)
    out, collected = capture(lambda x: donating(x))(x)
    self.assertTrue(x.is_deleted())
    np.testing.assert_array_equal(out, np.full(4, 3.0, np.float32))
    np.testing.assert_array_equal(collected['h'][0], np.full(4, 2.0))

  def test_checkpoint_keeps_policy_and_prevent_cse(self):
    policy = jax.checkpoint_policies.nothing_saveable
    block = jax.checkpoint(
        lambda x: jnp.sin(sow(x * 2, name='h')), policy=policy,
        prevent_cse=False,
    )
    (direct,) = _eqns(jax.make_jaxpr(block)(X), 'remat2')
    (rebound,) = _eqns(jax.make_jaxpr(capture(block))(X), 'remat2')
    self.assertIs(rebound.params['policy'], direct.params['policy'])
    self.assertIs(rebound.params['policy'], policy)
    self.assertFalse(rebound.params['prevent_cse'])
    self.assertEqual(
        rebound.params['differentiated'], direct.params['differentiated']
    )


class LinearTransposeTest(absltest.TestCase):

  def test_cotangents_pass_through_a_sow(self):
    # The oracle: the transpose of x -> 3 x is ct -> 3 ct.
    def f(x):
      return 3 * sow(x, name='h')

    (ct_x,) = jax.linear_transpose(f, X)(jnp.ones_like(X))
    np.testing.assert_array_equal(ct_x, np.full(3, 3.0, np.float32))


class AxesUnderDifferentiationTest(absltest.TestCase):

  def test_scanned_values_keep_the_loop_axis_first_under_grad(self):
    # Differentiation leaves jvp/transpose marks in the name stack; only
    # vmaps add leading axes, so the loop axis stays first.
    xs = jnp.arange(12.0).reshape(4, 3)

    def loss(xs):
      def body(c, x):
        return c + jnp.sum(sow(jnp.sin(x), name='h') ** 2), None

      return lax.scan(body, 0.0, xs)[0]

    grad, collected = capture(jax.grad(loss))(xs)
    self.assertEqual(collected['h'][0].shape, (4, 3))
    sow_testing.assert_close(collected['h'][0], np.sin(np.asarray(xs)))
    x = np.asarray(xs)
    sow_testing.assert_close(grad, 2 * np.sin(x) * np.cos(x))

  def test_grad_inside_a_loop_body_keeps_the_outer_loop_axis_first(self):
    # The inner scan, inside the outer body, is marked jvp/transpose by the
    # grad around it: no vmap axis for the outer loop to go after.
    xs = jnp.arange(24.0).reshape(2, 4, 3) / 10

    def inner(c, x):
      return c + jnp.sum(sow(jnp.sin(x), name='h') ** 2), None

    def f(xs):
      def outer(c, row):
        g = jax.grad(lambda r: lax.scan(inner, 0.0, r)[0])(row)
        return c + jnp.sum(g), None

      return lax.scan(outer, 0.0, xs)[0]

    _, collected = capture(f)(xs)
    self.assertEqual(collected['h'][0].shape, (2, 4, 3))
    sow_testing.assert_close(collected['h'][0], np.sin(np.asarray(xs)))


class InlinedCallUnderVmapTest(absltest.TestCase):

  def test_vmap_of_an_inlined_call_inside_a_loop_stays_inside(self):
    # An inlined jit of a staged capture leaves a closed_call, which the vmap
    # inside the scan body batches: its axis comes after the loop axis.
    def f(x):
      return sow(sow(x * 2, name='a') + 1, name='b')

    inner = jax.jit(capture(f, names='a'), inline=True)

    def g(batch):
      def step(c, _):
        return jax.vmap(inner)(c)[0], None

      return lax.scan(step, batch, None, length=4)[0]

    batch = jnp.arange(15.0).reshape(5, 3)
    _, collected = capture(g, names='b')(batch)
    self.assertEqual(collected['b'][0].shape, (4, 5, 3))
    expected, c = [], np.asarray(batch)
    for _ in range(4):
      c = c * np.float32(2) + np.float32(1)
      expected.append(c)
    np.testing.assert_array_equal(collected['b'][0], np.stack(expected))


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


class LiteralsTest(absltest.TestCase):

  def test_a_sown_constant_is_returned_as_a_jax_array(self):
    out, collected = capture(lambda x: sow(3, name='c'))(X)
    expected = jnp.asarray(3)  # what a direct call of sow(3) returns
    for value in (out, collected['c'][0]):
      self.assertIsInstance(value, jax.Array)
      self.assertEqual(value.dtype, expected.dtype)
      self.assertEqual(value.weak_type, expected.weak_type)
      self.assertEqual(int(value), 3)


class _Scaled(nnx.Module):

  def __call__(self, x):
    return 2 * self.perturb('x', x)


class CompatInitUnderJitTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.install())

  def test_init_perturbation_is_added_under_jit(self):
    model = _Scaled()
    _, perturbations = nnx.capture(model, nnx.Perturbation)(X)
    ones = jax.tree.map(jnp.ones_like, perturbations)

    @jax.jit
    def run(perturbations, x):
      return nnx.capture(model, init=perturbations)(x)

    # The oracle: 2 * (x + 1), a correctly rounded operation per element.
    np.testing.assert_array_equal(
        run(ones, X), 2 * (np.asarray(X) + np.float32(1))
    )
    grads = jax.jit(jax.grad(lambda p, x: jnp.sum(run(p, x))))(ones, X)
    np.testing.assert_array_equal(grads['x'].get_value(), np.full(3, 2.0))


class PerturbTagTest(absltest.TestCase):

  def test_the_gradient_is_sown_with_the_perturbation_tag(self):
    def loss(x):
      x = perturb(x, name='dx', tag='grads')
      return jnp.sum(sow(x, name='x', tag='values') ** 2)

    _, grads = capture(jax.grad(loss), tag='grads')(X)
    _, values = capture(jax.grad(loss), tag='values')(X)
    self.assertEqual(list(grads), ['dx'])
    self.assertEqual(list(values), ['x'])
    np.testing.assert_array_equal(grads['dx'][0], 2 * np.asarray(X))


class CacheKeyTest(absltest.TestCase):
  """A cache never answers for a call whose result it did not compute."""

  def test_compiled_runner_per_selection(self):
    jitted = jax.jit(lambda x: sow(x + 1, name='a') + sow(x * 2, name='b'))
    _, only_a = capture(jitted, names='a')(X)
    _, only_b = capture(jitted, names='b')(X)
    _, tagged_none = capture(jitted, tag='other')(X)
    self.assertEqual(list(only_a), ['a'])
    self.assertEqual(list(only_b), ['b'])
    self.assertEqual(list(tagged_none), [])
    sow_testing.assert_close(only_b['b'][0], np.asarray(X) * 2)

  def test_compiled_runner_per_static_argument(self):
    jitted = jax.jit(
        lambda x, power: sow(x**power, name='p'), static_argnums=1
    )
    for power in (2, 3, 2):
      _, collected = capture(jitted)(X, power)
      sow_testing.assert_close(collected['p'][0], np.asarray(X) ** power)


  def test_numpy_scalar_arguments_are_traced_as_jit_traces_them(self):
    jitted = jax.jit(lambda x, scale: sow(x * scale, name='s'))
    capture(jitted)(X, np.float32(1.0))  # the one compilation
    with sow_testing.count_compiles() as compiles:
      for scale in (2.0, 3.0, 0.5):
        _, collected = capture(jitted)(X, np.float32(scale))
        np.testing.assert_array_equal(
            collected['s'][0], np.asarray(X) * np.float32(scale)
        )
    self.assertEmpty(compiles)


class _Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    self.sow(nnx.Intermediate, 'y', y)
    return y


class _Stack(nnx.Module):

  def __init__(self, rngs):
    self.blocks = nnx.List([_Block(rngs), _Block(rngs)])

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    return x


class CompatCacheAndNamesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.install())
    self.model = _Stack(nnx.Rngs(0))

  def by_hand(self, x):
    ys = []
    for block in self.model.blocks:
      x = x @ block.linear.kernel.get_value() + block.linear.bias.get_value()
      ys.append(x)
    return ys

  def test_module_sow_names_are_module_path_then_name(self):
    # A type the compat capture does not collect still reaches an
    # enclosing functional capture, named (*module path, name).
    def forward(x):
      return nnx.capture(self.model, nnx.Perturbation)(x)

    _, collected = capture(forward)(X)
    self.assertEqual(
        list(collected), [('blocks', 0, 'y'), ('blocks', 1, 'y')]
    )
    for (name, values), y in zip(collected.items(), self.by_hand(X)):
      sow_testing.assert_close(values[0], y, err_msg=str(name))

  def test_eager_capture_keyed_by_method_outputs(self):
    def forward(model, x):
      return model(x)

    _, plain = nnx.capture(forward, nnx.Intermediate)(self.model, X)
    _, outputs = nnx.capture(
        forward, nnx.Intermediate, method_outputs=nnx.Intermediate
    )(self.model, X)
    self.assertNotIn('__call__', plain['blocks'][0])
    self.assertIn('__call__', outputs['blocks'][0])
    sow_testing.assert_close(
        outputs['blocks'][1]['__call__'].get_value()[0], self.by_hand(X)[1]
    )

  def test_eager_capture_keyed_by_variable_types(self):
    def forward(model, x):
      return model(x)

    # In both orders: a trace made for one type has no sites of the other.
    for types in [(nnx.Perturbation, nnx.Intermediate),
                  (nnx.Intermediate, nnx.Perturbation)]:
      states = {
          t: nnx.capture(forward, t)(self.model, X)[1] for t in types
      }
      self.assertLen(nnx.to_flat_state(states[nnx.Intermediate]), 2)
      self.assertEmpty(nnx.to_flat_state(states[nnx.Perturbation]))


class _Nested(nnx.Module):
  """Holds nested immutable pytrees of arrays; a call updates one leaf."""

  def __init__(self):
    self.pair = nnx.data(((jnp.zeros(3), jnp.ones(3)), jnp.full(3, 2.0)))

  def __call__(self, x):
    (a, b), c = self.pair
    self.pair = nnx.data(((a + x, b), c))
    return sow(a * b + c, name='h')


class _Counted(nnx.Module):

  def __init__(self):
    self.calls = nnx.BatchStat(jnp.array(0))
    self.w = nnx.Param(jnp.full(3, 2.0))

  def __call__(self, x):
    self.calls[...] += 1
    return sow(x * self.w[...], name='h')


class WriteBackTest(absltest.TestCase):
  """After a capture, the caller's objects are as after a direct call."""

  def test_a_leaf_of_nested_immutable_pytrees(self):
    model, twin = _Nested(), _Nested()
    for _ in range(2):
      out, collected = capture(model)(X)
      np.testing.assert_array_equal(out, twin(X))
    for got, want in zip(jax.tree.leaves(model.pair),
                         jax.tree.leaves(twin.pair)):
      np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(model.pair[0][0], 2 * np.asarray(X))

  def test_reference_variables_under_jit(self):
    with nnx.var_defaults(ref=True):
      model = _Counted()

    @jax.jit
    def run(model, x):
      return capture(model)(x)

    for i in range(1, 3):
      out, collected = run(model, X)
      self.assertEqual(int(model.calls[...]), i)
      np.testing.assert_array_equal(out, np.asarray(X) * np.float32(2))
      np.testing.assert_array_equal(collected['h'][0], out)


  def test_a_reference_created_inside_comes_out_as_in_a_direct_call(self):
    class MakesReferences(nnx.Module):

      def __init__(self):
        self.cache = nnx.Cache(jnp.zeros(3))

      def __call__(self, x):
        self.cache.set_raw_value(jax.new_ref(x * 2))
        self.held = nnx.data(jax.new_ref(x + 1))
        return sow(x * 3, name='h')

    model, twin = MakesReferences(), MakesReferences()
    out, _ = capture(model)(X)
    np.testing.assert_array_equal(out, twin(X))
    for got, want in ((model.cache.get_raw_value(), twin.cache.get_raw_value()),
                      (model.held, twin.held)):
      self.assertIs(type(got), type(want))
      np.testing.assert_array_equal(got[...], want[...])


class CompatTracesPerModuleTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.install())

  def test_one_nnx_jit_applied_to_two_equal_submodules(self):
    # The two blocks have equal graph definitions, so nnx.jit would reuse
    # the first block's trace, with the first block's sow names.
    class Stack(nnx.Module):

      def __init__(self, rngs):
        self.blocks = nnx.List([_Block(rngs), _Block(rngs)])

      def __call__(self, x):
        apply = nnx.jit(lambda block, x: block(x))
        for block in self.blocks:
          x = apply(block, x)
        return x

    model = Stack(nnx.Rngs(0))
    _, state = nnx.capture(model, nnx.Intermediate)(X)
    self.assertEqual(
        [path for path, _ in nnx.to_flat_state(state)],
        [('blocks', 0, 'y'), ('blocks', 1, 'y')],
    )
    x = X
    for i, block in enumerate(model.blocks):
      x = x @ block.linear.kernel.get_value() + block.linear.bias.get_value()
      (value,) = state['blocks'][i]['y'].get_value()
      sow_testing.assert_close(value, x)

  def test_the_decorator_form_passes_init(self):
    model = _Scaled()
    _, perturbations = nnx.capture(model, nnx.Perturbation)(X)
    ones = jax.tree.map(jnp.ones_like, perturbations)

    @nnx.capture(nnx.Perturbation, init=ones)
    def forward(model, x):
      return model(x)

    out, returned = forward(model, X)
    np.testing.assert_array_equal(out, 2 * (np.asarray(X) + np.float32(1)))
    np.testing.assert_array_equal(returned['x'].get_value(), np.ones(3))


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


class ZeroTripLoopTest(parameterized.TestCase):

  # Under one tag, the second clobber replaces the first record; under two,
  # both records stay, and the loop must take the later one.
  @parameterized.parameters((None, None), ('first', 'second'))
  def test_zero_trip_while_keeps_the_last_value_sown_before(self, tag1, tag2):
    def f(x, n):
      sow(x, name='s', tag=tag1, mode='clobber')
      sow(x + 1, name='s', tag=tag2, mode='clobber')

      def body(carry):
        i, v = carry
        return i + 1, sow(v * 3, name='s', mode='clobber')

      return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]

    _, collected = jax.jit(capture(f))(X, 0)
    np.testing.assert_array_equal(collected['s'][0], np.asarray(X) + 1)
    _, collected = jax.jit(capture(f))(X, 2)
    sow_testing.assert_close(collected['s'][0], np.asarray(X) * 3 * 3)


  @parameterized.parameters('eager', 'jit')
  def test_zero_trip_scan_gives_every_append_site_an_empty_stack(self, mode):
    # Per iteration the clobber supersedes the append; with no iteration,
    # neither ran: the append site gives the stack of no values, as a scan's
    # ys do, and the clobber nothing (found by the long fuzz profile).
    def f(x, n):
      sow(x * 2, name='s')

      def body(c, _):
        sow(c + 1, name='s')
        return sow(c * 3, name='s', mode='clobber'), None

      return lax.scan(body, x, None, length=n)[0]

    def run(n):
      run = capture(functools.partial(f, n=n))
      return (jax.jit(run) if mode == 'jit' else run)(X)[1]

    collected = run(0)
    self.assertLen(collected['s'], 2)
    np.testing.assert_array_equal(collected['s'][0], np.asarray(X) * 2)
    self.assertEqual(collected['s'][1].shape, (0, 3))
    self.assertEqual(collected['s'][1].dtype, X.dtype)
    # A loop that runs: the last clobber replaces every earlier entry.
    collected = run(2)
    self.assertLen(collected['s'], 1)
    sow_testing.assert_close(collected['s'][0], np.asarray(X) * 9)


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

  @parameterized.parameters('eager', 'jit')
  def test_sown_values_of_one_jit_body_keep_their_names(self, mode):
    def g(x):
      return sow(x + 1, name='a') + sow(x * 2, name='b') + sow(-x, name='c')

    run = capture(jax.jit(g))
    if mode == 'jit':
      run = jax.jit(capture(g))
    _, collected = run(X)
    x = np.asarray(X)
    np.testing.assert_array_equal(collected['a'][0], x + np.float32(1))
    np.testing.assert_array_equal(collected['b'][0], x * np.float32(2))
    np.testing.assert_array_equal(collected['c'][0], -x)

  def test_nested_scan_and_cond_orders(self):
    xs = jnp.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]])

    def f(xs):
      def outer(c, row):
        def inner(c2, y):
          p = sow(y * 2, name='p')
          q = lax.cond(
              y > 0,
              lambda y: sow(y + 10, name='q'),
              lambda y: sow(y - 10, name='q'),
              y,
          )
          r = sow(y * 3, name='r')
          return c2 + p + q + r, None

        c = lax.scan(inner, c, row)[0]
        return sow(c, name='row_total'), None

      return lax.scan(outer, 0.0, xs)[0]

    out, collected = capture(f)(xs)
    x = np.asarray(xs)
    q = np.where(x > 0, x + 10, x - 10)
    np.testing.assert_array_equal(collected['p'][0], x * 2)
    np.testing.assert_array_equal(collected['q'][0], q)
    np.testing.assert_array_equal(collected['r'][0], x * 3)
    totals, total = [], np.float32(0)
    for i in range(2):  # in the program's order of additions
      for j in range(3):
        total = total + x[i, j] * 2 + q[i, j] + x[i, j] * 3
      totals.append(total)
    sow_testing.assert_close(collected['row_total'][0], np.array(totals))
    sow_testing.assert_close(out, totals[-1])


if __name__ == '__main__':
  absltest.main()
