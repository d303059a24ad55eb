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
"""Readers of sown values that are no pop nor capture are reported.

Code that reads a sown value back off the module (an attribute, a
``getattr``, ``nnx.state(m, nnx.Intermediate)`` after a call,
``__captures__``) finds nothing once the calls run inside a capture: the
codemod rewrites none of them, and reports each, where it is, with why.
Each case is also run, to show that what is reported does read the sown
value.
"""

import json
import warnings

import numpy as np
import codemod_testing
import sow_layout
import sow_legacy
from absl.testing import absltest
from flax import nnx

codemod_testing.require_libcst()

cli = sow_layout.test_module('migrate_sow_test')
ms = cli.ms

MODEL = '''\
from flax import nnx
import jax.numpy as jnp


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'h', 2 * x)
    return x + 1


'''
READERS = MODEL + '''\
def by_getattr(model: Model, x):
  model(x)
  return getattr(model, 'h').value[0]


def by_state(model: Model, x):
  model(x)
  state = nnx.state(model, nnx.Intermediate)
  return state['h'].value[0]


def by_attribute(model: Model, x):
  model(x)
  return model.h[0]


def by_captures(model: Model, x):
  return model.__captures__
'''


class OtherReadersTest(absltest.TestCase):

  def test_each_reader_is_reported_where_it_is(self):
    for target in ('capture', 'functional'):
      with self.subTest(target):
        migrated, flags = ms.migrate_source(READERS, target=target,
                                            path='readers.py')
        self.assertEqual(migrated, READERS)  # nothing rewritten
        found = {(f.line, f.col, f.code) for f in flags}
        self.assertContainsSubset({
            (14, 10, 'attribute-read'),  # getattr(model, 'h')
            (19, 28, 'filter-use'),  # nnx.state(model, nnx.Intermediate)
            (25, 10, 'attribute-read'),  # model.h[0]
            (29, 10, 'captures-read'),  # model.__captures__
        }, found)
        by_line = {f.line: f for f in flags}
        self.assertIn("reads 'h' (sown at readers.py:8) off the module",
                      by_line[14].detail)
        self.assertIn('it may select the sow at readers.py:8',
                      by_line[19].detail)

  def test_what_is_reported_reads_the_sown_value(self):
    namespace = {}
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', DeprecationWarning)
      exec(compile(READERS, 'readers.py', 'exec'), namespace)  # pylint: disable=exec-used
      x = np.arange(3.0, dtype=np.float32)
      for name in ('by_getattr', 'by_state', 'by_attribute'):
        model = namespace['Model']()
        np.testing.assert_array_equal(namespace[name](model, x), 2 * x)

  def test_captures_holds_what_flax_0_12_8s_capture_keeps(self):
    namespace = {}
    x = np.arange(3.0, dtype=np.float32)
    # Skips in Flax's tree with the series, whose nnx.capture is not 0.12.8's.
    with sow_legacy.flax_methods(), warnings.catch_warnings():
      warnings.simplefilter('ignore', DeprecationWarning)
      exec(compile(READERS, 'readers.py', 'exec'), namespace)  # pylint: disable=exec-used
      model = namespace['Model']()
      captured = nnx.capture(namespace['by_captures'], nnx.Intermediate)
      kept, _ = captured(model, x)
    self.assertNotEmpty(kept)

  def test_a_filter_or_attribute_no_sow_reaches_is_not_reported(self):
    source = MODEL.replace("'h'", "'g'") + READERS[len(MODEL):].replace(
        '  return model.__captures__\n', '  return None\n')
    _, flags = ms.migrate_source(source, path='readers.py')
    self.assertEqual([f.code for f in flags if f.code == 'attribute-read'],
                     [])

  def test_state_axes_are_reported_for_the_functional_target_only(self):
    source = MODEL + '''\
def run(model: Model, x):
  axes = nnx.StateAxes({nnx.Intermediate: 0, ...: None})
  return nnx.vmap(lambda m, x: m(x), in_axes=(axes, 0))(model, x)
'''
    _, flags = ms.migrate_source(source, path='axes.py')
    self.assertEmpty(flags)
    _, flags = ms.migrate_source(source, target='functional', path='axes.py')
    self.assertIn((13, 25, 'filter-use'),
                  {(f.line, f.col, f.code) for f in flags})

  def test_readers_in_a_notebook_cell_name_the_cell(self):
    cells = [MODEL, 'model = Model()\nmodel(jnp.ones(2))\n',
             "print(getattr(model, 'h'))\n"]
    notebook = json.dumps({
        'cells': [{'cell_type': 'code', 'metadata': {}, 'outputs': [],
                   'execution_count': None, 'source': c} for c in cells],
        'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5})
    _, flags = ms.migrate_source(notebook, path='nb.ipynb')
    # The read (cell 3, with the call in cell 2), and the sow (cell 1).
    self.assertEqual(
        sorted((f.unit, f.line) for f in flags if f.code == 'attribute-read'),
        [('cell 1', 8), ('cell 3', 1)])



# Readers through a part of the called model: its container, an index, a
# name bound to a block, a loop over the blocks, a computed getattr.
HELD = """\
from flax import nnx
import jax.numpy as jnp

ModuleList = nnx.List


class Block(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'h', 2 * x)
    return x + 1


class Model(nnx.Module):

  def __init__(self):
    self.layers = ModuleList([Block(), Block()])

  def __call__(self, x):
    for layer in self.layers:
      x = layer(x)
    return x


def through_index(model: Model, x):
  model(x)
  return model.layers[0].h.value[0]


def through_name(model: Model, x):
  model(x)
  block = model.layers[1]
  return block.h[0]


def through_loop(model: Model, x):
  model(x)
  return [layer.h.value[0] for layer in model.layers]


def through_getattr(model: Model, x, name='h'):
  model(x)
  return getattr(model.layers[0], name).value[0]
"""


class ReadersThroughPartsTest(absltest.TestCase):

  def test_each_is_reported_where_it_is(self):
    for target in ('capture', 'functional'):
      with self.subTest(target):
        migrated, flags = ms.migrate_source(HELD, target=target,
                                            path='held.py')
        self.assertEqual(migrated, HELD)
        found = {(f.line, f.col, f.code) for f in flags}
        self.assertContainsSubset({
            (27, 10, 'attribute-read'),  # model.layers[0].h.value
            (33, 10, 'attribute-read'),  # block.h[0]
            (38, 11, 'attribute-read'),  # layer.h.value in the loop
            (43, 10, 'may-read'),  # getattr(model.layers[0], name)
        }, found)
        (may,) = (f for f in flags if f.code == 'may-read')
        self.assertIn("it may read 'h' (sown at held.py:10)", may.detail)

  def test_what_is_reported_reads_the_sown_values(self):
    namespace = {}
    x = np.arange(3.0, dtype=np.float32)
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', DeprecationWarning)
      exec(compile(HELD, 'held.py', 'exec'), namespace)  # pylint: disable=exec-used
      for name, expected in (('through_index', 2 * x),
                             ('through_name', 2 * (x + 1)),
                             ('through_loop', [2 * x, 2 * (x + 1)]),
                             ('through_getattr', 2 * x)):
        model = namespace['Model']()
        np.testing.assert_array_equal(namespace[name](model, x), expected,
                                      err_msg=name)

  def test_an_object_never_called_reads_nothing_sown(self):
    # cursor.h[1] on an object that is never called, nor a part of one.
    source = HELD + """\

def unrelated(cursor, other):
  part = other.layers[0]
  return cursor.h[1], part.h[0], getattr(cursor, other)


class Config:

  @classmethod
  def named(cls, name):
    return getattr(cls, name)(), cls()

  def __call__(self, name):
    return getattr(type(self), name), self(name)
"""
    _, flags = ms.migrate_source(source, path='held.py')
    self.assertEmpty([f for f in flags if f.line > 45])

  def test_a_module_level_alias_of_nnx_list_is_the_list(self):
    source = HELD + """\

def popped(model: Model, x):
  y = nnx.vmap(lambda m, v: m(v), in_axes=(None, 0))(model, x)
  return nnx.pop(model, nnx.Intermediate)
"""
    _, flags = ms.migrate_source(source, path='held.py')
    (hazard,) = (f for f in flags if f.code == 'capture-hazard')
    self.assertIn('Model holds an nnx.List and the model runs under '
                  'nnx.vmap', hazard.detail)

  def test_annotate_notes_the_readers_too(self):
    migrated, _ = ms.migrate_source(HELD, path='held.py', annotate=True)
    lines = migrated.splitlines()
    for read in ('  return model.layers[0].h.value[0]', '  return block.h[0]',
                 '  return getattr(model.layers[0], name).value[0]'):
      index = lines.index(read)
      self.assertTrue(lines[index - 1].startswith('  #     '), read)
      note = next(line for line in reversed(lines[:index])
                  if 'TODO(migrate_sow)' in line)
      self.assertRegex(note, r'TODO\(migrate_sow\): (attribute|may)-read: ')
    again, _ = ms.migrate_source(migrated, path='held.py', annotate=True)
    self.assertEqual(again, migrated)


# getattr with a computed name, spelled in ways that show (or do not show)
# which names it may be. Block sows 'h' and 'out'; Model holds layer_0 and
# layer_1.
COMPUTED = """\
import jax.numpy as jnp
from flax import nnx

PREFIX = 'layer_'


class Block(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'h', 2 * x)
    self.sow(nnx.Intermediate, 'out', x + 1)
    return x + 1


class Model(nnx.Module):

  def __init__(self):
    self.layer_0 = Block()
    self.layer_1 = Block()

  def __call__(self, x):
    return self.layer_1(self.layer_0(x))


def by_fstring(model: Model, x, i):
  model(x)
  return getattr(model, f'layer_{i}')


def by_loop(model: Model, x):
  model(x)
  for name in ('layer_0', 'layer_1'):
    part = getattr(model, name)
  return part


def by_format(model: Model, x, i):
  model(x)
  return getattr(model, 'layer_{}'.format(i)), getattr(model, 'layer_%d' % (i,))


def by_module(model: Model, x, name):
  model(x)
  return getattr(jnp, name)(x)


def by_concatenation(model: Model, x):
  model(x)
  name = 'o' + 'ut'
  return getattr(model.layer_0, name).value[0]


def by_parameter(model: Model, x, kind):
  model(x)
  return getattr(model.layer_0, f'{kind}').value[0]


def by_str_call(model: Model, x, i):
  model(x)
  return getattr(model, 'layer_' + str(i))


def by_global(model: Model, x):
  model(x)
  return getattr(model, PREFIX + '0')


def by_branch(model: Model, x, other):
  model(x)
  name = 'layer_0' if other is None else other
  return getattr(model, name)
"""
# (function, its arguments after model and x, reported: the sown names it
# may read, or None).
COMPUTED_CASES = (
    ('by_fstring', (1,), None),
    ('by_loop', (), None),
    ('by_format', (0,), None),
    ('by_module', ('tanh',), None),
    ('by_concatenation', (), ('out',)),
    ('by_parameter', ('h',), ('h', 'out')),
    # Not known to be a str: 'layer_' + x may be x.__radd__('layer_').
    ('by_str_call', (1,), ('h', 'out')),
    # A module-level name may be set from another module.
    ('by_global', (), ('h', 'out')),
    ('by_branch', (None,), ('h', 'out')),
)


class ComputedNamesTest(absltest.TestCase):

  def test_a_name_that_cannot_be_sown_is_not_reported(self):
    _, flags = ms.migrate_source(COMPUTED, path='computed.py')
    lines = COMPUTED.splitlines()
    reported = {}
    for flag in flags:
      if flag.code == 'may-read':
        function = next(line for line in reversed(lines[:flag.line])
                        if line.startswith('def '))
        reported[function[4:function.index('(')]] = flag.detail
    for function, _, names in COMPUTED_CASES:
      with self.subTest(function):
        if names is None:
          self.assertNotIn(function, reported)
          continue
        self.assertIn(function, reported)
        self.assertIn('it may read ' + ', '.join(repr(n) for n in names)
                      + ' (sown at', reported[function])
    self.assertEqual(set(reported), {f for f, _, n in COMPUTED_CASES if n})

  def test_the_names_read_are_the_ones_admitted(self):
    # The oracle: the names each function passes to getattr when it runs,
    # recorded by a getattr of its namespace.
    read = []

    def recording_getattr(obj, name, *default):
      read.append(name)
      return getattr(obj, name, *default)

    namespace = {'getattr': recording_getattr}
    exec(compile(COMPUTED, 'computed.py', 'exec'), namespace)  # pylint: disable=exec-used
    x = np.arange(3.0, dtype=np.float32)
    sown = {'h', 'out'}
    for function, args, names in COMPUTED_CASES:
      with self.subTest(function):
        read.clear()
        with warnings.catch_warnings():
          warnings.simplefilter('ignore', DeprecationWarning)
          namespace[function](namespace['Model'](), x, *args)
        self.assertNotEmpty(read)
        if names is None:
          self.assertEmpty(sown & set(read), read)
        else:
          self.assertContainsSubset(sown & set(read), set(names))

  def test_the_spelling_of_a_computed_name(self):
    other_uses = codemod_testing.codemod_module('other_uses')
    spelling = other_uses.Spelling(None, 'layer_', '_out')
    self.assertTrue(spelling.admits('layer_0_out'))
    self.assertTrue(spelling.admits('layer__out'))
    self.assertFalse(spelling.admits('layer_out'))  # the two overlap
    self.assertFalse(spelling.admits('out'))
    self.assertFalse(other_uses.Spelling(frozenset({'a'})).admits('b'))
    self.assertTrue(other_uses.ANY.admits('anything'))


if __name__ == '__main__':
  absltest.main()
