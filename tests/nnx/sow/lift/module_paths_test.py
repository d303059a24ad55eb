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
"""Module paths: how the arguments of a staged call name their modules, and
the frames and path marks by which a module copy finds its path
(``lift/module_paths.py``), without a staged call."""

import contextlib
import random

import threading

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow.lift import module_paths as paths


class Block(nnx.Module):

  def __call__(self, x):
    return x


class Model(nnx.Module):

  def __init__(self):
    self.blocks = nnx.List([Block(), Block()])
    self.again = self.blocks[0]  # the same module at a second path


@contextlib.contextmanager
def active(frame):
  paths.FRAMES.stack.append(frame)
  try:
    yield frame
  finally:
    assert paths.FRAMES.stack.pop() is frame


class NamingTest(absltest.TestCase):

  def test_the_first_argument_is_the_root_others_are_prefixed(self):
    model, cache, x = Model(), Block(), jnp.ones(2)
    found = paths.roots(None, (model, x), {'cache': cache})
    self.assertEqual([prefix for prefix, _ in found],
                     [(), (1,), ('cache',)])
    found = paths.modules_of_roots(found)
    modules = dict(found)
    self.assertIs(modules[('blocks', 1)], model.blocks[1])
    self.assertIs(modules[()], model)
    self.assertIs(modules[('cache',)], cache)
    # A module at two paths is named once, by the first nnx.iter_modules
    # gives; an array holds no module.
    shared = [path for path, m in found if m is model.blocks[0]]
    self.assertLen(shared, 1)
    self.assertIn(shared[0], (('again',), ('blocks', 0)))
    self.assertNotIn((1,), modules)

  def test_a_module_callable_is_the_root(self):
    model, other = Model(), Block()
    found = paths.roots(model, (other,), {})
    self.assertEqual([prefix for prefix, _ in found], [(), (0,)])
    self.assertIn(((0,), other), paths.modules_of_roots(found))

  def test_sow_names(self):
    self.assertEqual(paths.sow_name(('blocks', 0), 'h'), ('blocks', 0, 'h'))
    self.assertEqual(paths.sow_name(('blocks', np.int64(1)), 'h'),
                     ('blocks', 1, 'h'))
    # A path component that cannot be a name part is named by its repr.
    self.assertEqual(paths.sow_name((1.5,), 'h'), ('1.5', 'h'))


def _random_graph(rng: random.Random, depth: int, shared: list):
  """A random module holding modules, Variables, arrays and scalars in
  attributes, nnx.List/nnx.Dict, lists, tuples and dicts, some modules held
  twice (``shared`` collects candidates)."""

  def value(level):
    kind = rng.randrange(9 if level < depth else 3)
    if kind == 0:
      return nnx.Param(jnp.ones(rng.randrange(1, 3)))
    if kind == 1:
      return rng.choice([1, 2.0, 'a', None, jnp.zeros(2)])
    if kind == 2 and shared:
      return rng.choice(shared)
    if kind == 3:
      return nnx.List([nnx.data(value(level + 1))
                       for _ in range(rng.randrange(3))])
    if kind == 4:
      return [value(level + 1) for _ in range(rng.randrange(3))]
    if kind == 5:
      return tuple(value(level + 1) for _ in range(rng.randrange(3)))
    if kind == 6:
      return {f'k{i}': value(level + 1) for i in range(rng.randrange(3))}
    return module(level + 1)

  def module(level):
    m = nnx.Module()
    for i in range(rng.randrange(1, 4)):
      setattr(m, f'a{rng.randrange(5)}{i}', nnx.data(value(level)))
    shared.append(m)
    return m

  return module(0)


class GraphModulesTest(absltest.TestCase):
  """The module walk that names a call's modules is ``nnx.iter_modules``:
  the same paths, in the same order, a module held twice at its first."""

  def assert_same_walk(self, root):
    want = [(tuple(p), id(m)) for p, m in nnx.iter_modules(root)]
    got = [(p, id(m)) for p, m in paths.modules_of(root)]
    self.assertEqual(got, want)

  def test_random_graphs(self):
    rng = random.Random(0)
    for _ in range(300):
      self.assert_same_walk(_random_graph(rng, 3, []))

  def test_flax_layers(self):
    rngs = nnx.Rngs(0)
    shared = nnx.Linear(2, 2, rngs=rngs)
    layers = nnx.Module()
    layers.seq = nnx.Sequential(nnx.Linear(2, 3, rngs=rngs), nnx.relu,
                                nnx.Linear(3, 2, rngs=rngs))
    layers.attn = nnx.MultiHeadAttention(2, 4, 4, rngs=rngs, decode=False)
    layers.bn = nnx.BatchNorm(4, rngs=rngs)
    layers.conv = nnx.Conv(2, 3, (3,), rngs=rngs)
    layers.lstm = nnx.OptimizedLSTMCell(2, 3, rngs=rngs)
    layers.drop = nnx.Dropout(0.5, rngs=rngs)
    layers.rngs = rngs
    layers.twice = nnx.data([shared, {'again': shared}])
    self.assert_same_walk(layers)
    self.assert_same_walk(Model())
    self.assert_same_walk([Model(), {'b': Block()}])


  def test_a_type_registered_as_a_pytree_later_is_walked_into(self):
    class Box:

      def __init__(self, content):
        self.content = content

    holder = nnx.Module()
    holder.box = nnx.data(Box(Block()))
    self.assert_same_walk(holder)
    self.assertLen(paths.modules_of(holder), 1)  # a Box is a leaf
    jax.tree_util.register_pytree_node(
        Box, lambda b: ((b.content,), None), lambda _, c: Box(*c))
    self.assert_same_walk(holder)
    self.assertLen(paths.modules_of(holder), 2)  # now a pytree node


