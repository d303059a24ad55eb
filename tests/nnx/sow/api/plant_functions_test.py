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
"""``plant(f, {name: fn})``: interventions that transform the sown value.

Every oracle is the function rewritten by hand with the intervention
applied (``by_hand``), or ``jax.grad`` of such an explicit function.
"""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import plant
from flax.nnx.sow import sow
import sow_testing

L, D = 3, 4
W = jax.random.normal(jax.random.key(0), (L, D, D), jnp.float32) / 2
X = jnp.array([0.3, -1.2, 0.7, 0.5], jnp.float32)
X2 = jnp.array([-0.6, 0.2, 1.3, -0.1], jnp.float32)


def layer(w, h):
  return jnp.tanh(w @ h)


def by_hand(x, edit):
  """The model with ``edit(value, layer)`` applied to each layer's output."""
  h = x
  for l in range(L):
    h = edit(layer(W[l], h), l)
  return h


def layers_named(x):
  """A Python loop over layers; a name per layer."""
  h = x
  for l in range(L):
    h = sow(layer(W[l], h), name=('layers', l, 'h'))
  return h


def layers_one_name(x):
  """A Python loop over layers; one name, so the index is the layer."""
  h = x
  for l in range(L):
    h = sow(layer(W[l], h), name='h')
  return h


def layers_scan(x):
  """The layers as a scan over stacked weights."""

  def body(h, w):
    return sow(layer(w, h), name='h'), None

  return lax.scan(body, x, W)[0]


def layers_inner_jit(x):
  """Each layer an inner ``jax.jit`` call (the same jaxpr every time)."""
  step = jax.jit(lambda w, h: sow(layer(w, h), name='h'))
  h = x
  for l in range(L):
    h = step(W[l], h)
  return h


def layers_remat(x):
  step = jax.checkpoint(lambda w, h: sow(layer(w, h), name='h'))
  h = x
  for l in range(L):
    h = step(W[l], h)
  return h


def layers_fori(x):
  """fori_loop with static bounds (staged as a scan)."""
  return lax.fori_loop(
      0, L, lambda l, h: sow(layer(W[l], h), name='h'), x
  )


def layers_while(x):
  """A while_loop: the trip count is only known at run time."""

  def body(carry):
    l, h = carry
    return l + 1, sow(layer(W[l], h), name='h')

  return lax.while_loop(lambda c: c[0] < L, body, (jnp.int32(0), x))[1]


@jax.custom_vjp
def _layer_custom_vjp(w, h):
  return sow(layer(w, h), name='h')


_layer_custom_vjp.defvjp(
    lambda w, h: (_layer_custom_vjp(w, h), (w, h)),
    lambda res, g: jax.vjp(layer, *res)[1](g),
)


@jax.custom_jvp
def _layer_custom_jvp(w, h):
  return sow(layer(w, h), name='h')


_layer_custom_jvp.defjvp(
    lambda primals, tangents: jax.jvp(layer, primals, tangents)
)


def _loop_of(step):
  def f(x):
    h = x
    for l in range(L):
      h = step(W[l], h)
    return h

  return f


# Every way of running the layers, each sowing 'h' once per layer in order.
MODELS = dict(
    python_loop=layers_one_name,
    scan=layers_scan,
    inner_jit=layers_inner_jit,
    remat=layers_remat,
    fori_loop=layers_fori,
    while_loop=layers_while,
    custom_vjp=_loop_of(_layer_custom_vjp),
    custom_jvp=_loop_of(_layer_custom_jvp),
)


def ablate(value, index, *, layer_to_ablate):
  """Zeroes the value at one layer (``layer_to_ablate`` may be traced)."""
  return jnp.where(index == layer_to_ablate, jnp.zeros_like(value), value)


