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
"""``tap`` patterns and inputs as researchers write them: spelled and
negative-index patterns, containers without the method, one argument as the
input, and taps inside a ``while_loop``."""

import functools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from flax import nnx
from flax.nnx.sow import capture, plant, tap
import sow_testing

X = jnp.linspace(-1.0, 1.0, 4)


class Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x, mask=None, *, scale=1.0):
    y = self.linear(x) * scale
    if mask is not None:
      y = y * mask
    return x + nnx.relu(y)


class Model(nnx.Module):

  def __init__(self, rngs, n=3):
    self.blocks = nnx.List([Block(rngs) for _ in range(n)])

  def __call__(self, x, mask=None):
    for block in self.blocks:
      x = block(x, mask, scale=0.5)
    return x


def by_hand(model, x, *, replace_input_of=None, value=None):
  """The oracle: the model's forward written out, with the input of block
  ``replace_input_of`` replaced by ``value``."""
  for i, block in enumerate(model.blocks):
    if i == replace_input_of:
      x = value
    y = block.linear(x) * 0.5
    x = x + nnx.relu(y)
  return x


class PatternTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.model = Model(nnx.Rngs(0))

  @parameterized.parameters(
      (('blocks', -1), [2]),
      ('blocks.-1', [2]),
      (('blocks', -3), [0]),
      ('blocks.1', [1]),
      ('blocks.*', [0, 1, 2]),
      ('*.*', [0, 1, 2]),
  )
  def test_which_blocks(self, pattern, blocks):
    tapped = tap(Model.__call__, pattern, inputs=False)
    _, collected = capture(tapped)(self.model, X)
    self.assertEqual(
        list(collected), [('blocks', i, '__call__', 'output') for i in blocks]
    )

  def test_a_negative_index_past_the_first(self):
    with self.assertRaisesRegex(ValueError, r'matches no module'):
      capture(tap(Model.__call__, ('blocks', -4)))(self.model, X)

  @parameterized.parameters(('blocks',), ('*',))
  def test_a_container_without_the_method_is_an_error(self, pattern):
    with self.assertRaisesRegex(
        TypeError, r"matches the List at \('blocks',\), which has no method"
        r" '__call__'.*tap \('blocks', '\*'\) for each"):
      capture(tap(Model.__call__, pattern))(self.model, X)

  def test_a_wildcard_skips_modules_without_the_method(self):
    # '**' matches the List too, which is not tapped, and every module
    # with a __call__ at any depth, which is.
    _, collected = capture(tap(Model.__call__, '**', inputs=False))(
        self.model, X)
    self.assertEqual(sorted(collected, key=repr), sorted(
        [('blocks', i, '__call__', 'output') for i in range(3)]
        + [('blocks', i, 'linear', '__call__', 'output') for i in range(3)],
        key=repr))


class SingleInputTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.model = Model(nnx.Rngs(0))

  @parameterized.parameters((0,), ('x',))
  def test_one_argument_is_the_input(self, which):
    tapped = tap(Model.__call__, 'blocks.*', inputs=which, outputs=False)
    _, collected = capture(tapped)(self.model, X)
    names = [('blocks', i, '__call__', 'inputs', which) for i in range(3)]
    self.assertEqual(list(collected), names)
    np.testing.assert_array_equal(collected[names[0]][0], X)

  @parameterized.parameters((0,), ('x',))
  def test_a_hook_takes_and_returns_the_argument(self, which):
    tapped = tap(Model.__call__, 'blocks.*', inputs=which, outputs=False)
    patched = jnp.full((4,), 0.25)
    out = jax.jit(plant(tapped, {
        f'blocks.1.__call__.inputs.{which}': lambda v, i: patched,
    }))(self.model, X)
    sow_testing.assert_close(
        out, by_hand(self.model, X, replace_input_of=1, value=patched))

  def test_an_argument_passed_by_keyword_or_position(self):
    mask = jnp.ones(4)
    tapped = tap(Model.__call__, 'blocks.0', inputs='mask', outputs=False)
    _, collected = capture(tapped)(self.model, X, mask)
    np.testing.assert_array_equal(
        collected.one('blocks.0.__call__.inputs.mask'), mask)
    tapped = tap(Model.__call__, 'blocks.0', inputs='scale', outputs=False)
    with self.assertRaisesRegex(
        TypeError, r"its argument 'scale' holds no array \(0.5\)"):
      capture(tapped)(self.model, X)

  def test_an_argument_the_call_does_not_pass(self):
    tapped = tap(Model.__call__, 'blocks.0', inputs='nope')
    with self.assertRaisesRegex(
        TypeError, r"Block.__call__ at \('blocks', 0\): this call passes no"
        r" argument 'nope' \(its parameters: x, mask, scale\)"):
      capture(tapped)(self.model, X)

  def test_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, r'inputs=-1 must be a position'):
      tap(Model.__call__, 'blocks.0', inputs=-1)
    with self.assertRaisesRegex(TypeError, r'inputs must be True, False'):
      tap(Model.__call__, 'blocks.0', inputs=1.5)


