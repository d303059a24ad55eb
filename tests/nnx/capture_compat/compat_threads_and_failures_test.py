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
"""``nnx.capture`` in several threads at once, and after an exception."""

import threading

from absl.testing import absltest
import jax.numpy as jnp

from flax import nnx
from flax.nnx import capture_compat

from compat_testing import Block, by_hand, CompatTestCase, flat, Net, X  # pylint: disable=g-multiple-import
import sow_legacy


class ConcurrencyAndFailureTest(CompatTestCase):

  def test_threads_get_their_own_values(self):
    net = Net(nnx.Rngs(0))
    n = 6
    barrier = threading.Barrier(n)
    results, errors = {}, []

    def forward(net, x):
      barrier.wait(60)  # every thread is inside its capture at once
      return net(x)

    def worker(i):
      try:
        results[i] = nnx.capture(forward, nnx.Intermediate)(net, X * (i + 1))
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
      t.start()
    for t in threads:
      t.join(120)
    self.assertEmpty(errors)
    for i in range(n):
      out, state = results[i]
      expected_out, expected = by_hand(net, X * (i + 1))
      self.assertTreeClose(out, expected_out)
      self.assertCollected(state, expected)

  def test_interleaved_threads(self):
    # Thread A sows, then B runs a whole capture of the same model, then A
    # finishes: each must get exactly its own values.
    for name, capture in (('new', nnx.capture),
                          ('legacy', sow_legacy.capture)):
      net = Net(nnx.Rngs(0))
      a_sowed, b_done = threading.Event(), threading.Event()
      results, errors = {}, []

      def forward_a(net, x):
        out = net(x)
        a_sowed.set()
        b_done.wait(60)
        return out

      def thread_a(capture=capture):
        try:
          results['a'] = capture(forward_a, nnx.Intermediate)(net, X)
        except Exception as e:  # pylint: disable=broad-except
          errors.append(e)

      thread = threading.Thread(target=thread_a)
      thread.start()
      a_sowed.wait(60)
      try:
        results['b'] = capture(net, nnx.Intermediate)(2 * X)
      finally:
        b_done.set()
        thread.join(60)
      self.assertEmpty(errors)
      self.assertCollected(results['b'][1], by_hand(net, 2 * X)[1])
      if name == 'new':
        self.assertCollected(results['a'][1], by_hand(net, X)[1])
      else:  # B's capture replaced and then removed A's __captures__
        self.assertEmpty(flat(results['a'][1]))

  def test_an_exception_leaves_nothing_behind(self):
    net = Net(nnx.Rngs(0))
    graphdef, state = nnx.split(net)

    def failing(net, x):
      net(x)
      raise RuntimeError('boom')

    with self.assertRaisesRegex(RuntimeError, 'boom'):
      nnx.capture(failing, nnx.Intermediate, method_outputs=nnx.Intermediate)(
          net, X
      )
    self.assertEqual(nnx.graphdef(net), graphdef)
    self.assertStatesEqual(nnx.state(net), state)
    for _, module in nnx.iter_modules(net):
      self.assertNotIn('__captures__', vars(module))
    self.assertEmpty(capture_compat.frames.FRAMES.stack)
    _, state = nnx.capture(net, nnx.Intermediate)(X)
    self.assertCollected(state, by_hand(net, X)[1])
    # Flax 0.12.8 leaves its __captures__ on every module.
    with self.assertRaisesRegex(RuntimeError, 'boom'):
      sow_legacy.capture(failing, nnx.Intermediate)(net, X)
    self.assertIn('__captures__', vars(net.blocks[0]))

  def test_nested_captures_on_the_same_model(self):
    net = Net(nnx.Rngs(0))

    def outer(net, x, capture=nnx.capture):
      first = net(x)
      _, inner_state = capture(net, nnx.Intermediate)(2 * x)
      return first, inner_state

    (_, inner_state), outer_state = nnx.capture(outer, nnx.Intermediate)(
        net, X
    )
    self.assertCollected(outer_state, by_hand(net, X)[1])
    self.assertCollected(inner_state, by_hand(net, 2 * X)[1])
    # Flax 0.12.8: the inner capture empties the outer one.
    (_, inner_legacy), outer_legacy = sow_legacy.capture(
        outer, nnx.Intermediate
    )(net, X, sow_legacy.capture)
    self.assertCollected(inner_legacy, by_hand(net, 2 * X)[1])
    self.assertEmpty(flat(outer_legacy))

  def test_nested_captures_on_the_same_model_staged(self):
    # Under nnx.jit both captures are staged: each collects the sows of its
    # own frame from the one program.
    net = Net(nnx.Rngs(0))

    def outer(net, x):
      first = net(x)
      _, inner_state = nnx.capture(net, nnx.Intermediate)(2 * x)
      return first, inner_state

    step = nnx.jit(
        lambda net, x: nnx.capture(outer, nnx.Intermediate)(net, x))
    (_, inner_state), outer_state = step(net, X)
    self.assertCollected(outer_state, by_hand(net, X)[1])
    self.assertCollected(inner_state, by_hand(net, 2 * X)[1])

  def test_nested_captures_of_different_types(self):

    class Both(nnx.Module):

      def __init__(self, rngs):
        self.block = Block(3, 3, rngs)

      def __call__(self, x):
        h = self.block(x)
        self.sow(nnx.Perturbation, 'p', h * 2)
        return h

    model = Both(nnx.Rngs(0))

    def outer(model, x):
      return nnx.capture(model, nnx.Perturbation)(x)

    (_, inner), outer_state = nnx.capture(outer, nnx.Intermediate)(model, X)
    h = X @ model.block.linear.kernel[...] + model.block.linear.bias[...]
    self.assertCollected(outer_state, {('block', 'h'): [h]})
    self.assertCollected(inner, {('p',): [jnp.tanh(h) * 2]},
                         nnx.Perturbation)


if __name__ == '__main__':
  absltest.main()