class TopLevelTest(sow_testing.StateAssertions, parameterized.TestCase):

  def test_fn_transforms_each_value_with_its_index(self):
    seen = []

    def fn(value, index):
      seen.append(index)
      return value * 2.0 + index

    out = plant(layers_one_name, {'h': fn})(X)
    self.assertEqual(seen, [0, 1, 2])  # Python ints at the top level
    self.assertTrue(all(type(i) is int for i in seen))
    sow_testing.assert_close(out, by_hand(X, lambda v, l: v * 2.0 + l))

  def test_interventions_depend_on_each_other(self):
    # Layer 2's fn sees layer 1's intervened value (through layer 2's input).
    seen = {}

    def fn(value, index):
      seen[index] = value
      return value + 1.0

    out = plant(layers_one_name, {'h': fn})(X)
    expected = by_hand(X, lambda v, l: v + 1.0)
    sow_testing.assert_close(out, expected)
    h1 = layer(W[1], layer(W[0], X) + 1.0)
    sow_testing.assert_close(seen[1], h1)

  def test_a_name_per_layer(self):
    fns = {
        ('layers', l, 'h'): functools.partial(
            lambda v, i, l: v * (l + 1.0), l=l
        )
        for l in range(L)
    }
    out = plant(layers_named, fns)(X)
    sow_testing.assert_close(out, by_hand(X, lambda v, l: v * (l + 1.0)))

  def test_mixing_tuple_and_fn_entries(self):
    def f(x):
      a = sow(x * 2.0, name='a')
      b = sow(a + 1.0, name='b')
      return sow(b * a, name='a')

    a0 = jnp.full_like(X, 0.5)
    seen_b = []
    out = plant(
        f, {'a': (a0, X), 'b': lambda v, i: seen_b.append(v) or -v}
    )(X)
    # By hand: a = a0, b = -(a0 + 1), the second 'a' is replaced by X.
    np.testing.assert_array_equal(out, X)
    np.testing.assert_array_equal(seen_b[0], a0 + 1.0)
    out = plant(f, {'a': lambda v, i: v + i, 'b': (jnp.full_like(X, 4.0),)})(X)
    # By hand: a = 2x + 0, b = 4, the second 'a' is 4 * 2x + 1.
    sow_testing.assert_close(out, 4.0 * (X * 2.0) + 1.0)

  def test_fn_closes_over_a_jit_argument(self):
    @jax.jit
    def run(x, steer):
      return plant(layers_one_name, {'h': lambda v, i: v + steer})(x)

    steer = jnp.array([0.1, -0.2, 0.3, 0.0], jnp.float32)
    sow_testing.assert_close(
        run(X, steer), by_hand(X, lambda v, l: v + steer)
    )

  def test_pytree_value(self):
    def f(x):
      pair = sow({'a': x, 'b': x * 2.0}, name='pair')
      return pair['a'] + pair['b']

    out = plant(f, {'pair': lambda v, i: {'a': v['b'], 'b': v['a'] * 0.0}})(X)
    sow_testing.assert_close(out, X * 2.0)


class SweepTest(sow_testing.StateAssertions, parameterized.TestCase):
  """A sweep over layers with a traced selector is one compiled program."""

  def expected(self, l):
    return by_hand(X, lambda v, k: jnp.zeros_like(v) if k == l else v)

  @parameterized.named_parameters(*MODELS.items())
  def test_jit_compiles_once_for_all_layers(self, model):
    run = jax.jit(
        lambda l, x: plant(
            model, {'h': functools.partial(ablate, layer_to_ablate=l)}
        )(x)
    )
    expected = [self.expected(l) for l in range(L)]
    selectors = [jnp.int32(l) for l in range(L)]
    with sow_testing.count_compiles() as compiles:
      outs = [run(l, X) for l in selectors]
    self.assertLen(compiles, 1)
    for l in range(L):
      sow_testing.assert_close(outs[l], expected[l], err_msg=f'layer {l}')

  @parameterized.named_parameters(*MODELS.items())
  def test_vmap_over_the_selector(self, model):
    outs = jax.vmap(
        lambda l: plant(
            model, {'h': functools.partial(ablate, layer_to_ablate=l)}
        )(X)
    )(jnp.arange(L))
    for l in range(L):
      sow_testing.assert_close(outs[l], self.expected(l), err_msg=f'layer {l}')

  def test_names_per_layer_with_a_traced_selector(self):
    def patch(value, index, *, l, selected):
      del index
      return jnp.where(selected == l, jnp.zeros_like(value), value)

    run = jax.jit(
        lambda selected: plant(
            layers_named,
            {
                ('layers', l, 'h'): functools.partial(
                    patch, l=l, selected=selected
                )
                for l in range(L)
            },
        )(X)
    )
    expected = [self.expected(l) for l in range(L)]
    selectors = [jnp.int32(l) for l in range(L)]
    with sow_testing.count_compiles() as compiles:
      outs = [run(l) for l in selectors]
    self.assertLen(compiles, 1)
    for l in range(L):
      sow_testing.assert_close(outs[l], expected[l], err_msg=f'layer {l}')


