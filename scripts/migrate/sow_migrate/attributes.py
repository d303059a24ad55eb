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
"""What an attribute set from a parameter may hold: a module passed in?

``self.size = size`` with ``size: int`` holds no module, nor does
``self.fn = fn`` with ``fn: Callable[...]`` (a function is assumed),
nor ``self.weight = rule_params.weight`` with ``rule_params`` annotated as
a dataclass. The annotation's names are recorded here; which of them may
be modules is decided with the project's classes
(``decide.Project.opaque``): a class that holds a module passed in may
hold anything.
"""

from __future__ import annotations

import libcst as cst
from libcst import metadata

_CALLABLES = frozenset({'typing.Callable', 'collections.abc.Callable'})


def passed_in_types(collector, node: cst.CSTNode) -> set[str]:
  """What ``self.x = node`` may hold: the names in the annotation of the
  parameter ``node`` (``size: int``, ``fn: Callable | None``);
  ``'unannotated'`` or ``'unknown'`` when the codemod cannot tell (decide
  knows which of them may be modules); nothing for ``None``; ``'value'``
  for ``Any`` with a default that is no module."""
  if isinstance(node, cst.Name) and node.value in _CONSTANTS:
    return set()  # self.norm = None: holds nothing (yet)
  if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
    # rule_params.weight: a field of a parameter, judged by its type.
    node = node.value
  if not isinstance(node, cst.Name):
    return {'unknown'}
  scope = collector.get_metadata(metadata.ScopeProvider, node, None)
  assignments = [a for a in scope[node.value]
                 if isinstance(a, metadata.Assignment)] if scope else []
  if len(assignments) != 1 or not isinstance(assignments[0].node,
                                              cst.Param):
    return {'unknown'}
  annotation = assignments[0].node.annotation
  if annotation is None:
    return {'unannotated'}
  names, qnames = [], collector.qnames

  class Names(cst.CSTVisitor):

    def visit_Name(self, name: cst.Name) -> None:
      names.append(name)

    def visit_Attribute(self, attribute: cst.Attribute) -> bool:
      names.append(attribute)
      return False

    def visit_Subscript(self, subscript: cst.Subscript) -> bool:
      # Callable[[A], B] holds a function, whatever A and B are.
      if qnames(subscript.value) & _CALLABLES:
        names.append(subscript.value)
        return False
      return True

  annotation.annotation.visit(Names())
  found = set()
  for name in names:
    qualified = collector.qnames(name)
    found |= qualified or {'unknown'}
  if found and found <= _ANYTHING and _no_module(collector,
                                                 assignments[0].node.default):
    # `dtype: Any = jnp.float32`: `Any` says nothing, the default says what
    # the parameter is for (a value of a package that makes no modules).
    return {'value'}
  return found or {'unknown'}


_CONSTANTS = frozenset({'None', 'True', 'False'})
_ANYTHING = frozenset({'typing.Any', 'builtins.object'})


def _no_module(collector, default: cst.BaseExpression | None) -> bool:
  """Whether the default value ``default`` is evidently no module: a
  literal, or a name of a package that makes none (``jnp.float32``)."""
  from . import hazards  # pylint: disable=g-import-not-at-top
  if default is None:
    return False
  if isinstance(default, (cst.Integer, cst.Float, cst.SimpleString)) or (
      isinstance(default, cst.Name) and default.value in _CONSTANTS):
    return True
  if not isinstance(default, (cst.Name, cst.Attribute)):
    return False
  names = collector.qnames(default)
  return bool(names) and all(
      n.split('.', 1)[0] != 'flax' and hazards.not_modules(n.split('.', 1)[0])
      for n in names)
