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
"""The rules of the call primitives: ``jit``, ``closed_call``/``call`` and
``remat`` (``transform/rules/calls.py``): sows inside them are captured in
program order, and what is re-bound keeps its parameters.
"""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import capture
from flax.nnx.sow import sow
from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import inner_calls

from sow_pytree_models import Clipped, PYTREES, TRANSFORMS, clip, lo_hi  # pylint: disable=g-multiple-import
import sow_testing
from sow_testing import SHAPE, LiveArrays, chain  # pylint: disable=g-multiple-import


X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


def harvest_jaxpr(f, *args):
  """The jaxpr `capture` sees for f: traced while harvesting."""
  with primitive.harvesting(True):
    return jax.make_jaxpr(f)(*args).jaxpr


W = jnp.array([0.5, -1.5, 2.0], jnp.float32)


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


X_EAGER = jnp.array([0.5, -1.0, 2.0], jnp.float32)  # the models' dtype, also x64


def in_closed_call(f):
  """``f`` called through a ``closed_call`` (evaluated in place)."""
  def wrapped(x):
    with primitive.harvesting(True):
      body = jax.make_jaxpr(f)(x)
    return _jax.eval_jaxpr_p.bind(x, jaxpr=body)[0]

  return wrapped


def _entries(collected, name):
  return [np.asarray(v) for v in collected[name]]


def _block(x):
  return sow(jnp.sin(x) + 1.0, name='h')


_JITTED_BLOCK = jax.jit(_block)


X_GRAPH_NODES = jnp.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], jnp.float32)


def _info(cached):
  info = cached.cache_info()
  return info.hits, info.misses, info.currsize


class CallsTest(parameterized.TestCase):

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
    body = harvest_jaxpr(lambda x: sow(x * 5, name='in_call') + 1, X)
    closed = jax.extend.core.ClosedJaxpr(body, ())

    def f(x):
      return _jax.eval_jaxpr_p.bind(x, jaxpr=closed)[0]

    self.assertIn('closed_call', str(jax.make_jaxpr(f)(X)))
    out, collected = capture(f)(X)
    np.testing.assert_array_equal(collected['in_call'][0], X * 5)
    np.testing.assert_array_equal(out, X * 5 + 1)


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


class StagedCallsTest(parameterized.TestCase):
  """A capture of calls under a staging trace."""

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
    with self.assertWarns(inner_calls.TakenByInnerCall):
      (_, inner), outer = capture(
          jax.jit(capture(self.first_order, tag='metrics'))
      )(X)
    self.assertEqual(list(inner), ['stats'])
    self.assertEqual(list(outer), ['h', 'other'])
    sow_testing.assert_close(
        outer['other'][0], 3 * self.first_order_by_hand(X)[1])

  def _assert_same_layout(self, f, xs):
    _, got = capture(jax.vmap(f))(xs)
    _, want = jax.vmap(capture(f))(xs)
    self.assertEqual(list(got), list(want))
    for name in want:
      for g, w in zip(jax.tree.leaves(got[name]), jax.tree.leaves(want[name])):
        np.testing.assert_array_equal(g, w, err_msg=repr(name))
    return got

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


class EagerCallsTest(absltest.TestCase):
  """An eager capture of a call."""

  def test_a_jit_compiled_outside_a_capture_is_seen(self):
    # JAX's compiled fast path, cached by the call outside, never binds:
    # `harvesting` in the jit key sends the call through `bind`.
    inner = jax.jit(lambda x: sow(jnp.sin(x), name='in_jit') * 2)
    np.testing.assert_array_equal(inner(X_EAGER), jnp.sin(X_EAGER) * 2)
    inner(X_EAGER)  # the fast path is now cached
    f = lambda x: inner(x) + 1
    for _ in range(2):
      out, collected = capture(f)(X_EAGER)
      np.testing.assert_array_equal(out, inner(X_EAGER) + 1)
      np.testing.assert_array_equal(collected['in_jit'][0], jnp.sin(X_EAGER))
    with sow_testing.count_compiles() as compiles:
      capture(f)(X_EAGER + 1)
      inner(X_EAGER + 1)  # and outside again, as fast as before
    self.assertEmpty(compiles)