class LoopTest(sow_testing.StateAssertions, parameterized.TestCase):

  @parameterized.parameters('fori_loop', 'scan')
  def test_a_loop_of_length_zero_plants_nothing(self, loop):
    # Found by the program fuzzer: a function plant of a name sown only in a
    # loop that runs zero times raised "the function never sows"; a value
    # plant of its (empty) capture was accepted. The site is there: the
    # function runs zero times, as the loop body does.
    x = jnp.arange(3.0)

    def f(x):
      if loop == 'fori_loop':
        return lax.fori_loop(0, 0, lambda i, c: sow(c * 2, name='a'), x)
      return lax.scan(lambda c, _: (sow(c * 2, name='a'), None), x, None,
                      length=0)[0]

    fn = lambda v, i: v * 3
    np.testing.assert_array_equal(plant(f, {'a': fn})(x), x)
    with self.assertRaisesRegex(ValueError, "never sows 'b'"):
      plant(f, {'b': fn})(x)

  @parameterized.named_parameters(
      ('scan', layers_scan),
      ('fori_loop', layers_fori),
      ('while_loop', layers_while),
  )
  def test_index_is_traced_per_iteration(self, model):
    seen = []

    def fn(value, index):
      seen.append(index)
      return value * 0.5 + index.astype(value.dtype)

    out = plant(model, {'h': fn})(X)
    self.assertIsInstance(seen[0], jax.core.Tracer)
    sow_testing.assert_close(out, by_hand(X, lambda v, l: v * 0.5 + l))

  def test_index_counts_occurrences_before_the_loop(self):
    def f(x):
      h = sow(x * 2.0, name='h')  # index 0
      h = layers_scan(h)  # indices 1, 2, 3
      return sow(h + 1.0, name='h')  # index 4: a Python int again

    seen = []

    def fn(value, index):
      seen.append(index)
      return value + jnp.asarray(index, value.dtype)

    out = plant(f, {'h': fn})(X)
    self.assertIs(type(seen[-1]), int)
    self.assertEqual(seen[-1], 4)
    h = X * 2.0 + 0.0
    for l in range(L):
      h = layer(W[l], h) + (l + 1.0)
    sow_testing.assert_close(out, h + 1.0 + 4.0)

  def test_index_after_a_while_loop_counts_its_trips(self):
    def f(x, n):
      h = lax.fori_loop(0, n, lambda l, h: sow(h * 2.0, name='h'), x)
      return sow(h + 1.0, name='h')

    run = jax.jit(
        lambda x, n: plant(f, {'h': lambda v, i: v + i.astype(v.dtype)})(x, n)
    )
    for n in (0, 2, 3):
      h = X
      for i in range(n):
        h = h * 2.0 + i
      sow_testing.assert_close(run(X, n), h + 1.0 + n, err_msg=f'n={n}')

  def test_scan_patches_from_a_stacked_cache(self):
    # Activation patching: the clean run's cached value at one layer
    # (selected by a traced argument), read with the traced index.
    _, cache = capture(layers_scan)(X)
    clean = cache['h'][0]  # stacked over the scan: (L, D)

    run = jax.jit(
        lambda x, k: plant(
            layers_scan,
            {'h': lambda v, i: jnp.where(i == k, clean[i], v)},
        )(x)
    )
    for k in range(L):
      expected = by_hand(X2, lambda v, l, k=k: clean[l] if l == k else v)
      sow_testing.assert_close(run(X2, k), expected, err_msg=f'layer {k}')

  def test_reverse_scan_counts_in_execution_order(self):
    def f(x):
      def body(h, w):
        return sow(layer(w, h), name='h'), None

      return lax.scan(body, x, W, reverse=True)[0]

    out = plant(f, {'h': lambda v, i: v + i.astype(v.dtype)})(X)
    h = X
    for step, l in enumerate(reversed(range(L))):
      h = layer(W[l], h) + step
    sow_testing.assert_close(out, h)

  def test_nested_scans(self):
    def f(x):
      def outer(h, w):
        def inner(h, _):
          return sow(layer(w, h), name='h'), None

        return lax.scan(inner, h, None, length=2)[0], None

      return lax.scan(outer, x, W)[0]

    steer = jnp.float32(0.25)
    out = jax.jit(
        lambda s: plant(f, {'h': lambda v, i: v * s + i.astype(v.dtype)})(X)
    )(steer)
    h, i = X, 0
    for l in range(L):
      for _ in range(2):
        h = layer(W[l], h) * steer + i
        i += 1
    sow_testing.assert_close(out, h)


