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
"""Names a package ``__init__`` re-exports, followed to where they are defined.

``from cax.core import ComplexSystem`` resolves to ``cax.core.ComplexSystem``
while the class is defined (and known) as ``cax.core.cs.ComplexSystem``
because ``cax/core/__init__.py`` says ``from .cs import ComplexSystem``. The
map built here turns the first name into the second. Names under ``flax.``
are left alone: the codemod knows Flax by its public names.
"""

from __future__ import annotations

import libcst as cst

from . import analysis

_MAX_HOPS = 10


def _dotted(node: cst.CSTNode | None) -> str:
  return cst.Module([]).code_for_node(node) if node is not None else ''


def _source_module(package: str, statement: cst.ImportFrom) -> str | None:
  """The absolute module of ``from <module> import ...`` in ``package``."""
  level = len(statement.relative)
  module = _dotted(statement.module)
  if not level:
    return module or None
  parts = package.split('.') if package else []
  if level - 1 > len(parts):
    return None  # beyond the project root
  base = parts[:len(parts) - (level - 1)]
  return '.'.join(base + ([module] if module else [])) or None


def file_aliases(package: str, data: bytes) -> dict[str, str]:
  """``package.Name`` -> ``source.Name`` for the top-level ``from`` imports."""
  try:
    module = cst.parse_module(data)
  except (cst.ParserSyntaxError, UnicodeDecodeError, ValueError):
    return {}  # an unreadable __init__ re-exports nothing we can follow
  found = {}
  for statement in module.body:
    if not isinstance(statement, cst.SimpleStatementLine):
      continue
    for small in statement.body:
      if not isinstance(small, cst.ImportFrom) or isinstance(
          small.names, cst.ImportStar):
        continue
      source = _source_module(package, small)
      if source is None:
        continue
      for alias in small.names:
        name = _dotted(alias.name)
        local = alias.asname.name.value if alias.asname else name
        exported = f'{package}.{local}' if package else local
        defined = f'{source}.{name}'
        if exported != defined:
          found[exported] = defined
  return found


def collect(root: str, paths: list[str], read) -> dict[str, str]:
  """The re-exports of every ``__init__.py`` among ``paths``.

  Args:
    root: the project root, for module names.
    paths: the files of the project.
    read: reads a path's bytes (may raise OSError: that file is skipped).

  Returns:
    A map from a re-exported name to the name where it is defined.
  """
  found = {}
  for path in paths:
    if not path.endswith('__init__.py'):
      continue
    try:
      data = read(path)
    except OSError:
      continue
    if b'import' not in data:
      continue
    package = analysis.module_name(root, path).name
    if package.startswith('flax.') or package == 'flax':
      continue
    found.update(file_aliases(package, data))
  return found


def resolver(aliases: dict[str, str]):
  """A function mapping a qualified name to where it is defined."""

  def resolve(qualified: str | None) -> str | None:
    if qualified is None or not aliases:
      return qualified
    for _ in range(_MAX_HOPS):
      head, rest = qualified, ''
      # The longest re-exported prefix: pkg.Cls.Inner -> pkg.mod.Cls.Inner.
      while head not in aliases and '.' in head:
        head, last = head.rsplit('.', 1)
        rest = f'.{last}{rest}'
      if head not in aliases:
        return qualified
      qualified = aliases[head] + rest
    return qualified

  return resolve
