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
"""``nnx.capture`` inside and around NNX transforms, in graph and tree mode,
with modules holding immutable pytrees, and one ``nnx.jit`` traced per
module path."""

from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import capture_compat

from compat_testing import Block, by_hand, CompatTestCase, flat, Net, X  # pylint: disable=g-multiple-import
import sow_legacy
import sow_pytree_models
import sow_testing


class Clipped(sow_pytree_models.Clipped):
  """Records its features with ``Module.sow``."""

  def record(self, h):
    self.sow(nnx.Intermediate, 'h', h)
    return h


PYTREES = sow_pytree_models.PYTREES
lo_hi = sow_pytree_models.lo_hi


X_SEMANTICS = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


class _Scaled(nnx.Module):

  def __call__(self, x):
    return 2 * self.perturb('x', x)


class _Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    self.sow(nnx.Intermediate, 'y', y)
    return y


class TransformsTest(CompatTestCase):
  """Inside and around NNX transforms, in graph and tree mode."""

  @parameterized.parameters(True, False)
  def test_jit_inside_per_block_and_around(self, graph):
    with nnx.set_graph_mode(graph):
      net = Net(nnx.Rngs(0))
      step = nnx.jit(lambda block, x: block(x))

      def forward(net, x):
        for block in net.blocks:
          x = step(block, x)
        return net.head(x)

      _, expected = by_hand(net, X)
      expected.pop(('out',))
      for _ in range(2):  # the second time, the traces are cached
        for x in (X, X + 1):
          _, state = nnx.capture(forward, nnx.Intermediate)(net, x)
          self.assertCollected(
              state, {p: v for p, v in by_hand(net, x)[1].items()
                      if p != ('out',)}
          )
      around = nnx.jit(lambda net, x: nnx.capture(net, nnx.Intermediate)(x))
      _, state = around(net, X)
      self.assertCollected(state, by_hand(net, X)[1])
      _, state_legacy = sow_legacy.capture(forward, nnx.Intermediate)(
          net, X
      )
      self.assertCollected(state_legacy, expected)

  def test_jit_inside_is_traced_once_per_capture_structure(self):
    # The jitted function is traced once per module structure (the two
    # blocks differ), as without a capture: the sow names of each call are
    # found from its arguments. Later calls trace nothing.
    net = Net(nnx.Rngs(0))
    traces = []

    @nnx.jit
    def block_step(block, x):
      traces.append(None)
      return block(x)

    def forward(net, x):
      return net.head(block_step(net.blocks[1], block_step(net.blocks[0], x)))

    for i in range(3):
      _, state = nnx.capture(forward, nnx.Intermediate)(net, X + i)
      expected = by_hand(net, X + i)[1]
      expected.pop(('out',))
      self.assertCollected(state, expected)
    self.assertLen(traces, 2)  # once per block, in the first capture
    traces.clear()
    for _ in range(2):
      sow_legacy.capture(forward, nnx.Intermediate)(net, X)
    self.assertLen(traces, 2)  # once per block structure

  def test_jit_around_is_traced_once(self):
    net = Net(nnx.Rngs(0))
    traces = []

    @nnx.jit
    def train_step(net, x):
      traces.append(None)
      out, state = nnx.capture(net, nnx.Intermediate)(x)
      return out, state

    for i in range(3):
      _, state = train_step(net, X + i)
      self.assertCollected(state, by_hand(net, X + i)[1])
    self.assertLen(traces, 1)

  @parameterized.parameters(True, False)
  def test_jax_jit_inside(self, graph):
    with nnx.set_graph_mode(graph):
      net = Net(nnx.Rngs(0))
      _, state = nnx.capture(
          lambda net, x: jax.jit(lambda net, x: net(x))(net, x),
          nnx.Intermediate,
      )(net, X)
      self.assertCollected(state, by_hand(net, X)[1])
      # Flax 0.12.8 loses them.
      _, state_legacy = sow_legacy.capture(
          lambda net, x: jax.jit(lambda net, x: net(x))(net, x),
          nnx.Intermediate,
      )(net, X)
      self.assertEmpty(flat(state_legacy))

  def stacked(self):

    class Stack(nnx.Module):

      def __init__(self, rngs):
        @nnx.split_rngs(splits=3)
        @nnx.vmap(in_axes=0, out_axes=0)
        def make(rngs):
          return Block(3, 3, rngs)

        self.blocks = make(rngs)

      def __call__(self, x, axes):
        @nnx.scan(in_axes=(axes, nnx.Carry), out_axes=nnx.Carry)
        def body(block, x):
          return block(x)

        return body(self.blocks, x)

    return Stack(nnx.Rngs(0))

  @parameterized.parameters(
      (0,), (nnx.StateAxes({nnx.Intermediate: 0, ...: 0}),)
  )
  def test_scan_over_layers(self, axes):
    stack = self.stacked()
    _, state = nnx.capture(stack, nnx.Intermediate)(X, axes)
    _, state_legacy = sow_legacy.capture(stack, nnx.Intermediate)(X, axes)
    self.assertStatesEqual(state, state_legacy)
    linear = stack.blocks.linear
    kernels, biases = linear.kernel[...], linear.bias[...]
    x, hs = X, []
    for w, b in zip(kernels, biases):
      hs.append(x @ w + b)
      x = jnp.tanh(hs[-1])
    self.assertCollected(state, {('blocks', 'h'): [jnp.stack(hs)]})

  @parameterized.parameters(
      (None,), (nnx.StateAxes({nnx.Intermediate: 0, ...: None}),)
  )
  def test_scan_with_the_module_broadcast(self, axes):
    block = Block(3, 3, nnx.Rngs(0))
    xs = jnp.stack([X, X * 2, X * 3, X * 4])

    def forward(block, xs):
      @nnx.scan(in_axes=(axes, nnx.Carry, 0), out_axes=(nnx.Carry, 0))
      def body(block, carry, x):
        return carry + 1.0, block(x + carry)

      return body(block, 0.0, xs)

    _, state = nnx.capture(forward, nnx.Intermediate)(block, xs)
    w, b = block.linear.kernel[...], block.linear.bias[...]
    hs = [(x + i) @ w + b for i, x in enumerate(xs)]
    self.assertCollected(state, {('h',): [jnp.stack(hs)]})
    _, state_legacy = sow_legacy.capture(forward, nnx.Intermediate)(
        block, xs
    )
    if axes is None:  # Flax 0.12.8 returns nothing, silently
      self.assertEmpty(flat(state_legacy))
    else:
      self.assertStatesEqual(state, state_legacy)

  @parameterized.parameters(True, False)
  def test_vmap_broadcast_and_stacked(self, graph):
    with nnx.set_graph_mode(graph):
      net = Net(nnx.Rngs(0))
      xs = jnp.stack([X, X * 2])
      _, state = nnx.capture(
          lambda net, xs: nnx.vmap(lambda n, x: n(x), in_axes=(None, 0))(
              net, xs
          ),
          nnx.Intermediate,
      )(net, xs)
      per_example = [by_hand(net, x)[1] for x in xs]
      self.assertCollected(state, {
          p: [jnp.stack([e[p][0] for e in per_example])]
          for p in per_example[0]
      })
      # Flax 0.12.8 fails: on the nnx.List in graph mode, on the broadcast
      # __captures__ in tree mode.
      with self.assertRaisesRegex(
          ValueError, 'sorting' if graph else 'axis spec None'
      ):
        sow_legacy.capture(
            lambda net, xs: nnx.vmap(lambda n, x: n(x), in_axes=(None, 0))(
                net, xs
            ),
            nnx.Intermediate,
        )(net, xs)
    stack = self.stacked()
    _, state = nnx.capture(
        lambda s, x: nnx.vmap(lambda b, x: b(x), in_axes=(0, None))(
            s.blocks, x
        ),
        nnx.Intermediate,
    )(stack, X)
    linear = stack.blocks.linear
    kernels, biases = linear.kernel[...], linear.bias[...]
    self.assertCollected(
        state, {('blocks', 'h'): [jnp.einsum('i,lij->lj', X, kernels)
                                  + biases]}
    )

  @parameterized.parameters(True, False)
  def test_remat_over_a_list(self, graph):
    with nnx.set_graph_mode(graph):
      net = Net(nnx.Rngs(0))
      forward = nnx.remat(lambda net, x: net(x))
      out, state = nnx.capture(forward, nnx.Intermediate)(net, X)
      expected_out, expected = by_hand(net, X)
      self.assertCollected(state, expected)
      self.assertTreeClose(out, expected_out)
      # And its gradient, through the rematerialized body.
      grads = nnx.capture(
          lambda net, x: nnx.grad(lambda n: forward(n, x).sum())(net),
          nnx.Intermediate,
      )(net, X)[0]
      with self.assertWarns(DeprecationWarning):  # a direct call sows
        expected_grads = nnx.grad(lambda n: n(X).sum())(nnx.clone(net))
      self.assertTreeClose(
          nnx.state(grads),
          nnx.state(expected_grads, nnx.Not(nnx.Intermediate)),
      )
    if graph:  # Flax 0.12.8 fails on the nnx.List
      with self.assertRaisesRegex(ValueError, 'sorting'):
        sow_legacy.capture(forward, nnx.Intermediate)(net, X)

  def test_cond_and_switch(self):
    net = Net(nnx.Rngs(0))

    def with_cond(net, x):
      return nnx.cond(
          x.sum() > 0, lambda n, x: n(x), lambda n, x: n(-x), net, x
      )

    def with_switch(net, x, i):
      return nnx.switch(
          i, [lambda n, x: n(x), lambda n, x: n(2 * x),
              lambda n, x: n(-x)], net, x
      )

    for x in (X, -X):
      _, state = nnx.capture(with_cond, nnx.Intermediate)(net, x)
      self.assertCollected(state, by_hand(net, x if x.sum() > 0 else -x)[1])
    for i, scale in enumerate((1, 2, -1)):
      _, state = nnx.capture(with_switch, nnx.Intermediate)(
          net, X, jnp.asarray(i)
      )
      self.assertCollected(state, by_hand(net, scale * X)[1])
    # Flax 0.12.8 fails on the nnx.List.
    with self.assertRaisesRegex(ValueError, 'sorting'):
      sow_legacy.capture(with_cond, nnx.Intermediate)(net, X)

  @parameterized.parameters(False, True)
  def test_an_nnx_dict_iterated_inside_the_capture(self, jit):
    # Found by the NNX fuzzer: Flax 0.12.8's `__captures__` is an attribute
    # of every module, so an nnx.Dict iterated inside the capture yields it
    # as an item; the new path mark is an attribute NNX does not show.
    class Layers(nnx.Module):

      def __init__(self):
        self.layers = nnx.Dict({
            'a': Block(3, 3, nnx.Rngs(0)), 'b': Block(3, 3, nnx.Rngs(1))})

      def __call__(self, x):
        self.sow(nnx.Intermediate, 'keys', jnp.asarray(len(self.layers)))
        for layer in self.layers.values():
          x = layer(x)
        return x

    model = Layers()
    run = (lambda f: nnx.jit(f)) if jit else (lambda f: f)
    out, state = run(lambda m: nnx.capture(m, nnx.Intermediate)(X))(model)
    x, expected = X, {('keys',): [jnp.asarray(2)]}
    for key in ('a', 'b'):
      linear = model.layers[key].linear
      h = x @ linear.kernel[...] + linear.bias[...]
      expected[('layers', key, 'h')] = [h]
      x = jnp.tanh(h)
    self.assertCollected(state, expected)
    self.assertTreeEqual(out, x)
    with sow_legacy.flax_methods(), self.assertRaisesRegex(
        TypeError, "'tuple' object is not callable"):
      run(lambda m: sow_legacy.capture(m, nnx.Intermediate)(X))(Layers())

  def test_a_sum_reducer_inside_cond_adds_the_values(self):
    # Found by the NNX fuzzer: Flax 0.12.8 adds the values inside the traced
    # branch, where XLA fuses the additions with the computation of the
    # values (here a mean); the new nnx.capture adds the collected values
    # after the call: eagerly, the sum of the values themselves; under
    # nnx.jit, in the compiled program, to float rounding. Oracle: the values
    # (a tuple reducer), added as reduce_fn adds them.
    class Mean(nnx.Module):

      def __init__(self, reduce_fn, init_fn, rngs):
        self.reduce_fn, self.init_fn = reduce_fn, init_fn
        self.linear = nnx.Linear(3, 3, rngs=rngs)

      def __call__(self, x):
        h = jnp.tanh(self.linear(x))
        kwargs = {} if self.reduce_fn is None else dict(
            reduce_fn=self.reduce_fn, init_fn=self.init_fn)
        self.sow(nnx.Intermediate, 'm', jnp.mean(h, axis=-1), **kwargs)
        return h

    class Model(nnx.Module):

      def __init__(self, reduce_fn, init_fn):
        rngs = nnx.Rngs(0)
        self.layers = nnx.Dict({f'c{i}': Mean(reduce_fn, init_fn, rngs)
                                for i in range(3)})
        self.again = self.layers['c1']

      def body(self, x):
        for key in ('c0', 'c1', 'c2'):
          x = self.layers[key](x)
        return self.again(x)

      def __call__(self, x):
        return nnx.cond(jnp.sum(x) > 0, lambda m, x: m.body(x),
                        lambda m, x: m.body(2 * x), self, x)

    x = jax.random.normal(jax.random.key(0), (2, 3), jnp.float32)
    add, zero = (lambda a, b: a + b), (lambda: 0.0)
    for run in (lambda f: f, nnx.jit):
      _, values = run(lambda m: nnx.capture(m, nnx.Intermediate)(x))(
          Model(None, None))
      _, state = run(lambda m: nnx.capture(m, nnx.Intermediate)(x))(
          Model(add, zero))
      with sow_legacy.flax_methods():
        _, legacy = run(lambda m: sow_legacy.capture(m, nnx.Intermediate)(x))(
            Model(add, zero))
      # The shared layer's path is its first in nnx.iter_modules: 'again'.
      first, second = values['again']['m'].get_value()
      total = state['again']['m'].get_value()
      if run is nnx.jit:  # added in the compiled program, as legacy's
        sow_testing.assert_close(total, add(add(zero(), first), second))
      else:  # the sum of the values themselves
        np.testing.assert_array_equal(total, add(add(zero(), first), second))
      sow_testing.assert_close(total, legacy['again']['m'].get_value())

  class Cell(nnx.Module):

    def __init__(self, reduce_fn):
      self.reduce_fn = reduce_fn
      self.w = nnx.Param(jnp.array([1.5, -0.5, 2.0], jnp.float32))

    def __call__(self, x):
      y = jnp.sin(self.w * x)
      if self.reduce_fn is None:
        self.sow(nnx.Intermediate, 'y', y)
      else:
        self.sow(nnx.Intermediate, 'y', y, reduce_fn=self.reduce_fn)
      return y

  def test_fori_loop_with_static_bounds_stacks(self):
    cell = self.Cell(None)

    def forward(cell, x):
      return nnx.fori_loop(0, 3, lambda i, c: (c[0], c[0](c[1])), (cell, x))

    _, state = nnx.capture(forward, nnx.Intermediate)(cell, X)
    ys, x = [], X
    for _ in range(3):
      x = jnp.sin(cell.w[...] * x)
      ys.append(x)
    self.assertCollected(state, {('y',): [jnp.stack(ys)]})
    # Flax 0.12.8's __captures__ changes the loop carry.
    with self.assertRaisesRegex(TypeError, 'same pytree structure'):
      sow_legacy.capture(forward, nnx.Intermediate)(cell, X)

  @parameterized.parameters('while_loop', 'fori_loop')
  def test_keep_last_in_a_while_loop_clobbers(self, loop):
    for reduce_fn in (capture_compat.keep_last,):
      cell = self.Cell(reduce_fn)

      def forward(cell, x, n):
        x = cell(x)  # sows 'y' once before the loop
        if loop == 'while_loop':
          return nnx.while_loop(
              lambda c: c[2] < n, lambda c: (c[0], c[0](c[1]), c[2] + 1),
              (cell, x, 0),
          )[1]
        return nnx.fori_loop(
            0, n, lambda i, c: (c[0], c[0](c[1])), (cell, x)
        )[1]

      for n in (0, 3):
        out, state = nnx.capture(forward, nnx.Intermediate)(
            cell, X, jnp.asarray(n)
        )
        x = X
        for _ in range(n + 1):
          x = jnp.sin(cell.w[...] * x)
        self.assertTreeClose(out, x)
        self.assertEqual(flat(state)[0][0], ('y',))
        self.assertTreeClose(state['y'].get_value(), x)

  def test_while_loop_clear_errors(self):
    def forward(cell, x, n):
      return nnx.while_loop(
          lambda c: c[2] < n, lambda c: (c[0], c[0](c[1]), c[2] + 1),
          (cell, x, 0),
      )[1]

    with self.assertRaisesRegex(NotImplementedError, "mode='append'") as e:
      nnx.capture(forward, nnx.Intermediate)(self.Cell(None), X,
                                            jnp.asarray(2))
    self.assertIn('keep_last', '\n'.join(e.exception.__notes__))
    # The location is the user's call of nnx.while_loop, not a line of Flax.
    self.assertIn(f'(at {__file__}:', str(e.exception))
    # Keeping the last value is asked for explicitly: a reducer is never
    # called while tracing, nor is its code inspected, so a lambda that
    # returns its second argument appends like any other reducer.
    with self.assertRaisesRegex(NotImplementedError, "mode='append'") as e:
      nnx.capture(forward, nnx.Intermediate)(
          self.Cell(lambda previous, y: y), X, jnp.asarray(2)
      )
    self.assertIn('reduce_fn=capture_compat.keep_last',
                  '\n'.join(e.exception.__notes__))
    with self.assertRaisesRegex(NotImplementedError, 'zero times'):
      nnx.capture(forward, nnx.Intermediate)(
          self.Cell(capture_compat.keep_last), X, jnp.asarray(2)
      )
    # Flax 0.12.8's __captures__ changes the loop carry.
    with self.assertRaisesRegex(ValueError, 'same reference and pytree'):
      sow_legacy.capture(forward, nnx.Intermediate)(
          self.Cell(capture_compat.keep_last), X, 2
      )

  def test_grad_and_value_and_grad(self):
    net = Net(nnx.Rngs(0))

    def loss(net, x):
      return jnp.sum(net(x) ** 2)

    with self.assertWarns(DeprecationWarning):  # a direct call sows
      expected_grads = jax.grad(
          lambda params, x: jnp.sum(
              nnx.merge(nnx.graphdef(net), params)(x) ** 2
          )
      )(nnx.state(net), X)
    _, expected = by_hand(net, X)
    # Inside.
    grads, state = nnx.capture(
        lambda net, x: nnx.grad(loss)(net, x), nnx.Intermediate
    )(net, X)
    self.assertCollected(state, expected)
    self.assertTreeClose(nnx.state(grads), expected_grads)
    (value, grads), state = nnx.capture(
        lambda net, x: nnx.value_and_grad(loss)(net, x), nnx.Intermediate
    )(net, X)
    self.assertTreeClose(value, jnp.sum(by_hand(net, X)[0] ** 2))
    self.assertCollected(state, expected)
    # Flax 0.12.8 fails on the nnx.List (and leaves __captures__ behind).
    with self.assertRaisesRegex(TypeError, "'<' not supported"):
      sow_legacy.capture(
          lambda net, x: nnx.grad(loss)(net, x), nnx.Intermediate
      )(nnx.clone(net), X)
    # Around.
    grads, state = nnx.grad(
        lambda net, x: nnx.capture(loss, nnx.Intermediate)(net, x),
        has_aux=True,
    )(net, X)
    self.assertTreeClose(nnx.state(grads), expected_grads)
    self.assertCollected(state, expected)
    (value, state), grads = nnx.value_and_grad(
        lambda net, x: nnx.capture(loss, nnx.Intermediate)(net, x),
        has_aux=True,
    )(net, X)
    self.assertTreeClose(nnx.state(grads), expected_grads)
    self.assertCollected(state, expected)

  def test_sow_inside_custom_vjp_under_grad(self):

    class Custom(nnx.Module):

      def __init__(self):
        self.w = nnx.Param(jnp.array([1.0, 2.0, 3.0]))

      def __call__(self, x):
        module = self

        @jax.custom_vjp
        def f(x):
          return jnp.sin(x)

        def fwd(x):
          y = jnp.sin(x)
          module.sow(nnx.Intermediate, 'forward', y)
          return y, jnp.cos(x)

        def bwd(cos_x, g):
          module.sow(nnx.Intermediate, 'backward', cos_x * g)
          return (cos_x * g,)

        f.defvjp(fwd, bwd)
        return jnp.sum(f(self.w[...] * x))

    def grad_x(m, x):
      return jax.grad(lambda x: m(x))(x)

    def grad_model(m, x):
      return nnx.grad(lambda m, x: m(x))(m, x)

    model = Custom()
    w = model.w[...]
    expected = {('forward',): [jnp.sin(w * X)],
                ('backward',): [jnp.cos(w * X)]}
    grads, state = nnx.capture(grad_x, nnx.Intermediate)(model, X)
    self.assertTreeClose(grads, w * jnp.cos(w * X))
    self.assertCollected(state, expected)
    grads, state = nnx.capture(grad_model, nnx.Intermediate)(model, X)
    self.assertTreeClose(grads.w.get_value(), X * jnp.cos(w * X))
    self.assertCollected(state, expected)
    # Flax 0.12.8 loses the backward sow under nnx.grad, silently.
    _, state_legacy = sow_legacy.capture(grad_model, nnx.Intermediate)(
        model, X
    )
    self.assertEqual([p for p, _, _ in flat(state_legacy)], [('forward',)])

  def test_rnn_with_an_lstm_cell(self):

    class SowingLSTM(nnx.LSTMCell):

      def __call__(self, carry, x):
        carry, y = super().__call__(carry, x)
        self.sow(nnx.Intermediate, 'y', y)
        return carry, y

    cell = SowingLSTM(3, 2, rngs=nnx.Rngs(0))
    rnn = nnx.RNN(cell)
    xs = jax.random.normal(jax.random.key(0), (2, 5, 3))  # batch, time, in
    carry0 = (jnp.zeros((2, 2)), jnp.zeros((2, 2)))
    out, state = nnx.capture(rnn, nnx.Intermediate)(xs, initial_carry=carry0)
    # Oracle: the plain cell stepped by hand over time.
    plain = nnx.LSTMCell(3, 2, rngs=nnx.Rngs(0))
    carry = carry0
    ys = []
    for t in range(5):
      carry, y = plain(carry, xs[:, t])
      ys.append(y)
    self.assertTreeClose(out, jnp.stack(ys, axis=1))
    self.assertCollected(state, {('cell', 'y'): [jnp.stack(ys)]})

  @parameterized.parameters(dict(hijax=True), dict(ref=True))
  def test_hijax_and_ref_variables(self, **defaults):

    class Counter(nnx.Module):

      def __init__(self, rngs):
        self.net = Net(rngs)
        self.norm = nnx.LayerNorm(2, rngs=rngs)
        self.count = nnx.Variable(jnp.zeros(()))

      def __call__(self, x):
        self.count[...] += 1
        return self.norm(self.net(x))

    with nnx.var_defaults(**defaults):
      model = Counter(nnx.Rngs(0))
    plain = Counter(nnx.Rngs(0))
    _, expected = by_hand(plain.net, X)
    expected = {('net', *p): v for p, v in expected.items()}
    for _ in range(2):
      out, state = nnx.capture(model, nnx.Intermediate)(X)
      self.assertCollected(state, expected)
      self.assertTreeClose(out, plain.norm(by_hand(plain.net, X)[0]))
    # Eagerly, the call runs on the model's own Variables, as a direct call;
    # staged (under a jit), on copies where Hijax Variables are ordinary
    # ones holding the same values.
    inside = []
    nnx.capture(
        lambda m, x: inside.append(m.count.hijax) or m(x), nnx.Intermediate
    )(model, X)
    self.assertEqual(inside, [defaults.get('hijax', False)])
    self.assertEqual(model.count.hijax, defaults.get('hijax', False))
    self.assertEqual(model.count[...], 3)
    model.count[...] = jnp.asarray(2.0)
    self.assertEqual(model.count[...], 2)
    with nnx.var_defaults(**defaults):
      out, state = nnx.capture(model, nnx.Intermediate)(X)
      self.assertCollected(state, expected)
      if 'hijax' in defaults:  # Flax 0.12.8 returns nothing, silently
        _, state_legacy = sow_legacy.capture(model, nnx.Intermediate)(X)
        self.assertEmpty(flat(state_legacy))
      else:  # Flax 0.12.8 fails
        with self.assertRaisesRegex(TypeError, 'new_ref'):
          sow_legacy.capture(model, nnx.Intermediate)(X)
    # Flax 0.12.8 failed before calling the model with ref=True.
    self.assertEqual(model.count[...], 4 if 'hijax' in defaults else 3)


