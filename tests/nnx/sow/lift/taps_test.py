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
"""``tap``: the sows of submodule calls by module path (``tap.py``,
``lift/taps.py``), in a frame set up by hand: the jaxpr of a tapped call
holds the sows, the user's classes and modules are left as they were.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import tap
from flax.nnx.sow.lift import class_hooks
from flax.nnx.sow.lift import module_paths
from flax.nnx.sow.lift import taps
from flax.nnx.sow.transform import primitive


X = jnp.ones(2)


class Block(nnx.Module):
  seen: list[type] = []

  def __init__(self, rngs):
    self.linear = nnx.Linear(2, 2, rngs=rngs)

  def __call__(self, x):
    Block.seen.append(type(self))
    return nnx.relu(self.linear(x))

  def helper(self, x):
    return x


class Model(nnx.Module):

  def __init__(self, rngs):
    self.blocks = nnx.List([Block(rngs), Block(rngs)])

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    return x


def in_frame(model, call):
  """``call()`` in a frame whose root is ``model``, as a capture runs it."""
  return taps.run_in_frame(
      module_paths.Frame(), module_paths.roots(None, (model,), {}), call)


def sow_names(closed):
  return [e.params['sow_name'] for e in primitive.sow_equations(closed.jaxpr)]


class TapTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    Block.seen.clear()

  def test_the_calls_of_matching_modules_are_sown_in_call_order(self):
    model = Model(nnx.Rngs(0))
    call = Block.__call__
    tapped = tap(Model.__call__, ('blocks', '*'))
    closed = in_frame(
        model, lambda: jax.make_jaxpr(lambda x: tapped(model, x))(X))
    self.assertEqual(sow_names(closed), [
        ('blocks', 0, '__call__', 'inputs'),
        ('blocks', 0, '__call__', 'output'),
        ('blocks', 1, '__call__', 'inputs'),
        ('blocks', 1, '__call__', 'output'),
    ])
    # Inside the call, each block is of its own class, which holds the
    # tap's hook; after it, the class is as it was and holds no hook.
    self.assertEqual(Block.seen, [Block, Block])
    self.assertIs(type(model.blocks[0]), Block)
    self.assertIs(Block.__call__, call)
    self.assertEqual(class_hooks.held(), {})
    self.assertEqual(module_paths.FRAMES.stack, [])

  def test_inside_the_call_the_class_holds_a_hook_not_the_module(self):
    model = Model(nnx.Rngs(0))
    call = Block.__call__
    inside = {}

    def f(m, x):
      inside['call'] = Block.__call__
      inside['dict'] = dict(vars(m.blocks[0]))
      inside['held'] = class_hooks.held()
      return m(x)

    in_frame(model, lambda: jax.make_jaxpr(
        lambda x: tap(f, ('blocks', 0))(model, x))(X))
    self.assertIsNot(inside['call'], call)
    self.assertIs(inside['call'].__wrapped__, call)
    # (Without install(), nnx.Module holds the refusing __captures__ too.)
    self.assertEqual(
        {k: n for k, n in inside['held'].items() if k[1] != '__captures__'},
        {(Block, '__call__'): 1})
    self.assertEqual(inside['dict'].keys(), vars(model.blocks[0]).keys())
    self.assertIs(Block.__call__, call)

  def test_a_super_call_into_a_tapped_base_is_not_sown_again(self):
    class Wrapped(Block):

      def __call__(self, x):
        return 2 * super().__call__(x)

    class Holder(nnx.Module):

      def __init__(self, rngs):
        self.wrapped = Wrapped(rngs)
        self.block = Block(rngs)

      def __call__(self, x):
        return self.block(self.wrapped(x))

    holder = Holder(nnx.Rngs(0))
    closed = in_frame(holder, lambda: jax.make_jaxpr(
        lambda x: tap(Holder.__call__, ('wrapped',), ('block',))(holder, x)
    )(X))
    # Block's hook (held for `block`) sees Wrapped's super() call with a
    # Wrapped module: that is Wrapped's call, sown once, by its own hook.
    self.assertEqual(sow_names(closed), [
        ('wrapped', '__call__', 'inputs'), ('wrapped', '__call__', 'output'),
        ('block', '__call__', 'inputs'), ('block', '__call__', 'output')])
    self.assertEqual(class_hooks.held(), {})

  def test_an_inherited_method_is_hooked_on_the_class_and_removed(self):
    class Sub(Block):
      pass

    class Holder(nnx.Module):

      def __init__(self, rngs):
        self.sub = Sub(rngs)
        self.block = Block(rngs)

      def __call__(self, x):
        return self.block(self.sub(x))

    holder = Holder(nnx.Rngs(0))
    closed = in_frame(holder, lambda: jax.make_jaxpr(
        lambda x: tap(Holder.__call__, ('sub',))(holder, x))(X))
    # Only the Sub is tapped, though its __call__ is Block's; the Block,
    # whose class defines the method Sub inherits, is not.
    self.assertEqual(sow_names(closed), [
        ('sub', '__call__', 'inputs'), ('sub', '__call__', 'output')])
    self.assertNotIn('__call__', vars(Sub))
    self.assertEqual(class_hooks.held(), {})

  def test_options(self):
    model = Model(nnx.Rngs(0))
    tapped = tap(Model.__call__, ('blocks', 1), ('blocks', 0, 'linear'),
                 inputs=False, tag='taps')
    closed = in_frame(
        model, lambda: jax.make_jaxpr(lambda x: tapped(model, x))(X))
    self.assertEqual(sow_names(closed), [
        ('blocks', 0, 'linear', '__call__', 'output'),
        ('blocks', 1, '__call__', 'output'),
    ])
    self.assertEqual(
        {e.params['tag'] for e in primitive.sow_equations(closed.jaxpr)},
        {'taps'})

  def test_outside_any_staging_it_just_calls(self):
    model = Model(nnx.Rngs(0))
    tapped = tap(Model.__call__, ('blocks', '*'))
    np.testing.assert_array_equal(tapped(model, X), model(X))
    self.assertEqual(sow_names(jax.make_jaxpr(tapped)(model, X)), [])
    self.assertEqual(Block.seen, [Block] * 6)

  def test_classes_are_restored_after_an_exception(self):
    model = Model(nnx.Rngs(0))

    def failing(m, x):
      m(x)
      raise RuntimeError('boom')

    with self.assertRaisesRegex(RuntimeError, 'boom'):
      in_frame(model, lambda: tap(failing, ('blocks', '*'))(model, X))
    self.assertIs(type(model.blocks[0]), Block)
    self.assertEqual(module_paths.FRAMES.stack, [])

  @parameterized.named_parameters(
      ('not_callable', lambda: tap(3, ('a',)), 'expected a callable'),
      ('no_pattern', lambda: tap(len), 'at least one module path pattern'),
      ('empty_string', lambda: tap(len, ''), 'a pattern is a tuple'),
      ('set_pattern', lambda: tap(len, {'blocks'}), 'a pattern is a tuple'),
      ('float_part', lambda: tap(len, ('a', 1.5)), 'a pattern is a tuple'),
      ('method_not_a_name', lambda: tap(len, ('a',), methods=[1]),
       'methods must be method names'),
  )
  def test_bad_arguments(self, make, message):
    with self.assertRaisesRegex(TypeError, message):
      make()


class TappingStateTest(absltest.TestCase):
  """The taps are a ``jax.make_user_context`` value: a jit traces anew for
  each value and reuses the trace for an equal one."""

  def test_the_taps_key_jax_jit(self):
    traces = []

    @jax.jit
    def f(x):
      traces.append(None)
      return x + 1

    f(X)
    frame = module_paths.Frame()
    frame.taps.append(taps.TapSpec(patterns=(('a',),), methods=None,
                                   inputs=False, outputs=True, tag=None))
    for _ in range(2):
      with taps.tapping([frame]):
        f(X)
    f(X)
    self.assertLen(traces, 2)  # once outside, once under the tap
    with taps.tapping([module_paths.Frame()]):  # no taps: as outside
      f(X)
    self.assertLen(traces, 2)


class TapSpecTest(absltest.TestCase):

  def test_patterns_match_whole_paths_with_wildcards(self):
    spec = taps.TapSpec(patterns=(('blocks', '*'), ()), methods=None,
                        inputs=True, outputs=True, tag=None)
    self.assertTrue(spec.matches(('blocks', 3)))
    self.assertTrue(spec.matches(()))
    self.assertFalse(spec.matches(('blocks',)))
    self.assertFalse(spec.matches(('blocks', 3, 'linear')))
    self.assertTrue(taps.TapSpec(None, None, True, True, None).matches(('x',)))

  def test_by_default_the_public_methods_a_class_defines(self):
    spec = taps.TapSpec(patterns=None, methods=None, inputs=True,
                        outputs=True, tag=None)
    self.assertEqual(spec.method_names(Block), {'__call__', 'helper'})
    self.assertTrue(spec.applies(('a',), Block, 'helper'))


if __name__ == '__main__':
  absltest.main()
