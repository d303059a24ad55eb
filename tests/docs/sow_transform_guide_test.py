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
"""The main guide (docs_nnx/guides/sow_transform.md): it runs, also as a
notebook with nbclient, as Flax's documentation build executes it, and its
coverage table has a row per test of ``rules_coverage_test.CoverageTest``.
"""

import re

from absl.testing import absltest
import sow_guides
import sow_layout


class SowTransformGuideTest(sow_guides.GuideTestCase):

  def test_guide_runs(self):
    self.assertGuideRuns('sow_transform')

  def test_main_guide_executes_as_a_notebook(self):
    import jupytext  # pylint: disable=g-import-not-at-top
    import nbclient  # pylint: disable=g-import-not-at-top
    import nbformat  # pylint: disable=g-import-not-at-top

    text = sow_layout.guide_text('sow_transform')
    notebook = jupytext.reads(text, fmt='md')
    code_cells = [c for c in notebook.cells if c.cell_type == 'code']
    self.assertLen(code_cells, len(sow_guides.python_blocks(text)))
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
    coverage_test = sow_layout.test_module('rules_coverage_test').CoverageTest
    defined = {n for n in dir(coverage_test) if n.startswith('test_')}
    self.assertEqual(set(tested), defined)


if __name__ == '__main__':
  absltest.main()
