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
"""The analysis of a file: a ``.py`` file, a notebook or a Markdown page.

``analysis.analyse`` reads a document as code units (``documents``: cells,
``python`` fences), parses each, resolves the names the units share
(``namespace``) and collects their facts; a pop opening a cell pairs with
the call ending an earlier one (``cells``). ``reexports`` follows the names
a package's ``__init__.py`` re-exports to where they are defined.
"""

import json
import textwrap

import codemod_testing
from absl.testing import absltest
import sow_layout

codemod_testing.require_libcst()

# pylint: disable=g-import-not-at-top,wrong-import-position
analysis = codemod_testing.codemod_module('analysis')
documents = codemod_testing.codemod_module('documents')
reexports = codemod_testing.codemod_module('reexports')
# Its helpers: these tests of a module's facts need `earlier.py`, which
# comes with the analysis.
facts_test = sow_layout.test_module('migrate_sow_facts_test')
# pylint: enable=g-import-not-at-top,wrong-import-position


def _notebook(cells):
  """A notebook of code cells, and a Markdown cell at the end."""
  return json.dumps({
      'cells': [{'cell_type': 'code', 'execution_count': None,
                 'metadata': {}, 'outputs': [],
                 'source': textwrap.dedent(c).splitlines(keepends=True)}
                for c in cells] + [
                    {'cell_type': 'markdown', 'metadata': {},
                     'source': ['# Notes']}],
      'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}, indent=1) + '\n'


CELLS = ('''\
    from flax import nnx
    import jax.numpy as jnp

    class Model(nnx.Module):
      def __call__(self, x):
        self.sow(nnx.Intermediate, 'h', 2 * x)
        return x + 1

    model = Model()
    x = jnp.arange(3.0)
    ''', '''\
    y = model(x)
    ''', '''\
    %time z = 1
    intermediates = nnx.pop(model, nnx.Intermediate)
    h = intermediates['h'].value[0]
    ''')


def _sites(result):
  return [(u.index, s) for u in result.units for s in u.facts.sites]


class DocumentsTest(absltest.TestCase):

  def test_a_python_file_is_one_unit_kept_byte_for_byte(self):
    data = b'\xef\xbb\xbfx = 1\r\ny = 2\r\n'
    doc = documents.read_document('m.py', data)
    self.assertEqual((doc.kind, doc.encoding, len(doc.units)),
                     ('py', 'utf-8-sig', 1))
    self.assertEqual(doc.units[0].code, 'x = 1\r\ny = 2\r\n')
    self.assertEqual(doc.render([doc.units[0].code]), data)
    self.assertEqual(doc.render(['x = 3\r\n']), b'\xef\xbb\xbfx = 3\r\n')

  def test_a_notebook_is_its_code_cells_with_magics_masked(self):
    data = _notebook(CELLS).encode('utf-8')
    doc = documents.read_document('nb.ipynb', data)
    self.assertEqual([u.label for u in doc.units],
                     ['cell 1', 'cell 2', 'cell 3'])
    # Masked, the magic parses as Python (a comment).
    compile(doc.units[2].code, 'cell 3', 'exec')
    self.assertNotEqual(doc.units[2].code, textwrap.dedent(CELLS[2]))
    self.assertEqual(documents.unmask_magics(doc.units[2].code),
                     textwrap.dedent(CELLS[2]))
    self.assertEqual(doc.render([u.code for u in doc.units]), data)
    changed = doc.render([doc.units[0].code, 'y = 2 * model(x)\n',
                          doc.units[2].code])
    cells = json.loads(changed)['cells']
    self.assertEqual(cells[1]['source'], ['y = 2 * model(x)\n'])
    self.assertEqual(cells[2]['source'][0], '%time z = 1\n')
    self.assertEqual(cells[3], json.loads(data)['cells'][3])

  def test_a_page_is_its_python_fences_with_their_lines(self):
    data = (b'Text\r\n\r\n```python\r\nx = 1\r\n```\r\n\r\n'
            b'```python\r\ny = 2\r\n```\r\n')
    doc = documents.read_document('page.md', data)
    self.assertEqual([(u.label, u.first_line, u.code) for u in doc.units],
                     [('fence at line 4', 4, 'x = 1\n'),
                      ('fence at line 8', 8, 'y = 2\n')])
    self.assertEqual(doc.render([u.code for u in doc.units]), data)
    self.assertEqual(doc.render(['x = 3\n', 'y = 2\n']),
                     data.replace(b'x = 1', b'x = 3'))


class AnalyseTest(absltest.TestCase):

  def test_module_names_below_the_root(self):
    def name(path):
      found = analysis.module_name('/r', path)
      return found.name, found.package

    self.assertEqual(name('/r/src/pkg/mod.py'), ('pkg.mod', 'pkg'))
    self.assertEqual(name('/r/pkg/__init__.py'), ('pkg', 'pkg'))
    self.assertEqual(name('/r/docs/my-nb.ipynb'), ('docs.my_nb', 'docs'))

  def test_a_python_file_that_does_not_parse_is_an_error(self):
    result = analysis.analyse('m.py', b'def f(:\n', '/r')
    self.assertRegex(result.error, r'^m\.py:1: does not parse')
    self.assertEqual(result.units, [])

  def test_a_fence_that_does_not_parse_is_left_alone(self):
    data = b'```python\nx = 1\n```\n\n```python\n>>> x\n```\n'
    result = analysis.analyse('page.md', data, '/r')
    self.assertIsNone(result.error)
    self.assertLen(result.unit_errors, 1)
    self.assertRegex(result.unit_errors[0],
                     r'^page\.md:6: does not parse .*that fence is left')
    self.assertEqual([u.index for u in result.units], [0])

  def test_the_cells_of_a_notebook_share_their_names(self):
    result = analysis.analyse('nb.ipynb', _notebook(CELLS).encode('utf-8'),
                              '/r', '/r/docs/nb.ipynb')
    (sow_unit, sow), (pop_unit, pop) = _sites(result)
    self.assertEqual((sow_unit, sow.kind, sow.module, sow.unit_label),
                     (0, 'sow', 'docs.nb', 'cell 1'))
    # nnx, imported in the first cell, resolves in the third; so does the
    # class of `model`, made there.
    self.assertEqual((pop_unit, pop.kind, pop.types),
                     (2, 'pop', ('flax.nnx.Intermediate',)))
    self.assertEqual(pop.root, 'docs.nb.unit0.Model')
    self.assertIn('flax.nnx', pop.imports)
    # The pop opens its cell: its call is the one ending the cell before.
    self.assertEqual((pop.cross_unit, pop.pop_call_unit, pop.pop_reasons),
                     ('model', 1, []))

  def test_a_call_in_an_earlier_cell_is_recorded(self):
    cells = (CELLS[0], 'warmup = model(x)\n') + CELLS[1:]
    result = analysis.analyse('nb.ipynb', _notebook(cells).encode('utf-8'),
                              '/r')
    (_, pop), = ((i, s) for i, s in _sites(result) if s.kind == 'pop')
    self.assertEqual(pop.pop_call_unit, 2)
    self.assertEqual([(what, where) for what, _, where, _ in pop.earlier],
                     [('model(...)', 'in an earlier cell')])

  def test_an_object_made_again_has_the_class_of_the_last_assignment(self):
    cells = (CELLS[0], '''\
        class Other(Model):
          pass

        model = Other()
        y = model(x)
        ''', CELLS[2])
    result = analysis.analyse('nb.ipynb', _notebook(cells).encode('utf-8'),
                              '/r', '/r/nb.ipynb')
    (pop,) = (s for _, s in _sites(result) if s.kind == 'pop')
    self.assertEqual(pop.root, 'nb.unit1.Other')


class ReexportsTest(absltest.TestCase):

  def test_names_a_package_re_exports_are_followed(self):
    aliases = reexports.file_aliases(
        'cax.core',
        b'from .cs import ComplexSystem\nfrom flax.nnx import Module\n'
        b'import os\n')
    self.assertEqual(aliases, {
        'cax.core.ComplexSystem': 'cax.core.cs.ComplexSystem',
        'cax.core.Module': 'flax.nnx.Module'})
    resolve = reexports.resolver(
        {'cax.ComplexSystem': 'cax.core.ComplexSystem', **aliases})
    self.assertEqual(resolve('cax.ComplexSystem'),
                     'cax.core.cs.ComplexSystem')
    self.assertEqual(resolve('cax.core.ComplexSystem.step'),
                     'cax.core.cs.ComplexSystem.step')
    self.assertEqual(resolve('other.X'), 'other.X')
    self.assertIsNone(resolve(None))


class PopsWithTheirCallsTest(absltest.TestCase):
  """A pop's call and the calls of its object before it (`earlier.py`)."""

  def test_a_pop_pairs_with_the_call_right_before_it(self):
    result = facts_test._collect('''\
        from flax import nnx

        def pop(model, x):
          y = model(x)
          state = nnx.pop(model, nnx.Intermediate)
          return state['h'][0]

        def through(model, x):
          y = nnx.vmap(lambda m, x: m(x))(model, x)
          state = nnx.pop(model, nnx.Intermediate)
          return state.to_pure_dict()
        ''')
    plain, vmapped = result.sites
    self.assertEqual((plain.pop_reasons, plain.pop_through), ([], False))
    code = facts_test.cst.Module([]).code_for_node(plain.pop_call)
    self.assertEqual(code.strip(), 'y = model(x)')
    self.assertEqual(plain.consumer.names, {'h'})
    self.assertEqual((vmapped.pop_reasons, vmapped.pop_through), ([], True))
    self.assertEqual(vmapped.consumer.reason[0], 'to-pure-dict')
    self.assertEqual(result.state_names, {'state'})

  def test_the_calls_of_the_popped_object_before_its_call(self):
    result = facts_test._collect('''\
        from flax import nnx

        class Block(nnx.Module):
          def __call__(self, x):
            return x

        def run(x):
          model = Block()
          model.render(x)
          show(model)
          y = model(x)
          return nnx.pop(model, nnx.Intermediate)
        ''')
    (site,) = result.sites
    self.assertEqual(site.root, 'pkg.m.Block')
    # Nearest first, back to where `model` is made.
    self.assertEqual([(what, method, where)
                      for what, method, where, _ in site.earlier],
                     [('model passed to show()', 'function:show:0',
                       'at line 10'),
                      ('model.render(...)', 'render', 'at line 9')])
    self.assertEqual(site.earlier[1][3].positional, ('name:x',))
    self.assertTrue(site.earlier_closed)


if __name__ == '__main__':
  absltest.main()
