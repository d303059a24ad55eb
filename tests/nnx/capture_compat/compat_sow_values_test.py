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
"""``capture_compat.capture`` (``nnx.capture`` on the sow transform): what
the values ``Module.sow`` sows become, as in Flax 0.12.8: custom reducers
and inits, shared submodules, the return value of ``Module.sow``, non-array
values, modules outside the captured root, concrete values in an eager
call, the attention weights ``nnx.MultiHeadAttention`` sows.

Oracles: Flax 0.12.8's own implementation (``sow_legacy.capture``, where it
works), values recomputed directly from the model's parameters.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

import flax
from flax import nnx

from compat_testing import Block, by_hand, CompatTestCase, flat, Net, X  # pylint: disable=g-multiple-import
import sow_legacy


class SowValuesTest(CompatTestCase):

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


if __name__ == '__main__':
  absltest.main()
