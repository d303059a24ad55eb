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
"""The codemod on notebooks and Markdown pages, through its command line.

A notebook's cells (a page's ``python`` fences) share one namespace: a pop
opening a cell pairs with the call ending an earlier one, and the calls in
between decide whether the pair may become a capture. Outputs, metadata and
magics are kept, byte for byte where nothing changed.
"""

import json
import os
import tempfile
import textwrap
import warnings

import numpy as np
import codemod_testing
import sow_layout
from absl.testing import absltest, parameterized

codemod_testing.require_libcst()

# The command line's helpers (write, read, run).
cli = sow_layout.test_module('migrate_sow_test')
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testdata')


class DocumentTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = self.enter_context(tempfile.TemporaryDirectory())

  def test_markdown_and_notebook_through_the_cli(self):
    for name in ('guide.input.md', 'notebook.input.ipynb'):
      source = os.path.join(DATA, 'functional', name)
      target = cli.write(self.dir, 'docs/' + name.replace('.input', ''),
                         cli.read(source))
      cli.run([target], target='functional', mode='write')
      self.assertEqual(cli.read(target),
                       cli.read(source.replace('.input.', '.expected.')))

  def test_notebook_keeps_outputs_metadata_and_magics(self):
    path = os.path.join(DATA, 'functional', 'notebook.expected.ipynb')
    before = json.loads(cli.read(path.replace('.expected.', '.input.')))
    after = json.loads(cli.read(path))
    for old, new in zip(before['cells'], after['cells']):
      self.assertEqual(old['cell_type'], new['cell_type'])
      self.assertEqual(old.get('outputs'), new.get('outputs'))
      self.assertEqual(old['metadata'], new['metadata'])
    self.assertEqual(before['cells'][0], after['cells'][0])
    self.assertEqual(before['cells'][4], after['cells'][4])
    self.assertEqual(after['cells'][1]['source'][0], '%matplotlib inline\n')
    self.assertEqual(before['metadata'], after['metadata'])


def _notebook(cells):
  return json.dumps({
      'cells': [{'cell_type': 'code', 'execution_count': None,
                 'metadata': {}, 'outputs': [],
                 'source': textwrap.dedent(c).splitlines(keepends=True)}
                for c in cells],
      'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}, indent=1) + '\n'


class NotebookTest(parameterized.TestCase):

  CELLS = ("""\
      from flax import nnx
      import jax.numpy as jnp


      class Model(nnx.Module):

        def __call__(self, x):
          self.sow(nnx.Intermediate, 'h', 2 * x)
          return x + 1


      model = Model()
      x = jnp.arange(3.0)
      """, """\
      y = model(x)
      """, """\
      intermediates = nnx.pop(model, nnx.Intermediate)
      h = intermediates['h'].value[0]
      """, """\
      nnx.pop(model, nnx.Intermediate)
      """)

  def _run_cells(self, path):
    with open(path, encoding='utf-8') as f:
      cells = json.load(f)['cells']
    namespace = {}
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', DeprecationWarning)
      for cell in cells:
        exec(''.join(cell['source']), namespace)  # noqa: S102  pylint: disable=exec-used
    return namespace['y'], namespace['h']

  def test_pop_opening_a_cell_pairs_with_the_call_ending_the_previous(self):
    directory = self.enter_context(tempfile.TemporaryDirectory())
    path = cli.write(directory, 'nb.ipynb', _notebook(self.CELLS))
    expected = self._run_cells(path)
    code, summary, _, err = cli.run([path], mode='write',
                                    target='capture', annotate=True)
    self.assertEqual(code, 0, msg=err)
    self.assertEqual(summary.rewritten['pop'], 1)
    with open(path, encoding='utf-8') as f:
      cells = [''.join(c['source']) for c in json.load(f)['cells']]
    self.assertEqual(
        cells[1], 'y, intermediates = nnx.capture(model, nnx.Intermediate)(x)\n')
    self.assertEqual(cells[2], "h = intermediates['h'].value[0]\n")
    # The pop that only clears the module is flagged, in its cell, once.
    self.assertTrue(cells[3].startswith('# TODO(migrate_sow): pop-discarded:'))
    migrated = self._run_cells(path)
    for a, b in zip(expected, migrated):
      np.testing.assert_array_equal(a, b)
    before = cli.read(path)
    code, _, _, _ = cli.run([path], mode='write', target='capture',
                            annotate=True)
    self.assertEqual((code, cli.read(path)), (0, before))

  def test_a_call_in_an_earlier_cell_keeps_the_pop(self):
    # The pop collects what both calls sowed; a capture of the second call
    # alone would not.
    cells = list(self.CELLS)
    cells.insert(1, 'warmup = model(x)\n')
    directory = self.enter_context(tempfile.TemporaryDirectory())
    path = cli.write(directory, 'nb.ipynb', _notebook(cells))
    before = cli.read(path)
    code, summary, _, err = cli.run([path], mode='write', target='capture')
    self.assertEqual((code, cli.read(path)), (0, before))
    self.assertIn('earlier-call: model(...) in an earlier cell may sow', err)
    self.assertEqual(summary.rewritten['pop'], 0)

  RENDER = {
      # render cannot sow: what the pop collects is what the capture does.
      'plain': ('return x * 0', None),
      'calls_self': ('return self(x)', 'it calls .render()'),
      'calls_sowing_submodule': ('return self.sub(x)', 'it calls .render()'),
      'passed_on': ('return x * 0', 'model passed to show()'),
  }

  @parameterized.named_parameters(*[(k, *v) for k, v in RENDER.items()])
  def test_an_earlier_call_of_a_method_that_cannot_sow(self, body, flag):
    head = textwrap.dedent(self.CELLS[0]).replace(
        '    return x + 1\n', '    return x + 1\n\n'
        '  def render(self, x):\n    ' + body + '\n', 1)
    head = head.replace('class Model(nnx.Module):', '''\
class Sub(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 's', x)
    return x


class Model(nnx.Module):

  def __init__(self):
    self.sub = Sub()
''')
    earlier = ('show = print\nshow(model)\n' if 'passed' in (flag or '')
               else 'frames = model.render(x)\n')
    cells = [head, earlier] + list(self.CELLS[1:3])
    directory = self.enter_context(tempfile.TemporaryDirectory())
    path = cli.write(directory, 'nb.ipynb', _notebook(cells))
    expected = self._run_cells(path)
    code, summary, _, err = cli.run([path], mode='write', target='capture')
    self.assertEqual(code, 0, msg=err)
    if flag is None:
      self.assertEqual(summary.rewritten['pop'], 1, msg=err)
      migrated = self._run_cells(path)
      for a, b in zip(expected, migrated):
        np.testing.assert_array_equal(a, b)
    else:
      self.assertEqual(summary.rewritten['pop'], 0)
      self.assertIn(flag, err)
      self.assertIn('earlier-call', err)


if __name__ == '__main__':
  absltest.main()
