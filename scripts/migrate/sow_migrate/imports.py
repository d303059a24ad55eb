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
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor

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


def request(context: CodemodContext, names: dict[str, str]) -> None:
  """Asks ``AddImportsVisitor`` for ``from flax.nnx.sow import ...``."""
  for name, alias in sorted(names.items()):
    AddImportsVisitor.add_needed_import(context, MODULE, name,
                                        None if alias == name else alias)


def add_needed(module: cst.Module, context: CodemodContext) -> cst.Module:
  """Adds the imports asked for in ``context``, in sorted position.

  ``AddImportsVisitor`` extends an existing ``from flax.nnx.sow import``
  line or appends a new one to the first import block; a new line is then
  moved to where it sorts in its block.
  """
  if not context.scratch.get(AddImportsVisitor.CONTEXT_KEY):
    return module
  before = _count_ours(module.body)
  old_body = module.body
  module = AddImportsVisitor(context).transform_module(module)
  context.scratch.pop(AddImportsVisitor.CONTEXT_KEY, None)
  if _count_ours(module.body) == before:
    return _sort_names(module)  # added to an existing line
  body = list(module.body)
  added = _new_index(body, before)
  if added < len(old_body):
    # AddImportsVisitor puts a blank line after the import block; the
    # statement there keeps its own lines.
    body[added + 1] = body[added + 1].with_changes(
        leading_lines=old_body[added].leading_lines)
  statement = body.pop(added)
  return module.with_changes(body=_insert_sorted(body, statement, added))


def _sort_names(module: cst.Module) -> cst.Module:
  # AddImportsVisitor puts the names it adds first: keep the line sorted.
  body = list(module.body)
  for index, statement in enumerate(body):
    if not _is_ours(statement) or isinstance(statement.body[0].names,
                                              cst.ImportStar):
      continue
    names = list(statement.body[0].names)
    ordered = sorted(names, key=lambda a: cst.Module([]).code_for_node(a.name))
    if ordered != names:
      ordered = [a.with_changes(comma=names[i].comma)
                 for i, a in enumerate(ordered)]
      body[index] = statement.with_changes(
          body=[statement.body[0].with_changes(names=ordered)])
  return module.with_changes(body=body)


def _is_import(statement) -> bool:
  return isinstance(statement, cst.SimpleStatementLine) and isinstance(
      statement.body[0], (cst.Import, cst.ImportFrom))


def _is_ours(statement) -> bool:
  return _module_of(statement) == MODULE and isinstance(
      statement.body[0], cst.ImportFrom)


def _count_ours(body) -> int:
  return sum(1 for s in body if _is_ours(s))


def _new_index(body, before: int) -> int:
  # AddImportsVisitor appends its line after the existing ones of the
  # block: the (before + 1)-th line of ours.
  seen = 0
  for index, statement in enumerate(body):
    if _is_ours(statement):
      seen += 1
      if seen == before + 1:
        return index
  raise AssertionError('the added import is missing')


def _insert_sorted(body, statement, index: int):
  """Inserts ``statement`` where it sorts in the import block at ``index``
  (groups separated by blank lines stay: ``import os`` above keeps its
  place)."""
  start = index
  while start > 0 and _is_import(body[start - 1]):
    start -= 1
  end = index  # one past the block
  while end < len(body) and _is_import(body[end]):
    end += 1
  if start == end:  # a block of its own
    body.insert(index, statement)
    return body
  key = MODULE.lower()
  # Relative imports (no module name here) sort after absolute ones.
  before = [i for i in range(start, end)
            if (_module_of(body[i]) or '~').lower() <= key]
  position = before[-1] + 1 if before else start
  if position == start:
    # Take over the comments above the block, which describe the block.
    first = body[start]
    statement = statement.with_changes(leading_lines=first.leading_lines)
    body[start] = first.with_changes(leading_lines=[])
  body.insert(position, statement)
  return body


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
