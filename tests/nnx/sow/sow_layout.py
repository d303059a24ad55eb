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

The same test files run in both. In the repository, ``_worktree.py`` at its
root makes ``flax.nnx.sow`` import from the working tree (beside a released
Flax), and our tests are in a folder per group (``GROUPS``): the
transform's in ``tests/nnx/sow/`` (by layer: ``transform/``, ``lift/``,
``api/``), the compat layer's in ``tests/nnx/capture_compat/``, the
codemod's in ``tests/migrate/``, the guides' in ``tests/docs/`` (and the
repository's own tooling's in ``tests/tooling/``, which Flax does not get).
In Flax's tree (the upstream patch series) every group is below
``tests/nnx/sow/``, with no ``_worktree.py``. Either way the helpers (this
file among them) and the ``conftest.py`` of the global-state guard are in
``tests/nnx/sow/``. The guides are this repository's Jupytext Markdown
(``python`` fences), or in Flax's tree MyST notebooks paired with
``.ipynb``, read here as the same Markdown.

A test names another test file or folder only through this module
(``tests_dir``, ``test_module``), never by its path.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import types
import typing as tp

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



def overlay() -> tp.ContextManager[tp.Any]:
  """The compat layer in place for a block: ``capture_compat.install()`` on
  a released Flax (this repository's overlay); in Flax's own tree, whose
  ``module.py`` calls ``capture_compat`` itself, there is nothing to point
  (and the commits before ``install()``'s do not have it)."""
  if IN_FLAX:
    return contextlib.nullcontext()
  from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top
  return capture_compat.install()


# Each group of our tests: its folder in this repository, and in Flax's tree.
GROUPS = {
    'sow': ('tests/nnx/sow', 'tests/nnx/sow'),
    'capture_compat': ('tests/nnx/capture_compat',
                       'tests/nnx/sow/capture_compat'),
    'migrate': ('tests/migrate', 'tests/nnx/sow/migrate'),
    'docs': ('tests/docs', 'tests/nnx/sow/docs'),
}


def tests_dir(group: str) -> str:
  """The folder of a group of ``GROUPS`` in this checkout."""
  return os.path.join(ROOT, *GROUPS[group][IN_FLAX].split('/'))


def test_module(name: str) -> types.ModuleType:
  """The test module ``name`` (``name.py`` in a folder of ``GROUPS``),
  imported as pytest imports it: by its name, with its folder on
  ``sys.path`` (the same module object if pytest imported it already)."""
  if name in sys.modules:
    return sys.modules[name]
  for group in GROUPS:
    for folder, _, files in os.walk(tests_dir(group)):
      if f'{name}.py' in files:
        if folder not in sys.path:
          sys.path.insert(0, folder)
        return importlib.import_module(name)
  raise ModuleNotFoundError(f'no test module {name!r} in {sorted(GROUPS)}')


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
