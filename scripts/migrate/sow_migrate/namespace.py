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
"""The names a notebook's cells (or a page's fences) share.

A name imported or a class defined in one cell resolves in the others. An
object made in one cell (``cs = Life(...)``) has, in a later cell, the
class of the last assignment before that cell: cells run in order, and a
notebook that makes ``cs`` three times (CAX's ``00_getting_started``: a
``Life``, then a ``CustomLife``, then a ``CustomNCA``) pops each one in
the cells that follow it. An assignment the codemod cannot read (in a loop,
a tuple, ``global cs`` in a function) leaves the class unknown.
"""

from __future__ import annotations

import libcst as cst


def _code(node: cst.CSTNode) -> str:
  return cst.Module([]).code_for_node(node)


class _Bindings(cst.CSTVisitor):
  """The names a unit binds at top level, in order: (name, class called or
  None when not known)."""

  def __init__(self):
    super().__init__()
    self.found: list[tuple[str, str | None]] = []
    self._depth = 0  # inside compound statements

  def _bind(self, node: cst.CSTNode | None, value: str | None) -> None:
    if isinstance(node, cst.Name):
      self.found.append((node.value, value))
    elif isinstance(node, (cst.Tuple, cst.List)):
      for element in node.elements:
        self._bind(element.value, None)
    elif isinstance(node, cst.StarredElement):
      self._bind(node.value, None)

  def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
    self.found.append((node.name.value, None))
    return False

  def visit_ClassDef(self, node: cst.ClassDef) -> bool:
    self.found.append((node.name.value, None))
    return False

  def visit_Lambda(self, node: cst.Lambda) -> bool:
    del node
    return False

  def visit_Assign(self, node: cst.Assign) -> None:
    made = None
    if (self._depth == 0 and len(node.targets) == 1
        and isinstance(node.value, cst.Call)
        and isinstance(node.value.func, (cst.Name, cst.Attribute))):
      made = _code(node.value.func)
    for target in node.targets:
      self._bind(target.target, made)

  def visit_AugAssign(self, node: cst.AugAssign) -> None:
    self._bind(node.target, None)

  def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
    self._bind(node.target, None)

  def visit_For(self, node: cst.For) -> None:
    self._depth += 1
    self._bind(node.target, None)

  def leave_For(self, original_node: cst.For) -> None:
    self._depth -= 1

  def visit_AsName(self, node: cst.AsName) -> None:
    self._bind(node.name, None)

  def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
    self._bind(node.target, None)

  def visit_If(self, node: cst.If) -> None:
    self._depth += 1

  def leave_If(self, original_node: cst.If) -> None:
    self._depth -= 1

  visit_While, leave_While = visit_If, leave_If
  visit_With, leave_With = visit_If, leave_If
  visit_Try, leave_Try = visit_If, leave_If


class _Globals(cst.CSTVisitor):
  """Names declared ``global`` in any function: rebound who knows when."""

  def __init__(self):
    super().__init__()
    self.names: set[str] = set()

  def visit_Global(self, node: cst.Global) -> None:
    self.names.update(n.name.value for n in node.names)


class Namespace:
  """The shared names of a document's units, as each unit sees them."""

  def __init__(self, parsed, module_name: str):
    self.imports: dict[str, str] = {}
    self.classes: dict[str, list[tuple[int, str]]] = {}
    self.made: dict[str, list[tuple[int, str | None]]] = {}
    declared = _Globals()
    for index, _, module in parsed:
      module.visit(declared)
      for statement in module.body:
        if isinstance(statement, cst.ClassDef):
          name = statement.name.value
          self.classes.setdefault(name, []).append(
              (index, f'{module_name}.unit{index}.{name}'))
        elif isinstance(statement, cst.SimpleStatementLine):
          for small in statement.body:
            self._import(small)
      bindings = _Bindings()
      module.visit(bindings)
      for name, made in bindings.found:
        self.made.setdefault(name, []).append((index, made))
    for name in declared.names:
      self.made.setdefault(name, []).append((-1, None))

  def _import(self, small: cst.BaseSmallStatement) -> None:
    if isinstance(small, cst.Import):
      for alias in small.names:
        name = _code(alias.name)
        local = alias.asname.name.value if alias.asname else name.split(
            '.')[0]
        self.imports[local] = name if alias.asname else name.split('.')[0]
    elif (isinstance(small, cst.ImportFrom) and small.module is not None
          and not small.relative
          and not isinstance(small.names, cst.ImportStar)):
      base = _code(small.module)
      for alias in small.names:
        name = _code(alias.name)
        local = alias.asname.name.value if alias.asname else name
        self.imports[local] = f'{base}.{name}'

  def shared(self, index: int | None = None) -> dict[str, str]:
    """Local name -> qualified name, for unit ``index`` (None: any unit).

    ``'=cs'`` maps to the class called to make ``cs`` in the last
    assignment of an earlier unit, when the codemod can read it.
    """
    found = dict(self.imports)
    for name, definitions in self.classes.items():
      before = [q for i, q in definitions if index is None or i <= index]
      found[name] = (before or [q for _, q in definitions])[-1]
    if index is None:
      return found
    for name, bindings in self.made.items():
      if any(i < 0 for i, _ in bindings):
        continue  # declared global in a function
      before = [made for i, made in bindings if i < index]
      if before and before[-1] is not None:
        found['=' + name] = before[-1]
    return found
