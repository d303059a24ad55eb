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
"""``capture_compat.capture`` (``nnx.capture`` on the sow transform): Flax
0.12.8's forms and conventions, Variable updates, and the path marks of
module copies.

Oracles: Flax 0.12.8's own implementation (``sow_legacy.capture``, where it
works), values recomputed directly from the model's parameters.
"""

import inspect

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

import flax
from flax import nnx
from flax.nnx import capture_compat

from compat_testing import Block, by_hand, CompatTestCase, flat, Net, UpdatingModel, X  # pylint: disable=g-multiple-import
import sow_legacy


class FormsTest(CompatTestCase):
  """Flax 0.12.8's calling conventions, against the legacy implementation."""

  def test_function_form(self):
    net = Net(nnx.Rngs(0))

    def forward(model, x):
      return model(x)

    out, state = nnx.capture(forward, nnx.Intermediate)(net, X)
    out_legacy, state_legacy = sow_legacy.capture(
        forward, nnx.Intermediate
    )(net, X)
    self.assertStatesEqual(state, state_legacy)
    expected_out, expected = by_hand(net, X)
    self.assertCollected(state, expected)
    self.assertTreeClose(out, expected_out)
    self.assertTreeClose(out_legacy, expected_out)

  def test_bound_method_and_module_forms(self):
    net = Net(nnx.Rngs(0))
    _, expected = by_hand(net, X)
    for fn in (net, net.__call__):
      with self.subTest(type(fn).__name__):
        out, state = nnx.capture(fn, nnx.Intermediate)(X)
        _, state_legacy = sow_legacy.capture(fn, nnx.Intermediate)(X)
        self.assertStatesEqual(state, state_legacy)
        self.assertCollected(state, expected)
        self.assertTreeClose(out, by_hand(net, X)[0])

  def test_decorator_form(self):
    net = Net(nnx.Rngs(0))

    @nnx.capture(nnx.Intermediate)
    def forward(model, x):
      return model(x)

    @sow_legacy.capture(nnx.Intermediate)
    def forward_legacy(model, x):
      return model(x)

    _, state = forward(net, X)
    _, state_legacy = forward_legacy(net, X)
    self.assertStatesEqual(state, state_legacy)
    self.assertEqual(forward.__name__, 'forward')

  def test_number_of_types(self):

    class Stat(nnx.Variable):
      pass

    class Two(nnx.Module):

      def __call__(self, x):
        self.sow(nnx.Intermediate, 'a', x + 1)
        self.sow(Stat, 'b', x * 2)
        return x.sum()

    model = Two()
    out = nnx.capture(model)(X)
    self.assertTreeClose(out, X.sum())
    for types in [(nnx.Intermediate,), (Stat,), (Stat, nnx.Intermediate)]:
      with self.subTest(types):
        got = nnx.capture(model, *types)(X)
        want = sow_legacy.capture(model, *types)(X)
        self.assertLen(got, 1 + len(types))
        for state, state_legacy in zip(got[1:], want[1:]):
          self.assertStatesEqual(state, state_legacy)
    _, stat, inter = nnx.capture(model, Stat, nnx.Intermediate)(X)
    self.assertCollected(stat, {('b',): [X * 2]}, Stat)
    self.assertCollected(inter, {('a',): [X + 1]})

  def test_calls_are_tuples_in_call_order(self):
    block = Block(3, 3, nnx.Rngs(1))

    def thrice(block, x):
      return block(block(block(x)))

    _, state = nnx.capture(thrice, nnx.Intermediate)(block, X)
    _, state_legacy = sow_legacy.capture(thrice, nnx.Intermediate)(
        block, X
    )
    self.assertStatesEqual(state, state_legacy)
    w, b = block.linear.kernel[...], block.linear.bias[...]
    h1 = X @ w + b
    h2 = jnp.tanh(h1) @ w + b
    h3 = jnp.tanh(h2) @ w + b
    self.assertCollected(state, {('h',): [h1, h2, h3]})

  def test_custom_reduce_and_init(self):

    class Stats(nnx.Module):

      def __call__(self, x):
        self.sow(nnx.Intermediate, 'sum', x, init_fn=lambda: 0,
                 reduce_fn=lambda total, v: total + v)
        self.sow(nnx.Intermediate, 'max', x, init_fn=lambda: -jnp.inf,
                 reduce_fn=jnp.maximum)
        self.sow(nnx.Intermediate, 'last', x,
                 reduce_fn=lambda previous, v: v)
        self.sow(nnx.Intermediate, 'count', x, init_fn=lambda: 0,
                 reduce_fn=lambda n, v: n + 1)
        return x * 2 - 3

    model = Stats()

    def run(model, x):
      return model(model(model(x)))

    _, state = nnx.capture(run, nnx.Intermediate)(model, X)
    _, state_legacy = sow_legacy.capture(run, nnx.Intermediate)(model, X)
    self.assertStatesEqual(state, state_legacy)
    xs = [X, X * 2 - 3, (X * 2 - 3) * 2 - 3]
    self.assertTreeClose(state['sum'].get_value(), xs[0] + xs[1] + xs[2])
    self.assertTreeClose(
        state['max'].get_value(), np.maximum(np.maximum(xs[0], xs[1]), xs[2])
    )
    self.assertTreeClose(state['last'].get_value(), xs[2])
    self.assertEqual(state['count'].get_value(), 3)

  def test_variable_type_by_name(self):

    class Named(nnx.Module):

      def __call__(self, x):
        self.sow('my_stats', 's', x + 1)
        return x

    model = Named()
    stats_type = nnx.variablelib.variable_type_from_name(
        'my_stats', allow_register=True
    )
    _, state = nnx.capture(model, stats_type)(X)
    _, state_legacy = sow_legacy.capture(model, stats_type)(X)
    self.assertStatesEqual(state, state_legacy)
    self.assertCollected(state, {('s',): [X + 1]}, stats_type)

  def test_shared_submodule_uses_first_path(self):
    net = Net(nnx.Rngs(0), shared=True)
    paths = [p for p, m in nnx.iter_modules(net) if m is net.blocks[1]]
    self.assertEqual(paths, [('again',)] if paths[0] == ('again',) else
                     [('blocks', 1)])
    _, state = nnx.capture(net, nnx.Intermediate)(X)
    _, state_legacy = sow_legacy.capture(net, nnx.Intermediate)(X)
    self.assertStatesEqual(state, state_legacy)
    _, expected = by_hand(net, X)
    first = paths[0]
    expected = {
        (first + ('h',) if p == ('blocks', 1, 'h') else p): v
        for p, v in expected.items()
    }
    self.assertCollected(state, expected)

  def test_sow_return_value(self):
    results = {}

    class Reports(nnx.Module):

      def __call__(self, x):
        results['intermediate'] = self.sow(nnx.Intermediate, 'a', x)
        results['perturbation'] = self.sow(nnx.Perturbation, 'b', x)
        return x

    model = Reports()
    for capture in (nnx.capture, sow_legacy.capture):
      with self.subTest(capture.__module__):
        results.clear()
        capture(model, nnx.Intermediate)(X)
        self.assertEqual(
            results, {'intermediate': True, 'perturbation': False}
        )

  def test_non_array_values_like_legacy(self):
    # A Python number passed as a non-traced argument stays a Python number.
    class Scale(nnx.Module):

      def __call__(self, x, factor):
        self.sow(nnx.Intermediate, 'factor', factor * 2)
        return x * factor

    model = Scale()
    _, state = nnx.capture(model, nnx.Intermediate)(X, 1.5)
    _, state_legacy = sow_legacy.capture(model, nnx.Intermediate)(X, 1.5)
    self.assertEqual(flat(state), flat(state_legacy))
    self.assertEqual(state['factor'].get_value(), (3.0,))

  def test_non_array_values_raise(self):

    class Labels(nnx.Module):

      def __call__(self, x):
        self.sow(nnx.Intermediate, 'label', 'positive')
        return x

    with self.assertRaisesRegex(TypeError, 'every leaf must be an array'):
      nnx.capture(Labels(), nnx.Intermediate)(X)
    _, state_legacy = sow_legacy.capture(Labels(), nnx.Intermediate)(X)
    self.assertEqual(state_legacy['label'].get_value(), ('positive',))

  def test_modules_outside_the_root_use_the_deprecated_path(self):
    net = Net(nnx.Rngs(0))

    def forward(net, other, x):
      return net(other(x[:2]))

    for capture in (nnx.capture, sow_legacy.capture):
      with self.subTest(capture.__module__):
        other = Block(2, 3, nnx.Rngs(1))
        with self.assertWarns(DeprecationWarning):
          _, state = capture(forward, nnx.Intermediate)(net, other, X)
        self.assertEqual(
            sorted(p for p, _, _ in flat(state)),
            [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('out',)],
        )
        h = X[:2] @ other.linear.kernel[...] + other.linear.bias[...]
        self.assertTreeClose(other.h.get_value(), (h,))
    # A module the captured function closes over is none of the capture's:
    # eagerly, as in Flax 0.12.8, its sow takes the deprecated path and
    # writes to it.
    for capture in (nnx.capture, sow_legacy.capture):
      with self.subTest(f'closed over, {capture.__module__}'):
        closed_over = Block(2, 3, nnx.Rngs(1))
        with self.assertWarns(DeprecationWarning):
          capture(lambda net, x: net(closed_over(x[:2])), nnx.Intermediate)(
              net, X
          )
        h = X[:2] @ closed_over.linear.kernel[...] + (
            closed_over.linear.bias[...])
        self.assertTreeClose(closed_over.h.get_value(), (h,))
    # Staged (under a jit), it cannot be written to from inside the trace.
    closed_over = Block(2, 3, nnx.Rngs(1))
    with self.assertRaises(flax.errors.TraceContextError) as e:
      jax.jit(lambda x: nnx.capture(
          lambda net, x: net(closed_over(x[:2])), nnx.Intermediate
      )(net, x))(X)
    self.assertIn('not reachable', '\n'.join(e.exception.__notes__))

  def test_values_are_concrete_eagerly(self):
    # As in Flax 0.12.8 and a direct call: Python control flow on values.
    net = Net(nnx.Rngs(0))

    def forward(net, x):
      out = net(x)
      return out if float(out.sum()) > 0 else -out  # needs a concrete value

    expected_out, expected = by_hand(net, X)
    expected_out = expected_out if expected_out.sum() > 0 else -expected_out
    for capture in (nnx.capture, sow_legacy.capture):
      with self.subTest(capture.__module__):
        out, state = capture(forward, nnx.Intermediate)(net, X)
        self.assertTreeClose(out, expected_out)
        self.assertCollected(state, expected)
    # Under a jit, the call is staged and its values traced.
    with self.assertRaises(jax.errors.ConcretizationTypeError):
      jax.jit(lambda x: nnx.capture(forward, nnx.Intermediate)(net, x))(X)

  def test_mha_sow_weights(self):
    mha = nnx.MultiHeadAttention(
        num_heads=2, in_features=4, qkv_features=4, decode=False,
        rngs=nnx.Rngs(0),
    )
    x = jax.random.normal(jax.random.key(1), (3, 4))
    out, state = nnx.capture(
        lambda m, x: m(x, sow_weights=True), nnx.Intermediate
    )(mha, x)
    out_legacy, state_legacy = sow_legacy.capture(
        lambda m, x: m(x, sow_weights=True), nnx.Intermediate
    )(mha, x)
    self.assertStatesEqual(state, state_legacy)
    self.assertTreeEqual(out, out_legacy)
    # Recompute the weights from the projections.
    q, k = mha.query(x), mha.key(x)
    logits = jnp.einsum('qhd,khd->hqk', q, k) / jnp.sqrt(q.shape[-1])
    self.assertCollected(
        state, {('attention_weights',): [jax.nn.softmax(logits)]}
    )

  def test_signature_of_legacy(self):
    self.assertEqual(
        inspect.signature(sow_legacy.capture).parameters.keys(),
        inspect.signature(sow_legacy.flax_capture()).parameters.keys(),
    )
    self.assertEqual(
        inspect.signature(capture_compat.capture).parameters.keys(),
        inspect.signature(sow_legacy.flax_capture()).parameters.keys(),
    )


