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
"""Executes every guide in docs_nnx/guides, and the README's example.

Each guide's ```python blocks run in order in one namespace of their own.
The main guide is also converted with jupytext and executed with nbclient,
as Flax's documentation build would.
"""

import contextlib
import glob
import io
import os
import re

from absl.testing import absltest
from absl.testing import parameterized

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
GUIDES = sorted(glob.glob(os.path.join(ROOT, 'docs_nnx', 'guides', '*.md')))
FENCE = re.compile(r'^```python\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def python_blocks(path: str) -> list[str]:
  with open(path) as f:
    return FENCE.findall(f.read())


def run_blocks(path: str) -> str:
  namespace = {'__name__': '__guide__'}
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    for i, block in enumerate(python_blocks(path)):
      exec(compile(block, f'{path}:python-block-{i}', 'exec'), namespace)  # pylint: disable=exec-used
  return out.getvalue()


class GuidesTest(parameterized.TestCase):

  def test_there_are_guides(self):
    names = [os.path.basename(g) for g in GUIDES]
    self.assertIn('sow_transform.md', names)

  @parameterized.parameters(*[os.path.basename(g) for g in GUIDES])
  def test_guide_runs(self, name):
    path = os.path.join(ROOT, 'docs_nnx', 'guides', name)
    self.assertNotEmpty(python_blocks(path), name)
    run_blocks(path)

  def test_readme_example_runs(self):
    run_blocks(os.path.join(ROOT, 'README.md'))

  def test_main_guide_executes_as_a_notebook(self):
    import jupytext  # pylint: disable=g-import-not-at-top
    import nbclient  # pylint: disable=g-import-not-at-top
    import nbformat  # pylint: disable=g-import-not-at-top

    notebook = jupytext.read(
        os.path.join(ROOT, 'docs_nnx', 'guides', 'sow_transform.md'))
    code_cells = [c for c in notebook.cells if c.cell_type == 'code']
    self.assertLen(code_cells, len(python_blocks(
        os.path.join(ROOT, 'docs_nnx', 'guides', 'sow_transform.md'))))
    # The kernel is another process: make it import this working tree too.
    notebook.cells.insert(0, nbformat.v4.new_code_cell('import _worktree'))
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name='python3',
        resources={'metadata': {'path': ROOT}})
    client.execute()
    outputs = [o for c in notebook.cells if c.cell_type == 'code'
               for o in c.get('outputs', [])]
    self.assertFalse([o for o in outputs if o.get('output_type') == 'error'])


if __name__ == '__main__':
  absltest.main()