class ControlFlowTest(sow_testing.StateAssertions, parameterized.TestCase):

  def test_cond_with_a_sow_in_one_branch(self):
    def f(x, p):
      h = sow(x, name='h')  # index 0
      h = lax.cond(p, lambda h: sow(h * 2.0, name='h'), lambda h: h - 1.0, h)
      return sow(h + 1.0, name='h')  # index 1 or 2: traced after the cond

    fn = lambda v, i: v * 10.0 + jnp.asarray(i, v.dtype)
    run = jax.jit(lambda x, p: plant(f, {'h': fn})(x, p))
    taken = ((X * 10.0) * 2.0) * 10.0 + 1.0
    sow_testing.assert_close(run(X, True), (taken + 1.0) * 10.0 + 2.0)
    skipped = X * 10.0 - 1.0
    sow_testing.assert_close(run(X, False), (skipped + 1.0) * 10.0 + 1.0)

  def test_switch_closing_over_a_jit_argument(self):
    def f(x, k):
      return lax.switch(
          k,
          [
              lambda h: sow(h * 2.0, name='h'),
              lambda h: sow(h + 1.0, name='h'),
              lambda h: h * 0.0,
          ],
          x,
      )

    run = jax.jit(
        lambda x, k, s: plant(f, {'h': lambda v, i: v * s})(x, k)
    )
    s = jnp.float32(3.0)
    sow_testing.assert_close(run(X, 0, s), X * 2.0 * s)
    sow_testing.assert_close(run(X, 1, s), (X + 1.0) * s)
    sow_testing.assert_close(run(X, 2, s), X * 0.0)

  @parameterized.named_parameters(*MODELS.items())
  def test_grad_wrt_the_closed_over_array(self, model):
    steer = jnp.array([0.1, -0.2, 0.3, 0.05], jnp.float32)

    def planted_loss(s):
      return jnp.sum(plant(model, {'h': lambda v, i: v + s})(X) ** 2)

    def explicit_loss(s):
      return jnp.sum(by_hand(X, lambda v, l: v + s) ** 2)

    # JAX differentiates a while_loop in forward mode only.
    grad = jax.jacfwd if model is layers_while else jax.grad
    expected = jax.grad(explicit_loss)(steer)
    sow_testing.assert_close(grad(planted_loss)(steer), expected)
    sow_testing.assert_close(jax.jit(grad(planted_loss))(steer), expected)

  def test_grad_wrt_the_input_through_a_fn(self):
    def planted_loss(x):
      return jnp.sum(plant(layers_scan, {'h': lambda v, i: v * v})(x))

    def explicit_loss(x):
      return jnp.sum(by_hand(x, lambda v, l: v * v))

    sow_testing.assert_close(
        jax.grad(planted_loss)(X), jax.grad(explicit_loss)(X)
    )