class VariableUpdatesTest(CompatTestCase):
  """Variable updates inside the capture are visible as after a direct call.
  """

  Model = UpdatingModel

  def test_updates_like_a_direct_call(self):
    model = self.Model(nnx.Rngs(0))
    twin = nnx.clone(model)
    x = jnp.stack([X, X * 2, -X])
    graphdef = nnx.graphdef(model)

    def forward(m, x):
      # An eager call runs on the model itself, marked with its path (a
      # static attribute, part of its graph definition, removed after the
      # call) where Flax 0.12.8 adds `__captures__`.
      self.assertIs(m, model)
      self.assertIn('_nnx_capture_paths', vars(m))
      self.assertNotIn('__captures__', vars(m))
      return m(x)

    with jax.checking_leaks():
      out, state = nnx.capture(forward, nnx.Intermediate)(model, x)
    # Flax 0.12.8 adds __captures__ to every module while it runs.
    during = []
    sow_legacy.capture(
        lambda m, x: during.append(nnx.graphdef(m)) or m(x), nnx.Intermediate
    )(nnx.clone(model), x)
    self.assertNotEqual(during[0], graphdef)
    with self.assertWarns(DeprecationWarning):  # a direct call sows
      expected_out = twin(x)
    self.assertTreeClose(out, expected_out)
    self.assertEqual(nnx.graphdef(model), graphdef)
    twin_state = nnx.state(twin, nnx.Not(nnx.Intermediate))
    self.assertLen(nnx.to_flat_state(twin_state),
                   len(nnx.to_flat_state(nnx.state(model))))
    for (path, a), (_, b) in zip(
        nnx.to_flat_state(nnx.state(model)), nnx.to_flat_state(twin_state)
    ):
      a, b = a.get_value(), b.get_value()
      if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
        a, b = jax.random.key_data(a), jax.random.key_data(b)
      np.testing.assert_array_equal(a, b, err_msg=str(path))
    self.assertEqual(model.calls.get_value(), 1)
    self.assertFalse(np.allclose(model.norm.mean.get_value(), 0))
    self.assertLen(state['h'].get_value(), 1)


