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
"""Tests of scripts/upstream/flax_docs.py, the docs commit of the series.

With ``FLAX_CHECKOUT`` (a Flax checkout, e.g. a clone at 0.12.8), the docs
are applied to a temporary copy of its ``docs_nnx``, ``CHANGELOG.md`` and
``.pre-commit-config.yaml``, and checked against Flax's own files; without
it those tests skip. The rest uses small notebooks made here, and executes
one with ``guide_outputs.py`` (in this Python's kernel), as the docs commit
stores the guides' outputs.
"""

import filecmp
import os
import pathlib
import re
import shutil
import sys
import tempfile

from absl.testing import absltest
import jupytext
import nbformat
import sow_layout

ROOT = pathlib.Path(sow_layout.ROOT)
SCRIPTS = ROOT / 'scripts' / 'upstream'
# What apply_docs reads or edits in a checkout.
COPIED = ('docs_nnx', 'CHANGELOG.md', '.pre-commit-config.yaml')
# The python fences of our guides, as sow_guides.py runs them.
FENCE = re.compile(r'^```python\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def _import_scripts():
  if not (SCRIPTS / 'flax_docs.py').exists():
    raise absltest.SkipTest('scripts/upstream is not in this tree')
  if str(SCRIPTS) not in sys.path:
    sys.path.append(str(SCRIPTS))
  import flax_docs  # pylint: disable=g-import-not-at-top
  import flax_notebooks  # pylint: disable=g-import-not-at-top
  import intermediates_guide  # pylint: disable=g-import-not-at-top
  return flax_docs, flax_notebooks, intermediates_guide


def _tree_files(root: pathlib.Path) -> set[str]:
  return {str(p.relative_to(root)) for p in root.rglob('*') if p.is_file()}


class FlaxCheckoutTest(absltest.TestCase):
  """apply_docs on a copy of the checkout in ``FLAX_CHECKOUT``."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    checkout = os.environ.get('FLAX_CHECKOUT')
    if not checkout:
      raise absltest.SkipTest('FLAX_CHECKOUT is not set')
    cls.docs, cls.nb, cls.guide = _import_scripts()
    cls.pristine = pathlib.Path(checkout)
    cls.tmp = tempfile.TemporaryDirectory()
    cls.checkout = pathlib.Path(cls.tmp.name)
    for name in COPIED:
      source = cls.pristine / name
      if source.is_dir():
        shutil.copytree(source, cls.checkout / name)
      else:
        shutil.copy(source, cls.checkout / name)
    cls.changed = cls.docs.apply_docs(cls.checkout, ROOT)
    cls.pin = cls.nb.jupytext_pin(cls.checkout)

  @classmethod
  def tearDownClass(cls):
    cls.tmp.cleanup()
    super().tearDownClass()

  def guides(self) -> pathlib.Path:
    return self.checkout / 'docs_nnx' / 'guides'

  def test_returns_exactly_the_files_that_differ(self):
    before, after = set(), set()
    for name in COPIED:
      for root, files in ((self.pristine, before), (self.checkout, after)):
        path = root / name
        files |= ({name} if path.is_file() else
                  {f'{name}/{f}' for f in _tree_files(path)})
    differ = {f for f in after - before}
    differ |= {f for f in before & after if not filecmp.cmp(
        self.pristine / f, self.checkout / f, shallow=False)}
    self.assertEmpty(before - after)
    self.assertEqual(set(self.changed), differ)

  def test_writer_reproduces_flax_own_pairs(self):
    # The oracle: Flax's pairs, written by the jupytext its hook pins.
    checked = 0
    guides = self.pristine / 'docs_nnx' / 'guides'
    for ipynb in sorted(guides.glob('*.ipynb')):
      stem = ipynb.with_suffix('')
      if not stem.with_suffix('.md').exists():
        continue
      if nbformat.read(ipynb, as_version=4).nbformat_minor < 5:
        continue  # ids in a 4.2 notebook: nbformat refuses to write it
      with self.subTest(stem.name):
        self.assertEqual(self.nb.in_sync(stem, self.pin), [])
        checked += 1
    self.assertGreaterEqual(checked, 5)

  def test_pairs_are_in_sync(self):
    for name in (*self.docs.GUIDES, 'extracting_intermediates'):
      with self.subTest(name):
        self.assertEqual(self.nb.in_sync(self.guides() / name, self.pin), [])

  def test_new_pairs_are_as_flax_unexecuted_myst_guides(self):
    # flax_gspmd is a MyST pair stored without outputs, as ours are before
    # guide_outputs.py executes them.
    flax_md = (self.pristine / 'docs_nnx' / 'guides' / 'flax_gspmd.md')
    flax_ipynb = nbformat.read(flax_md.with_suffix('.ipynb'), 4)
    header = re.match(r'---\n.*?\n---\n', flax_md.read_text(), re.S).group(0)
    for name in self.docs.GUIDES:
      with self.subTest(name):
        md = (self.guides() / f'{name}.md').read_text()
        self.assertTrue(md.startswith(header + '\n'))
        self.assertEqual(md.count('```{code-cell}\n'),
                         md.count('```{code-cell}'))
        ipynb = nbformat.read(self.guides() / f'{name}.ipynb', 4)
        self.assertEqual(ipynb.metadata, flax_ipynb.metadata)
        self.assertEqual((ipynb.nbformat, ipynb.nbformat_minor),
                         (flax_ipynb.nbformat, flax_ipynb.nbformat_minor))
        self.assertTrue(all(re.fullmatch(r'[0-9a-f]{8}', c.id)
                            for c in ipynb.cells))
        self.assertFalse([c for c in ipynb.cells if c.cell_type == 'code'
                          and (c.outputs or c.execution_count)])

  def test_code_cells_are_our_python_blocks(self):
    for name in self.docs.GUIDES:
      with self.subTest(name):
        text = (ROOT / 'docs_nnx' / 'guides' / f'{name}.md').read_text()
        expected = FENCE.findall(self.docs.OMIT.sub('', text))
        for suffix in ('.md', '.ipynb'):
          notebook = jupytext.read(self.guides() / f'{name}{suffix}')
          self.assertEqual(
              [s + '\n' for s in self.nb.code_sources(notebook)], expected)

  def test_omitted_passages_and_links(self):
    md = (self.guides() / 'sow_transform.md').read_text()
    self.assertNotIn('bench-table', md)
    self.assertNotIn('upstream:', md)
    self.assertNotIn('README.md', md)
    self.assertIn('## Performance', md)
    for name in self.docs.GUIDES:
      text = (self.guides() / f'{name}.md').read_text()
      for target in re.findall(r'\{doc\}`[^`<]*<([^>]+)>`', text):
        self.assertTrue((self.guides() / f'{target}.ipynb').exists(), target)
      self.assertNotRegex(text, r'\]\([a-z_]+\.md')

  def test_toctree_lists_existing_guides(self):
    toctree = (self.checkout / self.docs.TOCTREE).read_text()
    entries = re.findall(r'^\s+(guides/\S+)$', toctree, re.MULTILINE)
    for entry in entries:
      self.assertTrue((self.checkout / 'docs_nnx' / f'{entry}.ipynb').exists()
                      or (self.checkout / 'docs_nnx' / f'{entry}.rst').exists(),
                      entry)
    at = entries.index('guides/extracting_intermediates')
    self.assertEqual(entries[at + 1:at + 1 + len(self.docs.GUIDES)],
                     [f'guides/{g}' for g in self.docs.GUIDES])

  def test_api_page_is_listed_and_names_what_exists(self):
    api = self.checkout / 'docs_nnx' / 'api_reference' / 'flax.nnx'
    index = (api / 'index.rst').read_text()
    for entry in re.findall(r'^  (\S+)$', index, re.MULTILINE):
      self.assertTrue((api / f'{entry}.rst').exists(), entry)
    self.assertIn('  sow\n', index)
    page = (api / 'sow.rst').read_text()
    self.assertTrue(page.startswith('flax.nnx.sow\n---'))
    module = None
    names = []
    for directive, target in re.findall(
        r'^\.\. (currentmodule|autofunction|autoclass):: (\S+)$', page,
        re.MULTILINE):
      if directive == 'currentmodule':
        module = target
      else:
        names.append(f'{module}.{target}')
    self.assertIn('flax.nnx.sow.sow', names)
    self.assertIn('flax.nnx.sow.activations.export', names)
    for name in names:
      if name.startswith('flax.nnx.sow.'):
        package, short = name.rsplit('.', 1)
        exported = (ROOT.joinpath(*package.split('.'))
                    / '__init__.py').read_text()
        self.assertIn(f'import {short} as {short}', exported, name)

  def test_extracting_intermediates_rewritten(self):
    stem = self.guides() / 'extracting_intermediates'
    old = jupytext.read(self.pristine / 'docs_nnx' / 'guides'
                        / 'extracting_intermediates.ipynb')
    new = jupytext.read(stem.with_suffix('.ipynb'))
    for suffix in ('.md', '.ipynb'):
      self.assertNotIn('__captures__', stem.with_suffix(suffix).read_text())
    # Every cell of Flax's that is kept is kept whole: source, id, outputs.
    old_by_id = {c.id: c for c in old.cells}
    kept = [c for c in new.cells if c.id in old_by_id]
    for cell in kept:
      self.assertEqual(cell, old_by_id[cell.id])
    replaced = [c for c in old.cells if c.id not in {k.id for k in kept}]
    self.assertTrue(all(
        '__captures__' in c.source or c.cell_type == 'markdown'
        for c in replaced))
    self.assertLen([c for c in old.cells if '__captures__' in c.source
                    and c.cell_type == 'code'], 3)
    ours = [c for c in new.cells if c.id not in old_by_id]
    fragments = [
        cell for edit in self.guide.EDITS
        for cell in self.guide.fragment_cells(edit.fragment)]
    self.assertEqual([(c.cell_type, c.source) for c in ours],
                     [(c.cell_type, c.source) for c in fragments])
    self.assertLen({c.id for c in new.cells}, len(new.cells))

  def test_every_guide_is_executed_by_the_doc_build(self):
    # conf.py is not edited: none of ours is in nb_execution_excludepatterns.
    self.assertNotIn('docs_nnx/conf.py', self.changed)
    conf = (self.checkout / 'docs_nnx' / 'conf.py').read_text()
    for name in (*self.docs.GUIDES, 'extracting_intermediates'):
      self.assertNotIn(f'guides/{name}', conf)

  def test_test_paths_are_where_the_series_puts_them(self):
    for name in self.docs.GUIDES:
      text = (self.guides() / f'{name}.md').read_text()
      self.assertNotRegex(text, r'tests/(?!nnx/sow/)[\w/]+\.py', name)
    text = (self.guides() / 'capture_behavior_changes.md').read_text()
    self.assertIn('`tests/nnx/sow/capture_compat/`', text)
    self.assertNotIn('flax_capture', text)
    self.assertNotIn('capture_compat.install()\n', text)
    self.assertNotIn('capture_compat.uninstall()\n', text)

  def test_changelog_entry_under_vnext(self):
    lines = (self.checkout / 'CHANGELOG.md').read_text().splitlines()
    vnext = lines.index('vNext')
    release = next(i for i in range(vnext, len(lines))
                   if re.fullmatch(r'\d+\.\d+\.\d+', lines[i]))
    self.assertIn(self.docs.CHANGELOG_ENTRY, lines[vnext:release])
    old = (self.pristine / 'CHANGELOG.md').read_text().splitlines()
    self.assertEqual(len(lines), len(old))  # an empty '-' line filled
    self.assertEqual(
        [i for i, (a, b) in enumerate(zip(old, lines)) if a != b],
        [lines.index(self.docs.CHANGELOG_ENTRY)])

  def test_refuses_to_apply_twice(self):
    with tempfile.TemporaryDirectory() as tmp:
      copy = pathlib.Path(tmp)
      for name in COPIED:
        source = self.checkout / name
        (shutil.copytree if source.is_dir() else shutil.copy)(
            source, copy / name)
      with self.assertRaisesRegex(FileExistsError, 'sow_transform'):
        self.docs.apply_docs(copy, ROOT)


class WithoutCheckoutTest(absltest.TestCase):
  """The pieces that need no Flax checkout."""

  def setUp(self):
    super().setUp()
    self.docs, self.nb, self.guide = _import_scripts()

  def notebook(self, *sources):
    cells = [self.nb.new_cell('code' if s.startswith('code:') else 'markdown',
                              s.removeprefix('code:')) for s in sources]
    notebook = nbformat.v4.new_notebook(cells=cells)
    for i, cell in enumerate(notebook.cells):
      cell['id'] = f'cell{i}'
    return notebook

  def test_guides_join_the_toctree_one_at_a_time_in_order(self):
    # The series adds a guide per commit: each goes after the guides before
    # it in GUIDES that are listed, or after extracting_intermediates.
    with tempfile.TemporaryDirectory() as tmp:
      checkout = pathlib.Path(tmp)
      toctree = checkout / self.docs.TOCTREE
      toctree.parent.mkdir(parents=True)
      toctree.write_text('.. toctree::\n\n   guides/extracting_intermediates'
                         '\n   guides/other\n')
      first, second, third = self.docs.GUIDES[:3]
      for name in (second, first, third):
        self.docs.add_guide_to_toctree(checkout, name)
      self.assertEqual(
          toctree.read_text().split('\n')[2:-1],
          ['   guides/extracting_intermediates', f'   guides/{first}',
           f'   guides/{second}', f'   guides/{third}', '   guides/other'])
      with self.assertRaisesRegex(ValueError, 'already lists'):
        self.docs.add_guide_to_toctree(checkout, first)

  def test_rewrite_fails_loudly_without_the_cells(self):
    notebook = self.notebook('# Title', 'code:x = 1')
    with self.assertRaisesRegex(ValueError, 'How `nnx.capture` Works'):
      self.guide.rewrite(notebook, pathlib.Path('guide'))

  def test_rewrite_fails_on_captures_left(self):
    edits = [(e.first, e.last) for e in self.guide.EDITS]
    notebook = self.notebook(
        '# Title', edits[0][0], 'code:a = 1', edits[0][1], 'code:b = 2',
        edits[1][0], edits[1][1], 'code:print(model.__captures__)')
    with self.assertRaisesRegex(ValueError, r'cells \[\d+\] still mention'):
      self.guide.rewrite(notebook, pathlib.Path('guide'))

  def test_rewrite_replaces_each_run(self):
    edits = [(e.first, e.last) for e in self.guide.EDITS]
    notebook = self.notebook(
        '# Title', edits[0][0], 'code:a = 1', edits[0][1], 'code:b = 2',
        edits[1][0], 'code:c = 3', edits[1][1], 'code:d = 4')
    self.guide.rewrite(notebook, pathlib.Path('guide'))
    fragments = [self.guide.fragment_cells(e.fragment)
                 for e in self.guide.EDITS]
    expected = ['# Title', *[c.source for c in fragments[0]], 'b = 2',
                *[c.source for c in fragments[1]], 'd = 4']
    self.assertEqual([c.source for c in notebook.cells], expected)
    self.assertEqual([c.id for c in notebook.cells if c.id.startswith('cell')],
                     ['cell0', 'cell4', 'cell8'])
    self.assertTrue(all(re.fullmatch(r'[0-9a-f]{8}', c.id)
                        for c in notebook.cells if not c.id.startswith('cell')))

  def test_fragments_are_ours_and_run_free_of_captures(self):
    for edit in self.guide.EDITS:
      cells = self.guide.fragment_cells(edit.fragment)
      self.assertTrue(any(c.cell_type == 'code' for c in cells), edit.fragment)
      self.assertFalse([c for c in cells if '__captures__' in c.source])

  def test_omit_markers(self):
    text = 'a\n<!-- upstream:omit -->\nb\n<!-- upstream:end -->\nc\n'
    self.assertEqual(self.docs.flax_text(text, pathlib.Path('g')), 'a\nc\n')
    self.assertEqual(self.docs.flax_text(
        'a\n\n<!-- upstream:omit -->\nb\n<!-- upstream:end -->\n\nc\n',
        pathlib.Path('g')), 'a\n\nc\n')
    with self.assertRaisesRegex(ValueError, 'unpaired'):
      self.docs.flax_text('a\n<!-- upstream:omit -->\nb\n', pathlib.Path('g'))

  def test_test_paths(self):
    where = pathlib.Path('g')
    shipped = {'tests/nnx/sow/api/a_test.py': 'tests/nnx/sow/api/a_test.py',
               'tests/migrate/b_test.py': 'tests/nnx/sow/migrate/b_test.py'}
    self.assertEqual(
        self.docs.flax_test_paths(
            'in `tests/migrate/b_test.py`, tests/nnx/sow/api/a_test.py and'
            ' `tests/migrate/`', shipped, where),
        'in `tests/nnx/sow/migrate/b_test.py`, tests/nnx/sow/api/a_test.py and'
        ' `tests/nnx/sow/migrate/`')
    for path in ('tests/tooling/readme_test.py', 'tests/tooling/'):
      with self.assertRaisesRegex(ValueError, 'does not ship'):
        self.docs.flax_test_paths(path, shipped, where)
    shipped = self.docs.shipped_tests(ROOT)
    self.assertEqual(shipped['tests/nnx/capture_compat/parity_test.py'],
                     'tests/nnx/sow/capture_compat/parity_test.py')
    self.assertEqual(shipped['tests/nnx/sow/api/capture_test.py'],
                     'tests/nnx/sow/api/capture_test.py')
    self.assertNotIn('tests/tooling/readme_test.py', shipped)

  def test_links(self):
    where = pathlib.Path('g')
    self.assertEqual(
        self.docs.flax_links('see [the guide](sow_transform.md).', where),
        'see {doc}`the guide <sow_transform>`.')
    kept = 'a [site](https://jax.dev) and\n```python\nf[0](c[1])\n```\n'
    self.assertEqual(self.docs.flax_links(kept, where), kept)
    for bad in ('[README](../../README.md#performance)', '[x](other.md)',
                '[`code`](sow_transform.md)'):
      with self.subTest(bad), self.assertRaisesRegex(ValueError, 'resolve'):
        self.docs.flax_links(bad, where)

  def test_pair_written_twice_is_identical_and_in_sync(self):
    text = (ROOT / 'docs_nnx' / 'guides' / 'sow_bad_inputs.md').read_text()
    with tempfile.TemporaryDirectory() as tmp:
      written = []
      for i in range(2):
        notebook = self.nb.as_flax_guide(
            self.nb.read_guide_text(text), 'sow_bad_inputs')
        stem = pathlib.Path(tmp) / str(i) / 'sow_bad_inputs'
        stem.parent.mkdir()
        self.nb.write_pair(notebook, stem, self.nb.MYST, '1.13.8')
        self.assertEqual(self.nb.in_sync(stem, '1.13.8'), [])
        written.append([stem.with_suffix(s).read_text()
                        for s in ('.md', '.ipynb')])
      self.assertEqual(written[0], written[1])



class GuideOutputsTest(absltest.TestCase):
  """guide_outputs.store on a small pair in a tree made here."""

  def setUp(self):
    super().setUp()
    _, self.nb, _ = _import_scripts()
    import guide_outputs  # pylint: disable=g-import-not-at-top
    self.outputs = guide_outputs
    tmp = tempfile.TemporaryDirectory()
    self.addCleanup(tmp.cleanup)
    self.tree = pathlib.Path(tmp.name)
    (self.tree / '.pre-commit-config.yaml').write_text(
        'repos:\n- repo: https://github.com/mwouts/jupytext\n'
        '  rev: v1.13.8\n')
    (self.tree / 'docs_nnx' / 'guides').mkdir(parents=True)
    self.stem = self.tree / 'docs_nnx' / 'guides' / 'g'

  def write(self, *sources: str) -> None:
    cells = [self.nb.new_cell('markdown', '# A guide')]
    cells += [self.nb.new_cell('code', s) for s in sources]
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook = self.nb.as_flax_guide(notebook, 'g')
    notebook.cells[2].id = 'flaxcell'
    notebook.cells[2].outputs = [nbformat.v4.new_output(
        'stream', name='stdout', text='stored\n')]
    notebook.cells[2].execution_count = 7
    self.nb.write_pair(notebook, self.stem, self.nb.MYST, '1.13.8')

  def test_outputs_stored_and_flax_cells_kept(self):
    self.write('x = 40', 'print(x + 2)', 'import os\nprint(os.getcwd())')
    written = self.outputs.store(self.tree, ['g'], keep={'g': {'flaxcell'}})
    self.assertEqual(sorted(written), [self.stem.with_suffix('.ipynb'),
                                       self.stem.with_suffix('.md')])
    notebook = nbformat.read(self.stem.with_suffix('.ipynb'), 4)
    code = [c for c in notebook.cells if c.cell_type == 'code']
    self.assertEqual([c.execution_count for c in code], [1, 7, 3])
    self.assertEqual(code[1].outputs[0].text, 'stored\n')  # kept
    self.assertEqual(code[2].outputs[0].text,
                     str(self.stem.parent) + '\n')  # run in its folder
    self.assertNotIn('kernelspec', notebook.metadata)
    self.assertEqual(notebook.metadata.language_info.name, 'python')
    self.assertIn('```{code-cell} ipython3\n',
                  self.stem.with_suffix('.md').read_text())
    self.assertEqual(self.nb.in_sync(self.stem, '1.13.8'), [])

  def test_streams_joined(self):
    # Flushed in between: the kernel sends two messages to stdout.
    self.write('x = 1', 'print(2)',
               'import sys\nprint("a")\nsys.stdout.flush()\nprint("b")\n'
               'print("e", file=sys.stderr)')
    self.outputs.store(self.tree, ['g'])
    notebook = nbformat.read(self.stem.with_suffix('.ipynb'), 4)
    outputs = notebook.cells[-1].outputs
    self.assertEqual([(o.name, o.text) for o in outputs],
                     [('stdout', 'a\nb\n'), ('stderr', 'e\n')])

  def test_kernel_imports_from_the_tree(self):
    (self.tree / 'flax').mkdir()
    (self.tree / 'flax' / '__init__.py').write_text("WHERE = 'the tree'\n")
    self.write('x = 1', 'print(2)', 'import flax\nprint(flax.WHERE)')
    self.outputs.store(self.tree, ['g'])
    notebook = nbformat.read(self.stem.with_suffix('.ipynb'), 4)
    self.assertEqual(notebook.cells[-1].outputs[0].text, 'the tree\n')

  def test_a_failing_cell_stores_nothing(self):
    self.write('x = 1', 'print(2)', 'raise ValueError("broken")')
    before = [self.stem.with_suffix(s).read_text() for s in ('.md', '.ipynb')]
    with self.assertRaisesRegex(self.outputs.GuideError,
                                'g: code cell 3: ValueError: broken'):
      self.outputs.store(self.tree, ['g'])
    self.assertEqual(
        [self.stem.with_suffix(s).read_text() for s in ('.md', '.ipynb')],
        before)


if __name__ == '__main__':
  absltest.main()