class CompatImmutablePytreesTest(CompatTestCase):
  """Modules holding an immutable pytree of arrays, through NNX transforms.

  A transform returns new arrays for the pytree, which cannot be set in it:
  it is rebuilt, as a direct call of the transform does. The oracles: that
  direct call on a clone, and the sown values recomputed from the weights.
  """

  def assertLikeTwin(self, model, twin):
    values = nnx.to_flat_state(nnx.state(model))
    twin_values = nnx.to_flat_state(nnx.state(twin, nnx.Not(nnx.Intermediate)))
    self.assertEqual([p for p, _ in values], [p for p, _ in twin_values])
    self.assertTreeEqual(
        [v.get_value() if isinstance(v, nnx.Variable) else v
         for _, v in values],
        [v.get_value() if isinstance(v, nnx.Variable) else v
         for _, v in twin_values],
    )
    self.assertIs(type(model.bounds), type(twin.bounds))

  def by_hand(self, model, x, lo, hi):
    return jnp.clip(
        x @ model.linear.kernel[...] + model.linear.bias[...], lo, hi
    )

  @parameterized.product(kind=tuple(PYTREES), transform=('jit', 'remat'))
  def test_as_argument_and_as_callable(self, kind, transform):
    forms = {
        'argument': lambda m: (getattr(nnx, transform)(lambda m, x: m(x)),
                               (m, X)),
        'callable': lambda m: (m, (X,)),
        'bound method': lambda m: (m.__call__, (X,)),
    }
    for form, make in forms.items():
      with self.subTest(form):
        transform_inside = None if form == 'argument' else transform
        model = Clipped(kind, nnx.Rngs(0), transform=transform_inside)
        twin = nnx.clone(model)
        lo, hi = lo_hi(model.bounds)
        f, args = make(model)
        for step in range(2):  # the second call starts from the update
          out, state = nnx.capture(f, nnx.Intermediate)(*args)
          g, twin_args = make(twin)
          with self.assertWarns(DeprecationWarning):  # a direct call sows
            expected_out = g(*twin_args)
          self.assertTreeClose(out, expected_out)
          self.assertLikeTwin(model, twin)
          self.assertCollected(state, {('h',): [self.by_hand(
              model, X, lo - 0.25 * step, hi + 0.25 * step
          )]})
        self.assertTreeEqual(lo_hi(model.bounds)[0], lo - 0.5)

  @parameterized.parameters(*PYTREES)
  def test_through_scan(self, kind):
    @nnx.vmap(in_axes=0, out_axes=0)
    def make_layers(key):
      return Clipped(kind, nnx.Rngs(key))

    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
    def over_layers(layer, x):
      return layer(x)

    layers = make_layers(jax.random.split(jax.random.key(0), 3))
    kernels, biases = layers.linear.kernel[...], layers.linear.bias[...]
    out, state = nnx.capture(over_layers, nnx.Intermediate)(layers, X)
    # By hand: each layer clips to [-0.5, 0.5], then widens its bounds.
    x, expected = X, []
    for kernel, bias in zip(kernels, biases):
      x = jnp.clip(x @ kernel + bias, -0.5, 0.5)
      expected.append(x)
    self.assertTreeClose(out, x)
    self.assertCollected(state, {('h',): [jnp.stack(expected)]})
    self.assertIs(type(layers.bounds), type(PYTREES[kind](0, 0)))
    self.assertTreeEqual(lo_hi(layers.bounds)[0], jnp.full((3, 3), -0.75))

    # The module broadcast to every iteration (where it cannot update).
    @nnx.scan(in_axes=(None, nnx.Carry, 0), out_axes=(nnx.Carry, 0))
    def over_inputs(layer, carry, x):
      return carry, layer(x)

    layer = Clipped(kind, nnx.Rngs(1), update=False)
    xs = jnp.stack([X, 2 * X])
    (_, out), state = nnx.capture(over_inputs, nnx.Intermediate)(
        layer, 0.0, xs
    )
    expected = jax.vmap(lambda x: self.by_hand(layer, x, -0.5, 0.5))(xs)
    self.assertTreeClose(out, expected)
    self.assertCollected(state, {('h',): [expected]})
    self.assertIs(type(layer.bounds), type(PYTREES[kind](0, 0)))


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
    traces = []
    block_call = _Block.__call__

    def counting(self, x):
      traces.append(None)
      return block_call(self, x)

    with mock.patch.object(_Block, '__call__', counting):
      for _ in range(2):
        _, state = nnx.capture(model, nnx.Intermediate)(X_SEMANTICS)
        self.assertEqual(
            [path for path, _ in nnx.to_flat_state(state)],
            [('blocks', 0, 'y'), ('blocks', 1, 'y')],
        )
    # The model makes its nnx.jit anew on each call: one trace per call, for
    # both blocks (nothing of a module's path is in what JAX's caches see).
    self.assertLen(traces, 2)
    x = X_SEMANTICS
    for i, block in enumerate(model.blocks):
      x = x @ block.linear.kernel.get_value() + block.linear.bias.get_value()
      (value,) = state['blocks'][i]['y'].get_value()
      sow_testing.assert_close(value, x)

  def test_the_decorator_form_passes_init(self):
    model = _Scaled()
    _, perturbations = nnx.capture(model, nnx.Perturbation)(X_SEMANTICS)
    ones = jax.tree.map(jnp.ones_like, perturbations)

    @nnx.capture(nnx.Perturbation, init=ones)
    def forward(model, x):
      return model(x)

    out, returned = forward(model, X_SEMANTICS)
    np.testing.assert_array_equal(out, 2 * (np.asarray(X_SEMANTICS) + np.float32(1)))
    np.testing.assert_array_equal(returned['x'].get_value(), np.ones(3))


if __name__ == '__main__':
  absltest.main()