class EagerCallMemoryTest(parameterized.TestCase):

  def observe(self, wrap):
    """Live counts running ``wrap(chain)`` directly and under capture."""
    x = jnp.ones(SHAPE)
    direct, captured = LiveArrays(), LiveArrays()
    # As NumPy copies, so that one run's output is not counted in the other.
    out = np.array(wrap(lambda x: chain(x, direct))(x), copy=True)
    out_c, collected = capture(wrap(lambda x: chain(x, captured)))(x)
    np.testing.assert_array_equal(out_c, out)  # the same operations
    self.assertEqual(list(collected), ['middle', 'end'])
    return direct.counts, captured.counts

  @absltest.skipIf(
      jax.__version_info__ < (0, 10, 1),
      'JAX 0.10.0 defines no evaluation rule for eval_jaxpr: binding it'
      ' outside a trace (the direct run compared with) fails in JAX itself',
  )
  def test_closed_call_body(self):
    direct, captured = self.observe(in_closed_call)
    self.assertLen(direct, 2)
    self.assertEqual(captured, direct)


class CallsInProgramOrderTest(parameterized.TestCase):
  """Records in program order where collected sows mix with equations."""

  @parameterized.parameters(False, True)
  def test_cached_jit_between_collected_sows(self, under_jit):
    # The block is traced once, before the capture: inside it, JAX reuses
    # that trace for every call, so its sows are never staged again.
    with primitive.harvesting(True):
      _JITTED_BLOCK.trace(jnp.ones(2))

    def f(x):
      for _ in range(3):
        x = _JITTED_BLOCK(x)
        x = sow(x * 3.0, name='h')
      return x

    want, x = [], jnp.arange(2.0)
    for _ in range(3):
      x = jnp.sin(x) + 1.0
      want.append(x)
      x = x * 3.0
      want.append(x)
    run = capture(f)
    out, collected = (jax.jit(run) if under_jit else run)(jnp.arange(2.0))
    got = _entries(collected, 'h')
    self.assertLen(got, 6)
    for g, w in zip(got, want):
      np.testing.assert_allclose(g, w, rtol=1e-6)
    np.testing.assert_allclose(out, want[-1], rtol=1e-6)

  def test_first_sow_order_of_names_across_kinds(self):
    def f(x):
      sow(x, name='first')
      x = _JITTED_BLOCK(x)  # 'h', from JAX's cache after the first call
      sow(x, name='last')
      return x

    for _ in range(2):
      _, collected = capture(f)(jnp.ones(2))
      self.assertEqual(list(collected), ['first', 'h', 'last'])

  def test_unselected_sows_reach_an_enclosing_capture(self):
    def f(x):
      a = sow(x + 1.0, name='a', tag='inner')
      b = sow(x + 2.0, name='b', tag='outer')
      return a * b

    def outer(x):
      out, inner = capture(f, tag='inner')(x)
      return out, inner

    (out, inner), collected = jax.jit(capture(outer, tag='outer'))(1.0)
    np.testing.assert_allclose(out, 6.0)
    self.assertEqual(list(inner), ['a'])
    np.testing.assert_allclose(inner['a'][0], 2.0)
    self.assertEqual(list(collected), ['b'])
    np.testing.assert_allclose(collected['b'][0], 3.0)


