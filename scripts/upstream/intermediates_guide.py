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
"""Rewrites Flax's ``extracting_intermediates`` guide for the sow transform.

Flax's guide explains ``nnx.capture`` by printing the ``__captures__``
attribute it used to install on every module; with the sow transform there
is no such attribute, and those cells fail. Two runs of cells are replaced,
each by a fragment of ours in ``guide_edits/`` (Jupytext Markdown): the
section on how ``nnx.capture`` works (up to the ``Metric1`` example, which
stays), and the four steps of the perturbation workflow. Every other cell,
its outputs and its id are kept. Of Flax's text only the phrases that locate
a run are stored here (a heading or the start of a sentence in its first and
in its last cell); the rewrite fails if either is missing or ambiguous, or if
``__captures__`` is still mentioned afterwards (Flax changed the guide).
"""

from __future__ import annotations

import dataclasses
import pathlib

import jupytext
import nbformat

import flax_notebooks

GUIDE = pathlib.Path('docs_nnx', 'guides', 'extracting_intermediates')
FRAGMENTS = pathlib.Path(__file__).parent / 'guide_edits'
LEGACY_ATTRIBUTE = '__captures__'


@dataclasses.dataclass(frozen=True)
class Edit:
  """Replace the cells from the one containing ``first`` to the one
  containing ``last`` (both included) by the cells of ``fragment``."""
  first: str
  last: str
  fragment: str


EDITS = (
    Edit(
        first='## How `nnx.capture` Works',
        last='`Module.sow` looks for the Variable in the `__captures__`',
        fragment='how_capture_works.md',
    ),
    Edit(
        first='**Step One: Initialize *perturbations* of the model**',
        last='**Step Four: Combine intermediate states**',
        fragment='perturbations.md',
    ),
)


def _only_cell(cells, phrase: str, where: pathlib.Path) -> int:
  found = [i for i, cell in enumerate(cells) if phrase in cell.source]
  if len(found) != 1:
    raise ValueError(
        f'{where}: expected exactly one cell containing {phrase!r}, found'
        f' {len(found)} (cells {found}); the guide changed upstream, update'
        ' scripts/upstream/intermediates_guide.py'
    )
  return found[0]


def fragment_cells(name: str) -> list[nbformat.NotebookNode]:
  notebook = jupytext.reads((FRAGMENTS / name).read_text(), fmt='md')
  return [
      flax_notebooks.mark_new(flax_notebooks.new_cell(c.cell_type, c.source))
      for c in notebook.cells
  ]


def rewrite(notebook: nbformat.NotebookNode, where: pathlib.Path) -> None:
  """Applies :data:`EDITS` to the guide's notebook, in place."""
  for edit in EDITS:
    start = _only_cell(notebook.cells, edit.first, where)
    stop = _only_cell(notebook.cells, edit.last, where)
    if stop < start:
      raise ValueError(
          f'{where}: {edit.last!r} comes before {edit.first!r}; the guide'
          ' changed upstream'
      )
    notebook.cells[start:stop + 1] = fragment_cells(edit.fragment)
  left = [i for i, c in enumerate(notebook.cells)
          if LEGACY_ATTRIBUTE in c.source]
  if left:
    raise ValueError(
        f'{where}: cells {left} still mention {LEGACY_ATTRIBUTE}, which the'
        ' sow transform does not have; the guide changed upstream'
    )
  flax_notebooks.set_missing_ids(notebook, GUIDE.name)


def apply(checkout: pathlib.Path, pin: str) -> list[pathlib.Path]:
  """Rewrites the checkout's pair in place; returns the two paths."""
  stem = checkout / GUIDE
  notebook, text_format = flax_notebooks.read_pair(stem)
  rewrite(notebook, stem)
  return flax_notebooks.write_pair(notebook, stem, text_format, pin)
