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
"""Which methods of a class can sow, for calls made before a pop.

``frames = nnx.vmap(lambda cs, s: cs.render(s), ...)(cs, states)`` between
two pops of ``cs`` leaves nothing on ``cs`` when ``render`` cannot sow:
it holds no ``.sow``/``.perturb`` call, passes ``self`` to nothing, and
calls only methods of the instance's class that cannot sow either, or
submodules when no submodule class of the object sows. Anything the
codemod cannot see (a method inherited from a class outside the project,
``super()``) may sow.
"""

from __future__ import annotations

import dataclasses

import libcst as cst


@dataclasses.dataclass
class MethodFact:
  """What one method does with ``self``."""

  sows: bool = False  # holds a .sow/.perturb call (on any object)
  escapes: bool = False  # passes self on, or calls super()
  self_calls: set[str] = dataclasses.field(default_factory=set)  # self.f()
  attribute_calls: bool = False  # self.sub(...), self.sub.f(...)


class Methods:
  """Collector methods recording a :class:`MethodFact` per method.

  The mixing class provides ``_classes`` and ``_class_nodes``.
  """

  _method: MethodFact | None = None
  _self_name: str = 'self'

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    if (self._class_nodes and self._method is None
        and node in self._class_nodes[-1].body.body):
      self._method = self._classes[-1].methods.setdefault(
          node.name.value, MethodFact())
      params = node.params.params
      self._self_name = params[0].name.value if params else 'self'
      self._method_node = node

  def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
    if self._method is not None and original_node is getattr(
        self, '_method_node', None):
      self._method = None

  def record_method_call(self, call: cst.Call) -> None:
    fact = self._method
    if fact is None:
      return
    func, me = call.func, self._self_name
    if isinstance(func, cst.Attribute) and func.attr.value in ('sow',
                                                                'perturb'):
      fact.sows = True
    if any(isinstance(arg.value, cst.Name) and arg.value.value == me
           for arg in call.args):
      fact.escapes = True
    root, depth = func, 0
    while isinstance(root, cst.Attribute):
      root, depth = root.value, depth + 1
    if isinstance(root, cst.Call) and isinstance(
        root.func, cst.Name) and root.func.value == 'super':
      fact.escapes = True
    elif isinstance(root, cst.Name) and root.value == me:
      if depth == 0:
        fact.self_calls.add('__call__')
      elif depth == 1:
        fact.self_calls.add(func.attr.value)
      else:
        fact.attribute_calls = True


def _find(project, cls: str, name: str, depth: int = 0):
  """The MethodFact of ``name`` as ``cls`` resolves it (None: unknown)."""
  fact = project.classes.get(cls)
  if fact is None or depth > 20:
    return None
  if name in fact.methods:
    return fact.methods[name]
  for base in fact.bases:
    found = _find(project, base, name, depth + 1)
    if found is not None:
      return found
  return None


def _ancestors(project, cls: str) -> set[str]:
  seen, todo = set(), [cls]
  while todo:
    current = todo.pop()
    if current not in seen:
      seen.add(current)
      fact = project.classes.get(current)
      todo += list(fact.bases) if fact else []
  return seen


def _submodules_sow(project, root: str) -> bool:
  """Whether a submodule of a ``root`` object may sow."""
  classes = project.closure(root)
  if classes is None:
    return True
  own = _ancestors(project, root)
  return any(s.owner is None or (s.owner in classes and s.owner not in own)
             for s in project.sows)


def may_sow(project, root: str, method: str) -> bool:
  """Whether calling ``method`` on a ``root`` object may sow."""
  seen, todo = set(), [method]
  while todo:
    name = todo.pop()
    if name in seen:
      continue
    seen.add(name)
    fact = _find(project, root, name)
    if fact is None or fact.sows or fact.escapes:
      return True
    if fact.attribute_calls and _submodules_sow(project, root):
      return True
    for called in fact.self_calls:
      if _find(project, root, called) is None:
        # self.sub(...): an attribute, not a method.
        if _submodules_sow(project, root):
          return True
      else:
        todo.append(called)
  return False
