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
"""Executes the sow transform's guides, and checks what they list.

Only these guides (``GUIDES``), not others in docs_nnx/guides: in Flax's
tree its own guides are executed by its documentation build. Each guide's
code cells run in order in one namespace of their own; the main guide is
also executed as a notebook with nbclient, as Flax's documentation build
does. The coverage table and the bad-input catalogue list exactly the cases
that ``sow_coverage_test.py`` and ``sow_reliability_test.py`` test.
"""

import contextlib
import importlib.util
import io
import re

from absl.testing import absltest
from absl.testing import parameterized
import sow_coverage_test
import sow_layout
import sow_legacy
import sow_reliability_test

GUIDES = (
    'sow_transform',
    'sow_bad_inputs',
    'capture_behavior_changes',
    'migrate_sow',
    'interventions',
)
# Guides whose code needs a package that Flax does not depend on.
NEEDS = {'migrate_sow': 'libcst'}
# Guides that run beside Flax 0.12.8's own nnx.capture, to compare, here; in
# Flax's tree those passages are left out (scripts/upstream/flax_docs.py).
NEEDS_FLAX_0_12_8 = ('capture_behavior_changes',)
FENCE = re.compile(r'^```python\n(.*?)^```$', re.MULTILINE | re.DOTALL)
TEXT = re.compile(r'^```text\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[str]:
  return FENCE.findall(text)


def run_blocks(blocks: list[str], where: str) -> str:
  namespace = {'__name__': '__guide__'}
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    for i, block in enumerate(blocks):
      exec(compile(block, f'{where}:python-block-{i}', 'exec'), namespace)  # pylint: disable=exec-used
  return out.getvalue()


class GuidesTest(parameterized.TestCase):

  @parameterized.parameters(*GUIDES)
  def test_guide_runs(self, name):
    needed = NEEDS.get(name)
    if needed and importlib.util.find_spec(needed) is None:
      self.skipTest(f'{name} needs {needed}, which is not installed')
    if (name in NEEDS_FLAX_0_12_8 and not sow_layout.IN_FLAX
        and not sow_legacy.is_available()):
      self.skipTest(f'{name}: {sow_legacy.SKIP_REASON}')
    blocks = python_blocks(sow_layout.guide_text(name))
    self.assertNotEmpty(blocks, name)
    run_blocks(blocks, sow_layout.guide_path(name))

  def test_main_guide_executes_as_a_notebook(self):
    import jupytext  # pylint: disable=g-import-not-at-top
    import nbclient  # pylint: disable=g-import-not-at-top
    import nbformat  # pylint: disable=g-import-not-at-top

    text = sow_layout.guide_text('sow_transform')
    notebook = jupytext.reads(text, fmt='md')
    code_cells = [c for c in notebook.cells if c.cell_type == 'code']
    self.assertLen(code_cells, len(python_blocks(text)))
    if not sow_layout.IN_FLAX:
      # The kernel is another process: make it import this working tree.
      notebook.cells.insert(0, nbformat.v4.new_code_cell('import _worktree'))
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name='python3',
        resources={'metadata': {'path': sow_layout.ROOT}})
    client.execute()
    outputs = [o for c in notebook.cells if c.cell_type == 'code'
               for o in c.get('outputs', [])]
    self.assertFalse([o for o in outputs if o.get('output_type') == 'error'])


class CoverageTableTest(absltest.TestCase):
  """The main guide's coverage table has one row per ``CoverageTest``."""

  def test_guide_table_matches_the_tests(self):
    guide = sow_layout.guide_text('sow_transform')
    table = guide.split('<!-- coverage-table -->')[1].strip().split('\n\n')[0]
    rows = [line for line in table.splitlines()[2:] if line.startswith('|')]
    tested = re.findall(r'`CoverageTest\.(test_\w+)`', table)
    self.assertLen(tested, len(rows))
    coverage_test = sow_coverage_test.CoverageTest
    defined = {n for n in dir(coverage_test) if n.startswith('test_')}
    self.assertEqual(set(tested), defined)


def catalogue_sections() -> dict[str, tuple[str, str]]:
  """``case -> (python code, text block)`` from the bad-input catalogue."""
  guide = sow_layout.guide_text('sow_bad_inputs')
  catalogue = guide.split('<!-- catalogue -->')[1]
  sections = re.split(r'^### `(\w+)`\n', catalogue, flags=re.MULTILINE)[1:]
  found = {}
  for case, body in zip(sections[::2], sections[1::2]):
    code, text = python_blocks(body), TEXT.findall(body)
    assert len(code) == 1 and len(text) == 1, case
    found[case] = (code[0], text[0].rstrip('\n'))
  return found


class CatalogueTest(absltest.TestCase):
  """The bad-input guide shows exactly ``sow_reliability_test.CASES``."""

  def test_guide_lists_exactly_the_tested_cases_with_their_errors(self):
    cases = sow_reliability_test.CASES
    sections = catalogue_sections()
    self.assertEqual(list(sections), list(cases))
    for case, (_, text) in sections.items():
      self.assertEqual(text, cases[case][1], case)

  def test_guide_code_prints_the_errors_it_shows(self):
    guide = sow_layout.guide_text('sow_bad_inputs')
    setup = guide.split('<!-- catalogue -->')[0]
    namespace = {'__name__': '__guide__'}
    for block in python_blocks(setup):
      exec(block, namespace)  # pylint: disable=exec-used
    for case, (code, text) in catalogue_sections().items():
      out = io.StringIO()
      with contextlib.redirect_stdout(out):
        exec(code, namespace)  # pylint: disable=exec-used
      self.assertEqual(out.getvalue().rstrip('\n'), text, case)


if __name__ == '__main__':
  absltest.main()