class VmapInsideTest(sow_testing.StateAssertions, parameterized.TestCase):

  def test_fn_sees_per_example_values(self):
    xs = jnp.stack([X, X2, X * 3.0])
    scale = jnp.array([1.0, 2.0, 3.0, 4.0], jnp.float32)  # unbatched closure

    def f(xs):
      return jax.vmap(lambda x: sow(layer(W[0], x), name='h').sum())(xs)

    shapes = []

    def fn(value, index):
      shapes.append(value.shape)
      return value / jnp.linalg.norm(value) * scale + index

    out = plant(f, {'h': fn})(xs)
    self.assertEqual(shapes, [(D,)])
    expected = jnp.stack([
        jnp.sum(layer(W[0], x) / jnp.linalg.norm(layer(W[0], x)) * scale)
        for x in xs
    ])
    sow_testing.assert_close(out, expected)

  def test_vmap_inside_a_scan(self):
    xs = jnp.stack([X, X2])

    def f(xs):
      def body(hs, w):
        return jax.vmap(lambda h: sow(layer(w, h), name='h'))(hs), None

      return lax.scan(body, xs, W)[0]

    out = jax.jit(
        lambda xs: plant(
            f, {'h': lambda v, i: v / jnp.sum(v) + i.astype(v.dtype)}
        )(xs)
    )(xs)
    for b in range(2):
      expected = by_hand(xs[b], lambda v, l: v / jnp.sum(v) + l)
      sow_testing.assert_close(out[b], expected, err_msg=f'example {b}')

  def test_a_plant_under_jax_hessian(self):
    # jax.hessian's jacfwd vmaps a JVP whose primal output it needs
    # unbatched; a plant broadcasts what it plants under a vmap, but not a
    # JVP's primal. Oracle: the Hessian of the function edited by hand.
    def f(x):
      return jnp.sum(sow(jnp.sin(x), name='h') ** 3)

    for jit in (False, True):
      hessian = jax.hessian(plant(f, {'h': lambda v, i: v * 2.0}))
      if jit:
        hessian = jax.jit(hessian)
      sow_testing.assert_close(
          hessian(X), jax.hessian(lambda x: jnp.sum((2 * jnp.sin(x)) ** 3))(X))


class ErrorTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('shape', lambda v, i: v[:2], r'float32\[2\].*float32\[4\]'),
      ('dtype', lambda v, i: v.astype(jnp.int32), r'int32\[4\].*float32\[4\]'),
      ('structure', lambda v, i: (v, v), r'structure'),
  )
  def test_fn_returning_another_value(self, fn, pattern):
    for model in (layers_one_name, layers_scan, layers_inner_jit):
      with self.assertRaisesRegex(
          ValueError, r"function planted at 'h' returned.*" + pattern
      ):
        plant(model, {'h': fn})(X)

  def test_fn_planted_name_never_sown(self):
    with self.assertRaisesRegex(ValueError, r"never sows 'nope'"):
      plant(layers_one_name, {'nope': lambda v, i: v})(X)

  def test_tag_filter(self):
    def f(x):
      a = sow(x * 2.0, name='h', tag='keep')
      return sow(a + 1.0, name='h', tag='other')

    out = plant(f, {'h': lambda v, i: v * 0.0}, tag='keep')(X)
    np.testing.assert_array_equal(out, jnp.ones_like(X))
    with self.assertRaisesRegex(ValueError, r"never sows 'h' with tag='x'"):
      plant(f, {'h': lambda v, i: v}, tag='x')(X)

  def test_too_few_steps_into_a_while_loop_is_refused(self):
    # One entry of per-step values: a stack of L - 1 steps is one short
    # (rules_while_steps_test.py plants whole stacks).
    with self.assertRaisesRegex(
        ValueError, rf"ran {L} steps, but the values planted into 'h' hold"
        rf' {L - 1}'
    ):
      plant(layers_while, {'h': (jnp.zeros((L - 1, D), jnp.float32),)})(X)

  def test_not_a_tuple_nor_a_function(self):
    with self.assertRaisesRegex(TypeError, r'or a function fn\(value, index\)'):
      plant(layers_one_name, {'h': 3.0})(X)


if __name__ == '__main__':
  absltest.main()