class FramesTest(absltest.TestCase):

  def test_a_frame_gives_the_paths_of_its_own_roots_only(self):
    block = Block()
    before = dict(vars(block))
    outer, inner = paths.Frame('outer'), paths.Frame('inner')
    outer.start([(('a',), block)])
    inner.start([(('b', 0), block)])
    self.assertEqual(outer.path_of(block), ('a',))
    self.assertEqual(inner.path_of(block), ('b', 0))
    self.assertIsNone(paths.Frame('other').path_of(block))
    # The paths are the frames' own: nothing is written onto the module.
    self.assertEqual(vars(block), before)

  def test_variables_are_found_by_the_arrays_they_hold(self):
    model = Model()
    model.blocks[1].w = nnx.Param(jnp.ones(2))
    frame = paths.Frame('f')
    frame.start([((), model)])
    array = model.blocks[1].w.get_raw_value()
    self.assertEqual(frame.variable_paths(array), [('blocks', 1, 'w')])
    self.assertEqual(frame.holder_path([('w',)], [array]), ('blocks', 1))
    self.assertIsNone(frame.holder_path([('w',)], [jnp.ones(2)]))
    # A Variable given a new value during the call is found by it too.
    model.blocks[1].w.set_value(jnp.zeros(2))
    self.assertEqual(
        frame.variable_paths(model.blocks[1].w.get_raw_value()),
        [('blocks', 1, 'w')])
    self.assertEqual(frame.variable_paths(array), [('blocks', 1, 'w')])

  def test_resolve_finds_the_innermost_frame_holding_the_module(self):
    block, elsewhere = Block(), Block()
    outer, inner = paths.Frame('outer'), paths.Frame('inner')
    outer.start([(('a',), block)])
    with active(outer), active(inner):
      self.assertIs(paths.innermost_functional(), inner)
      self.assertEqual(paths.resolve(block, nnx.Intermediate),
                       (outer, ('a',), True))
      self.assertIsNone(paths.resolve(elsewhere, nnx.Intermediate))
    self.assertIsNone(paths.innermost_functional())

  def test_a_collecting_frame_inside_wins_for_its_types(self):
    class Collecting(paths.Frame):
      functional = False

      def accepts(self, path, var_type):
        return var_type is nnx.Intermediate

    block = Block()
    functional, collecting = paths.Frame('f'), Collecting('c')
    functional.start([(('f',), block)])
    collecting.start([(('c',), block)])
    with active(functional), active(collecting):
      self.assertEqual(paths.resolve(block, nnx.Intermediate),
                       (collecting, ('c',), True))
      # Another type reaches the functional frame outside it.
      self.assertEqual(paths.resolve(block, nnx.Perturbation),
                       (collecting, ('c',), False))

  def test_a_module_no_argument_reaches_is_refused_in_a_frame(self):
    paths.refuse_unreachable(Block(), 'sow')  # no frame: nothing to refuse
    with active(paths.Frame('f')):
      with self.assertRaisesRegex(
          ValueError, 'Module.sow was called on a Block that is not reachable'
          ' from the arguments'):
        paths.refuse_unreachable(Block(), 'sow')

  def test_flax_own_sow_is_refused_until_the_last_call_ends(self):
    block = Block()
    attributes = dict(vars(block))
    first = paths.refuse_legacy_sows()
    second = paths.refuse_legacy_sows()  # another thread's call
    # Refused where this thread's innermost frame is functional; elsewhere
    # (no frame, another thread) a module has no __captures__, as without
    # the hook.
    self.assertFalse(hasattr(block, '__captures__'))
    with active(paths.Frame('f')):
      with self.assertRaisesRegex(ValueError, r'capture_compat\.install\(\)'):
        iter(block.__captures__)
      seen = []
      thread = threading.Thread(
          target=lambda: seen.append(hasattr(block, '__captures__')))
      thread.start()
      thread.join()
      self.assertEqual(seen, [False])
    paths.allow_legacy_sows(first)
    with active(paths.Frame('f')):
      self.assertTrue(hasattr(block, '__captures__'))
    paths.allow_legacy_sows(second)
    with active(paths.Frame('f')):
      self.assertFalse(hasattr(block, '__captures__'))
    self.assertNotIn('__captures__', vars(nnx.Module))
    self.assertEqual(vars(block), attributes)

  def test_flax_own_capture_comes_first(self):
    block = Block()
    held = paths.refuse_legacy_sows()
    try:
      with active(paths.Frame('f')):
        vars(block)['__captures__'] = ()  # as Flax's own nnx.capture does
        self.assertEqual(block.__captures__, ())
        del vars(block)['__captures__']
        self.assertRaises(ValueError, iter, block.__captures__)
    finally:
      paths.allow_legacy_sows(held)


if __name__ == '__main__':
  absltest.main()