class WhileLoopTest(absltest.TestCase):

  def test_a_clobbering_tap_inside_a_while_loop(self):
    model = Model(nnx.Rngs(0), n=1)

    def decode(model, x):
      x = model(x)  # the prefill: the tap's value if the loop runs no step
      def body(carry):
        i, x = carry
        return i + 1, model(x)
      return lax.while_loop(lambda c: c[0] < 3, body, (0, x))[1]

    with self.assertRaisesRegex(Exception, r"mode='clobber'"):
      capture(tap(decode, 'blocks.0', inputs=False))(model, X)
    tapped = tap(decode, 'blocks.0', inputs=False, mode='clobber')
    out, collected = capture(tapped)(model, X)
    # The last step's output is the loop's result.
    np.testing.assert_array_equal(
        collected.one('blocks.0.__call__.output'), out)
    expected = X
    for _ in range(4):
      expected = by_hand(model, expected)
    sow_testing.assert_close(out, expected)


class CachedBlock(nnx.Module):
  """A decoder layer's shape: ``(cache, x) -> (cache, x)``, or a dict."""

  def __init__(self, rngs, as_dict=False):
    self.linear = nnx.Linear(4, 4, rngs=rngs)
    self.as_dict = as_dict

  def __call__(self, cache, x):
    y = jnp.tanh(self.linear(x))
    if self.as_dict:
      return {'cache': cache + 1.0, 'x': y}
    return cache + 1.0, y


class Decoder(nnx.Module):

  def __init__(self, rngs, as_dict=False):
    self.layers = nnx.List([CachedBlock(rngs, as_dict) for _ in range(2)])
    self.as_dict = as_dict

  def __call__(self, x):
    cache = jnp.zeros((8, 4))
    for layer in self.layers:
      if self.as_dict:
        out = layer(cache, x)
        cache, x = out['cache'], out['x']
      else:
        cache, x = layer(cache, x)
    return x