class PathMarksTest(CompatTestCase):
  """The static mark by which a module copy knows its path stays inside."""

  def unmarked(self, node):
    return all(
        '_nnx_capture_paths' not in vars(m)
        for _, m in nnx.iter_graph(node)
        if isinstance(m, nnx.Module)
    )

  def test_returned_modules_carry_no_mark(self):
    net = Net(nnx.Rngs(0))
    graphdef = nnx.graphdef(net)

    def forward(m, x):
      return m, nnx.clone(m), Net(nnx.Rngs(1)), m(x)

    (same, clone, new, _), state = nnx.capture(forward, nnx.Intermediate)(
        net, X
    )
    self.assertIs(same, net)
    for node in (same, clone, new):
      self.assertTrue(self.unmarked(node))
    self.assertEqual(nnx.graphdef(clone), graphdef)
    self.assertLen(flat(state), 3)

  def test_nested_capture_returns_modules_marked_for_the_outer_one(self):
    net = Net(nnx.Rngs(0))

    def inner(m, x):
      return nnx.clone(m), m(x)

    def outer(m, x):
      (clone, _), inner_state = nnx.capture(inner, nnx.Intermediate)(m, x)
      # Still inside the outer capture: the clone sows under its path.
      self.assertFalse(self.unmarked(clone))
      return clone(x), inner_state

    (_, inner_state), state = nnx.capture(outer, nnx.Intermediate)(net, X)
    self.assertEqual([p for p, _, _ in flat(inner_state)],
                     [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('out',)])
    self.assertEqual(
        [p for p, _, _ in flat(state)],
        [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('out',)],
    )
    # The inner capture collects its own sows; the outer one gets the
    # clone's, under the paths of the module it was cloned from.
    self.assertStatesEqual(state, inner_state)
    self.assertTrue(self.unmarked(net))


if __name__ == '__main__':
  absltest.main()
