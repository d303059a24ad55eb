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
"""Where these tests are: in the flax-nnx-sow repository, or in Flax's tree.

The same test files run in both. In the repository they are in
``tests/nnx/``, and ``_worktree.py`` at its root makes ``flax.nnx.sow``
import from the working tree (beside a released Flax); in Flax's tree
(the upstream patch series) they are in ``tests/nnx/sow/``, with no such
file. The guides are this repository's Jupytext Markdown (``python``
fences), or in Flax's tree MyST notebooks paired with ``.ipynb``, read here
as the same Markdown.
"""

from __future__ import annotations

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))


def _find_root() -> str:
  """The checkout: the first parent of this directory with ``flax/nnx/sow``."""
  folder = HERE
  while True:
    if os.path.isdir(os.path.join(folder, 'flax', 'nnx', 'sow')):
      return folder
    parent = os.path.dirname(folder)
    if parent == folder:
      raise FileNotFoundError(f'no flax/nnx/sow above {HERE}')
    folder = parent


ROOT = _find_root()
# This repository's hook that puts its flax/nnx first on flax.nnx.__path__.
WORKTREE = os.path.join(ROOT, '_worktree.py')
IN_FLAX = not os.path.exists(WORKTREE)
# What a child Python process runs first to import the same flax.nnx.sow.
CHILD_PRELUDE = '' if IN_FLAX else 'import _worktree; '


def child_pythonpath(env: dict[str, str]) -> str:
  """``PYTHONPATH`` for a child process that imports these tests' helpers
  (this directory) and, in the repository, ``_worktree``."""
  paths = ([] if IN_FLAX else [ROOT]) + [HERE]
  if env.get('PYTHONPATH'):
    paths.append(env['PYTHONPATH'])
  return os.pathsep.join(paths)


def guide_path(name: str) -> str:
  """The guide ``docs_nnx/guides/NAME.md``."""
  return os.path.join(ROOT, 'docs_nnx', 'guides', f'{name}.md')


_MYST_CELL = re.compile(r'^```\{code-cell\}', re.MULTILINE)


def guide_text(name: str) -> str:
  """The guide as Jupytext Markdown: code cells are ``python`` fences.

  A MyST guide (Flax's ``{code-cell}`` directives) is converted with
  jupytext; its Markdown cells are kept as written.
  """
  with open(guide_path(name), encoding='utf-8') as f:
    text = f.read()
  if not _MYST_CELL.search(text):
    return text
  import jupytext  # pylint: disable=g-import-not-at-top

  notebook = jupytext.reads(text, fmt='md:myst')
  # Else jupytext writes the format the notebook says it came from.
  notebook.metadata.pop('jupytext', None)
  return jupytext.writes(notebook, fmt='md:markdown')
