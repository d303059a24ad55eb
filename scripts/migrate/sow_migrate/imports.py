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
"""The ``from flax.nnx.sow import ...`` line, in sorted position."""

from __future__ import annotations

import re

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import RemoveImportsVisitor

MODULE = 'flax.nnx.sow'


def _module_of(statement) -> str | None:
  if not isinstance(statement, cst.SimpleStatementLine):
    return None
  small = statement.body[0]
  if isinstance(small, cst.ImportFrom) and small.module is not None and (
      not small.relative):
    return cst.Module([]).code_for_node(small.module)
  if isinstance(small, cst.Import):
    return cst.Module([]).code_for_node(small.names[0].name)
  return None


def import_line(names: dict[str, str]) -> str:
  """``names``: new function -> local alias."""
  parts = [n if alias == n else f'{n} as {alias}'
           for n, alias in sorted(names.items())]
  return f'from {MODULE} import {", ".join(parts)}\n'


def add_import(module: cst.Module, names: dict[str, str]) -> cst.Module:
  """Inserts the import into the first import block, sorted by module."""
  if not names:
    return module
  statement = cst.parse_statement(import_line(names),
                                  config=module.config_for_parsing)
  body = list(module.body)
  block = [i for i, s in enumerate(body) if _module_of(s) is not None]
  if not block:
    index = 0
    while index < len(body) and _is_docstring_or_future(body[index]):
      index += 1
    body.insert(index, statement)
    return module.with_changes(body=body)
  start = block[0]
  end = start
  while end + 1 < len(body) and _module_of(body[end + 1]) is not None:
    end += 1
  key = MODULE.lower()
  # After the last import that sorts before it (groups separated by blank
  # lines stay intact: stdlib `import os` above keeps its place).
  before = [index for index in range(start, end + 1)
            if (_module_of(body[index]) or '').lower() <= key]
  position = before[-1] + 1 if before else start
  if position == start:
    # Take over the comments above the block, which describe the block.
    first = body[start]
    statement = statement.with_changes(leading_lines=first.leading_lines)
    body[start] = first.with_changes(leading_lines=[])
  body.insert(position, statement)
  return module.with_changes(body=body)


def _is_docstring_or_future(statement) -> bool:
  if not isinstance(statement, cst.SimpleStatementLine):
    return False
  small = statement.body[0]
  if isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString):
    return True
  return isinstance(small, cst.ImportFrom) and _module_of(statement) == (
      '__future__')


def _maybe_unused(code: str, name: str) -> bool:
  # A cheap test before the (slow) scope analysis: is `name` mentioned only
  # on import lines?
  uses = len(re.findall(rf'\b{name}\b', code))
  on_imports = sum(len(re.findall(rf'\b{name}\b', line))
                   for line in code.splitlines()
                   if line.lstrip().startswith(('import ', 'from ')))
  return uses > 0 and uses == on_imports


def remove_unused(module: cst.Module) -> cst.Module:
  """Drops the legacy imports that no longer have a use."""
  code = module.code
  if not any(_maybe_unused(code, name)
             for name in ('nnx', 'Intermediate', 'Perturbation')):
    return module
  context = CodemodContext()
  for module_name, obj in (('flax', 'nnx'), ('flax.nnx', 'Intermediate'),
                           ('flax.nnx', 'Perturbation')):
    RemoveImportsVisitor.remove_unused_import(context, module_name, obj)
  return RemoveImportsVisitor(context).transform_module(module)
