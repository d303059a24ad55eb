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
      # Inside Flax 0.12.8's nnx.capture, __captures__ holds what it keeps.
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


if __name__ == '__main__':
  absltest.main()