class ImmutablePytreesTest(sow_testing.StateAssertions,
                           parameterized.TestCase):
  """Modules holding an immutable pytree of arrays, through NNX transforms.

  A transform returns new arrays for the pytree, which cannot be set in it:
  it is rebuilt, as a direct call of the transform does. The oracle is that
  direct call on a clone; the sown values are recomputed from the weights.
  """

  def assertLikeTwin(self, model, twin):
    self.assertSameState(model, twin)
    self.assertIs(type(model.bounds), type(twin.bounds))
    self.assertEqual(nnx.graphdef(model), nnx.graphdef(twin))

  def by_hand(self, model, x, lo, hi):
    return clip(x @ model.linear.kernel[...] + model.linear.bias[None], lo, hi)

  @parameterized.product(kind=tuple(PYTREES), transform=tuple(TRANSFORMS))
  def test_as_argument_and_as_callable(self, kind, transform):
    forms = {
        'argument': lambda m: (
            TRANSFORMS[transform](lambda m, x: m(x)), (m, X_GRAPH_NODES)
        ),
        'callable': lambda m: (m, (X_GRAPH_NODES,)),
        'bound method': lambda m: (m.__call__, (X_GRAPH_NODES,)),
    }
    for form, make in forms.items():
      with self.subTest(form):
        transform_inside = None if form == 'argument' else transform
        model = Clipped(kind, nnx.Rngs(0), transform=transform_inside)
        twin = nnx.clone(model)
        lo, hi = lo_hi(model.bounds)
        f, args = make(model)
        for step in range(2):  # the second call starts from the update
          out, collected = capture(f)(*args)
          g, twin_args = make(twin)
          expected_out = g(*twin_args)  # a direct call
          np.testing.assert_array_equal(out, expected_out)
          self.assertLikeTwin(model, twin)
          sow_testing.assert_close(
              collected['h'][0],
              self.by_hand(
                  model, X_GRAPH_NODES, lo - 0.25 * step, hi + 0.25 * step
              ),
          )
        np.testing.assert_array_equal(lo_hi(model.bounds)[0], lo - 0.5)

  @parameterized.product(kind=tuple(PYTREES), transform=tuple(TRANSFORMS))
  def test_staged_under_nnx_jit(self, kind, transform):
    # Staged, the call runs on copies whose new arrays are written back
    # into the pytree (rebuilt, as it cannot be set), here into nnx.jit's
    # copy, which nnx.jit writes back into the model.
    model = Clipped(kind, nnx.Rngs(0))
    twin = nnx.clone(model)
    lo, hi = lo_hi(model.bounds)
    f = TRANSFORMS[transform](lambda m, x: m(x))
    step = nnx.jit(lambda m, x: capture(f)(m, x))
    for i in range(2):
      out, collected = step(model, X_GRAPH_NODES)
      np.testing.assert_array_equal(out, f(twin, X_GRAPH_NODES))
      self.assertLikeTwin(model, twin)
      sow_testing.assert_close(
          collected['h'][0],
          self.by_hand(model, X_GRAPH_NODES, lo - 0.25 * i, hi + 0.25 * i),
      )

  @parameterized.parameters(*PYTREES)
  def test_nested_pytrees_staged_under_nnx_jit(self, kind):
    # A leaf of an immutable pytree inside another one: the outermost is
    # rebuilt and set on the module (the inner one cannot be set in it).
    class Nested(nnx.Module):

      def __init__(self):
        self.bounds = nnx.data((
            PYTREES[kind](jnp.full(3, -0.5), jnp.full(3, 0.5)),
            jnp.ones((1, 3)),  # of the rank of x (JAX_NUMPY_RANK_PROMOTION)
        ))

      def __call__(self, x):
        bounds, scale = self.bounds
        lo, hi = lo_hi(bounds)
        h = sow(clip(x, lo, hi) * scale, name='h')
        self.bounds = nnx.data(
            (PYTREES[kind](lo - 0.25, hi + 0.25), scale * 2)
        )
        return h

    model, twin = Nested(), Nested()
    step = nnx.jit(lambda m, x: capture(m)(x))
    for i in range(2):
      out, collected = step(model, X_GRAPH_NODES)
      np.testing.assert_array_equal(out, twin(X_GRAPH_NODES))  # a direct call
      self.assertSameState(model, twin)
      self.assertIs(type(model.bounds[0]), type(twin.bounds[0]))
      # By hand: clipped to the bounds widened i times, scaled by 2^i.
      by_hand = (
          np.clip(X_GRAPH_NODES, -0.5 - 0.25 * i, 0.5 + 0.25 * i) * 2.0**i
      )
      sow_testing.assert_close(collected['h'][0], by_hand)
    np.testing.assert_array_equal(lo_hi(model.bounds[0])[0], jnp.full(3, -1.0))
    np.testing.assert_array_equal(model.bounds[1], jnp.full((1, 3), 4.0))



class SeveralSitesOfOneJitBodyTest(parameterized.TestCase):
  """Sites of equal shape in one body: each value goes to its own name."""

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


class CallCacheKeyTest(parameterized.TestCase):
  """The caches keyed by jaxprs: a hit, a miss, and no unbounded growth."""

  def test_resolved_predicates_key_the_interpretation(self):
    # A plain function around a jit: the general path, whose transformed
    # jit body is cached per (body, request).
    jitted = jax.jit(lambda x: sow(x + 1, name='a') * sow(x * 2, name='b'))
    f = lambda x: jitted(x) * 3
    capture(f, names=lambda n: n == 'a')(X)
    hits, misses, size = _info(interpreter.transform)
    with sow_testing.count_compiles() as compiles:
      for _ in range(10):
        _, collected = capture(f, names=lambda n: n == 'a')(X)
        self.assertEqual(list(collected), ['a'])
    self.assertEqual(_info(interpreter.transform), (hits + 10, misses, size))
    self.assertEmpty(compiles)
    # Another selection: a miss.
    _, collected = capture(f, names=lambda n: n == 'b')(X)
    self.assertEqual(list(collected), ['b'])
    self.assertEqual(_info(interpreter.transform)[1], misses + 1)


if __name__ == '__main__':
  absltest.main()
