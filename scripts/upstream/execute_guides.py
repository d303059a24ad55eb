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
"""Executes guide notebooks of a Flax checkout as its doc build would.

Each ``docs_nnx/guides/NAME.ipynb`` runs with nbclient in a ``python3``
kernel of this interpreter, in the notebook's own directory (as myst-nb
runs it), cell by cell, continuing after a failing cell so that every
failure is reported. ``--setup`` code runs first in the kernel, in a cell of
its own that is not stored; to run the guides on released Flax with this
repository's layer, as they run inside the patched Flax::

  python scripts/upstream/execute_guides.py CHECKOUT --overlay NAME...

With ``--write`` the outputs are stored in the ``.ipynb`` as Flax stores
them (no kernelspec, no timing metadata) and the ``.md`` is rewritten to
match (its code cells name the notebook's lexer once it has run). Exits 1 if
any cell failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys
import typing as tp

import nbclient
import nbformat

import flax_notebooks

GUIDES_DIR = pathlib.Path('docs_nnx', 'guides')
OURS = pathlib.Path(__file__).resolve().parents[2]
OVERLAY_SETUP = f"""\
import sys
sys.path.insert(0, {str(OURS)!r})
import _worktree
from flax.nnx import capture_compat
capture_compat.install()
"""


@dataclasses.dataclass
class Run:
  name: str
  code_cells: int
  failed: list[tuple[int, str]]  # (code cell number from 1, error line)

  @property
  def ran(self) -> int:
    return self.code_cells - len(self.failed)


def _error_line(cell: nbformat.NotebookNode) -> str | None:
  for output in cell.get('outputs', []):
    if output.get('output_type') == 'error':
      return f"{output['ename']}: {output['evalue']}".splitlines()[0][:200]
  return None


def execute(
    stem: pathlib.Path, setup: str = '', timeout: int = 600,
    env: dict[str, str] | None = None,
) -> tuple[Run, nbformat.NotebookNode]:
  """Runs ``STEM.ipynb``; returns the run and the executed notebook.

  ``env`` is the kernel's whole environment (default: this process's).
  """
  notebook = nbformat.read(stem.with_suffix('.ipynb'), as_version=4)
  executed = nbformat.from_dict(notebook)
  if setup:
    executed.cells.insert(0, nbformat.v4.new_code_cell(setup))
  client = nbclient.NotebookClient(
      executed, timeout=timeout, kernel_name='python3', allow_errors=True,
      record_timing=False, resources={'metadata': {'path': str(stem.parent)}},
  )
  client.execute(**({'env': env} if env is not None else {}))
  if setup:
    setup_error = _error_line(executed.cells.pop(0))
    if setup_error:
      raise RuntimeError(f'{stem.name}: the setup cell failed: {setup_error}')
  code = [c for c in executed.cells if c.cell_type == 'code']
  failed = [(i, e) for i, c in enumerate(code, 1)
            if (e := _error_line(c)) is not None]
  return Run(stem.name, len(code), failed), executed


def coalesce_streams(cell: nbformat.NotebookNode) -> None:
  """Joins consecutive outputs of one stream (stdout, stderr) into one.

  How a kernel splits a cell's printing into messages depends on when its
  buffer is flushed; joined, the stored notebook is the same on every run.
  """
  outputs = []
  for output in cell.get('outputs', []):
    previous = outputs[-1] if outputs else None
    if (output.output_type == 'stream' and previous is not None
        and previous.output_type == 'stream'
        and previous.name == output.name):
      previous.text += output.text
    else:
      outputs.append(output)
  if 'outputs' in cell:
    cell.outputs = outputs


def store_outputs(
    stem: pathlib.Path, executed: nbformat.NotebookNode, pin: str,
    keep: tp.Collection[str] = (),
) -> list[pathlib.Path]:
  """Writes the executed notebook as Flax keeps its pairs: the kernelspec
  dropped (Flax's nbstripout hook), and the ``.md`` rewritten too, as the
  notebook's language info changes how jupytext writes its code cells.

  The cells whose ids are in ``keep`` keep the outputs and execution count
  they have in the stored notebook (Flax's own cells of a guide we edit);
  in the others, consecutive outputs of a stream are joined.
  """
  stored, text_format = flax_notebooks.read_pair(stem)
  executed.metadata.pop('kernelspec', None)
  kept = {c.id: c for c in stored.cells if c.get('id') in keep}
  for cell in executed.cells:
    if cell.cell_type != 'code':
      continue
    if cell.get('id') in kept:
      cell.outputs = kept[cell.id].outputs
      cell.execution_count = kept[cell.id].execution_count
    else:
      coalesce_streams(cell)
  return flax_notebooks.write_pair(executed, stem, text_format, pin)


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('checkout', type=pathlib.Path)
  parser.add_argument('names', nargs='+', help='guides, e.g. sow_transform')
  parser.add_argument('--setup', default='', help='code run first')
  parser.add_argument('--overlay', action='store_true',
                      help="run with this repository's capture_compat"
                      ' installed (released Flax)')
  parser.add_argument('--write', action='store_true',
                      help='store the outputs in the .ipynb files')
  args = parser.parse_args(argv)
  setup = args.setup + (OVERLAY_SETUP if args.overlay else '')
  failures = 0
  for name in args.names:
    stem = args.checkout / GUIDES_DIR / name
    run, executed = execute(stem, setup)
    failures += len(run.failed)
    print(f'{name}: {run.code_cells} code cells, {run.ran} ran,'
          f' {len(run.failed)} failed')
    for number, error in run.failed:
      print(f'  code cell {number}: {error}')
    if args.write:
      store_outputs(stem, executed, flax_notebooks.jupytext_pin(args.checkout))
  return 1 if failures else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
