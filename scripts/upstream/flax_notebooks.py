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
"""Notebook pairs as Flax's ``docs_nnx`` keeps them.

Flax keeps each guide twice, ``NAME.ipynb`` and ``NAME.md``, paired with
jupytext and kept in sync by the ``jupytext --sync`` pre-commit hook at the
version ``.pre-commit-config.yaml`` pins (1.13.8 in Flax 0.12.8). A pair is
in sync when that hook rewrites neither file, so both are written here as
that jupytext writes them: the ``.ipynb`` with nbformat's layout (one-space
indent), the ``.md`` with jupytext's header naming the pinned version.

Our guides are Jupytext Markdown (``python`` fences are code cells, read
regardless of the header's format name); Flax's new guides are MyST
(``{code-cell}``), so ours are written as ``ipynb,md:myst`` pairs.
"""

from __future__ import annotations

import hashlib
import pathlib
import re
import typing as tp

import jupytext
import nbformat

MYST = 'md:myst'
_FRONT_MATTER = re.compile(r'\A---\n.*?\n---\n', re.DOTALL)
_VERSION_LINE = re.compile(r'^(\s*jupytext_version:).*$', re.MULTILINE)
_PIN = re.compile(
    r'repo:\s*https://github\.com/mwouts/jupytext\s*\n\s*rev:\s*v?(\S+)'
)
# Notebook metadata that jupytext adds and its pinned version would not
# (1.19 records the code-cell lexer), so the hook would rewrite the pair.
_NOT_PINNED_METADATA = ('default_lexer',)


def jupytext_pin(checkout: pathlib.Path) -> str:
  """The jupytext version of the checkout's pre-commit hook, e.g. '1.13.8'."""
  config = checkout / '.pre-commit-config.yaml'
  match = _PIN.search(config.read_text())
  if match is None:
    raise ValueError(
        f'{config}: no jupytext hook with a pinned rev; cannot tell which'
        ' jupytext version the notebook pairs must match.'
    )
  return match.group(1)


def read_guide_text(text: str) -> nbformat.NotebookNode:
  """One of our guides: its ``python`` fences as code cells, no metadata."""
  body = _FRONT_MATTER.sub('', text, count=1).lstrip('\n')
  notebook = jupytext.reads(body, fmt='md')
  notebook.metadata = nbformat.NotebookNode()
  return notebook


def cell_id(stem: str, index: int, source: str) -> str:
  """A stable id (8 hex digits, as Flax's cells have): a pair written twice
  from the same text is byte-for-byte the same."""
  digest = hashlib.sha256(f'{stem}\0{index}\0{source}'.encode())
  return digest.hexdigest()[:8]


def new_cell(cell_type: str, source: str) -> nbformat.NotebookNode:
  if cell_type == 'code':
    return nbformat.v4.new_code_cell(source)
  if cell_type == 'markdown':
    return nbformat.v4.new_markdown_cell(source)
  raise ValueError(f'unexpected cell type {cell_type!r}')


def set_missing_ids(notebook: nbformat.NotebookNode, stem: str) -> None:
  """Replaces the random ids nbformat gives new cells by stable ones, and
  gives every cell without an id one."""
  taken = {c.get('id') for c in notebook.cells if not c.get('_new')}
  for index, cell in enumerate(notebook.cells):
    if cell.pop('_new', False) or 'id' not in cell:
      new_id = cell_id(stem, index, cell.source)
      if new_id in taken:
        raise ValueError(f'{stem}: cell id {new_id} collides; change a cell')
      cell['id'] = new_id
      taken.add(new_id)


def mark_new(cell: nbformat.NotebookNode) -> nbformat.NotebookNode:
  cell['_new'] = True
  return cell


def _pinned_text(text: str, pin: str) -> str:
  header = _FRONT_MATTER.match(text)
  if header is None:
    raise ValueError('jupytext wrote no header')
  pinned, count = _VERSION_LINE.subn(rf'\g<1> {pin}', header.group(0))
  if count != 1:
    raise ValueError(f'expected one jupytext_version in {header.group(0)!r}')
  return pinned + text[header.end():]


