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
0.12.8's forms and conventions: the forms of the call, the number of types,
the calls in call order, Variable types by name, the signature
(``compat_sow_values_test.py``: what the sown values become;
``compat_variable_updates_test.py``: Variable updates and path marks).

Oracles: Flax 0.12.8's own implementation (``sow_legacy.capture``, where it
works), values recomputed directly from the model's parameters.
"""

import inspect

from absl.testing import absltest
import jax.numpy as jnp

from flax import nnx
from flax.nnx import capture_compat

from compat_testing import Block, by_hand, CompatTestCase, Net, X  # pylint: disable=g-multiple-import
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

  def test_signature_of_legacy(self):
    self.assertEqual(
        inspect.signature(sow_legacy.capture).parameters.keys(),
        inspect.signature(sow_legacy.flax_capture()).parameters.keys(),
    )
    self.assertEqual(
        inspect.signature(capture_compat.capture).parameters.keys(),
        inspect.signature(sow_legacy.flax_capture()).parameters.keys(),
    )


if __name__ == '__main__':
  absltest.main()