class OutputItemTest(parameterized.TestCase):
  """``outputs=`` keeps one item of a method's output, named as the whole
  output would be."""

  def by_hand(self, model, planted=None):
    x, per_layer = X, []
    for i, layer in enumerate(model.layers):
      x = jnp.tanh(layer.linear(x))
      if planted is not None and i == 1:
        x = planted
      per_layer.append(x)
    return x, per_layer

  @parameterized.product(run=('eager', 'jit'), which=((1, False), ('x', True)))
  def test_keeps_the_item_alone(self, run, which):
    item, as_dict = which
    model = Decoder(nnx.Rngs(0), as_dict)
    tapped = tap(Decoder.__call__, 'layers.*', inputs=False, outputs=item)
    wrap = jax.jit if run == 'jit' else (lambda f: f)
    out, collected = wrap(capture(tapped))(model, X)
    want_out, per_layer = self.by_hand(model)
    self.assertEqual(list(collected), [
        ('layers', 0, '__call__', 'output'),
        ('layers', 1, '__call__', 'output')])
    for i in range(2):
      # The item itself, not the cache: one (4,) array.
      (value,) = collected[f'layers.{i}.__call__.output']
      self.assertEqual(value.shape, (4,))
      sow_testing.assert_close(value, per_layer[i])
    sow_testing.assert_close(out, want_out)
    planted = jnp.full((4,), 0.25)
    steered = wrap(plant(tapped, {'layers.1.__call__.output': (planted,)}))(
        model, X)
    np.testing.assert_array_equal(steered, planted)

  def test_the_item_one_and_the_whole_output_are_two_taps(self):
    # `1 == True` in Python: the taps outputs=1 and outputs=True (and
    # inputs=0 and inputs=False) must not share a trace of a jit inside
    # the call, in either order, nor be taken for one another when nested.
    model = Decoder(nnx.Rngs(0))

    @functools.partial(jax.jit, static_argnums=0)
    def run(graphdef, state, x):
      return nnx.merge(graphdef, state)(x)

    def split_and_run(model, x):
      return run(*nnx.split(model), x)

    _, per_layer = self.by_hand(model)
    cache = jnp.ones((8, 4))  # zeros + 1 from the first layer
    for item in (1, True, 1, True):
      tapped = tap(split_and_run, 'layers.*', inputs=False, outputs=item)
      _, collected = capture(tapped)(model, X)
      (value,) = collected['layers.0.__call__.output']
      if item is True:
        sow_testing.assert_close(value[0], cache)
        sow_testing.assert_close(value[1], per_layer[0])
      else:
        sow_testing.assert_close(value, per_layer[0])
    both = tap(tap(split_and_run, 'layers.0', inputs=False, outputs=True),
               'layers.0', inputs=False, outputs=1)
    _, collected = capture(both)(model, X)
    entries = collected['layers.0.__call__.output']
    self.assertLen(entries, 2)
    self.assertCountEqual([jax.tree.structure(e).num_leaves for e in entries],
                          [1, 2])
    # Two taps of two layers: each layer's copy sows what its own tap asks,
    # once (the other tap's sow of the copy is dropped when it is named).
    apart = tap(tap(split_and_run, 'layers.0', inputs=False, outputs=True),
                'layers.1', inputs=False, outputs=1)
    _, collected = capture(apart)(model, X)
    (first,) = collected['layers.0.__call__.output']
    (second,) = collected['layers.1.__call__.output']
    sow_testing.assert_close(first[1], per_layer[0])
    sow_testing.assert_close(second, per_layer[1])

  def test_an_item_of_an_output_that_has_none(self):
    model = Model(nnx.Rngs(0))
    with self.assertRaisesRegex(
        TypeError, r"tap: Block.__call__ at \('blocks', 0\) returned a"
        r' ArrayImpl, not a tuple or list: tap outputs=1 selects'):
      capture(tap(Model.__call__, 'blocks.0', inputs=False, outputs=1))(
          model, X)

  def test_an_item_past_the_end(self):
    model = Decoder(nnx.Rngs(0))
    with self.assertRaisesRegex(
        TypeError, 'returned 2 items: there is no item 2 to sow'):
      capture(tap(Decoder.__call__, 'layers.0', inputs=False, outputs=2))(
          model, X)

  def test_a_key_of_a_mapping_it_lacks(self):
    model = Decoder(nnx.Rngs(0), as_dict=True)
    with self.assertRaisesRegex(
        TypeError, r"returned a mapping with the keys \['cache', 'x'\]: tap"
        r" outputs='y'"):
      capture(tap(Decoder.__call__, 'layers.0', inputs=False, outputs='y'))(
          model, X)

  def test_a_bad_selector(self):
    with self.assertRaisesRegex(TypeError, 'tap: outputs must be True'):
      tap(Decoder.__call__, 'layers.0', outputs=1.5)


if __name__ == '__main__':
  absltest.main()