def text_of(
    notebook: nbformat.NotebookNode, text_format: str, pin: str
) -> str:
  """The ``.md`` of a pair, as the pinned jupytext writes it."""
  return _pinned_text(jupytext.writes(notebook, fmt=text_format), pin)


def ipynb_of(notebook: nbformat.NotebookNode) -> str:
  """The ``.ipynb`` of a pair, as nbformat writes it (Flax's layout)."""
  notebook = nbformat.from_dict(notebook)
  jupytext_metadata = notebook.metadata.get('jupytext', {})
  for key in _NOT_PINNED_METADATA:
    jupytext_metadata.pop(key, None)
  nbformat.validate(notebook)
  return nbformat.writes(notebook) + '\n'


def write_pair(
    notebook: nbformat.NotebookNode,
    stem: pathlib.Path,
    text_format: str,
    pin: str,
) -> list[pathlib.Path]:
  """Writes ``STEM.ipynb`` and ``STEM.md``; returns both paths."""
  ipynb, md = stem.with_suffix('.ipynb'), stem.with_suffix('.md')
  ipynb.write_text(ipynb_of(notebook))
  md.write_text(text_of(notebook, text_format, pin))
  return [ipynb, md]


def as_flax_guide(
    notebook: nbformat.NotebookNode, stem: str
) -> nbformat.NotebookNode:
  """Our guide as a new Flax MyST pair: the metadata Flax's MyST guides
  have before they are executed (``flax_gspmd.ipynb``), stable cell ids."""
  notebook = nbformat.from_dict(notebook)
  notebook.metadata = nbformat.from_dict(
      {'jupytext': {'formats': 'ipynb,md:myst'}}
  )
  notebook.nbformat, notebook.nbformat_minor = 4, 5
  for cell in notebook.cells:
    cell.pop('id', None)
  set_missing_ids(notebook, stem)
  return notebook


def read_pair(stem: pathlib.Path) -> tuple[nbformat.NotebookNode, str]:
  """A Flax pair's notebook (outputs and ids from the ``.ipynb``) and the
  format of its ``.md``; fails if the two are not in sync to begin with."""
  ipynb, md = stem.with_suffix('.ipynb'), stem.with_suffix('.md')
  for path in (ipynb, md):
    if not path.exists():
      raise FileNotFoundError(
          f'{path}: half of the pair {stem.name} is missing'
      )
  notebook = jupytext.read(ipynb)
  formats = notebook.metadata.get('jupytext', {}).get('formats', '')
  text_format = next(
      (f for f in formats.split(',') if f.startswith('md')), None
  )
  if text_format is None:
    raise ValueError(f'{ipynb}: not paired with a .md (formats={formats!r})')
  sources = [(c.cell_type, c.source) for c in jupytext.read(md).cells]
  if sources != [(c.cell_type, c.source) for c in notebook.cells]:
    raise ValueError(
        f'{stem}: the .ipynb and the .md differ; sync them first'
        ' (jupytext --sync)'
    )
  return notebook, text_format


def in_sync(stem: pathlib.Path, pin: str) -> list[str]:
  """What would change if the pinned hook synced ``STEM``; empty if nothing.

  The hook takes the inputs from the text file and the outputs and ids from
  the notebook, then writes both; here both are rewritten the same way.
  """
  notebook, text_format = read_pair(stem)
  problems = []
  md = stem.with_suffix('.md')
  if md.read_text() != text_of(notebook, text_format, pin):
    problems.append(f'{md}: not as jupytext {pin} writes it')
  ipynb = stem.with_suffix('.ipynb')
  if ipynb.read_text() != ipynb_of(notebook):
    problems.append(f'{ipynb}: not as nbformat writes it')
  return problems


def code_sources(notebook: nbformat.NotebookNode) -> tp.Iterator[str]:
  return (c.source for c in notebook.cells if c.cell_type == 'code')
