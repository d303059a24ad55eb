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
"""A pop opening a notebook cell, and the cell that ends with the call.

``s = nnx.pop(m, T)`` opening a cell pairs with ``y = m(x)`` ending an
earlier cell: the capture takes the call's place, ``y, s = nnx.capture(m,
T)(x)``, and the pop line goes away. The cells in between (CAX's
``52_growing_nca_es``: a cell rendering the final states) must leave the
pair alone: they do not name ``s``, do not bind or pop ``m``, and use ``m``
only to call methods, which must neither sow nor read ``m``'s attributes
(what the legacy call left there is not there under a capture). Those
calls are kept on the site (``between``) and decided with the project's
classes.
"""

from __future__ import annotations

import libcst as cst

from . import earlier as earlier_lib
from .consumers import Consumers
from .pops import (_assigns, _call_on, _passed_to, _pops,
                   _through_transform)


def _names(node: cst.CSTNode | None) -> set[str]:
  if isinstance(node, cst.Name):
    return {node.value}
  if isinstance(node, (cst.Tuple, cst.List)):
    return {n for e in node.elements for n in _names(e.value)}
  if isinstance(node, cst.StarredElement):
    return _names(node.value)
  return set()


def _between_calls(module: cst.Module, target: str,
                   avoid: set[str]) -> list | None:
  """The calls of ``target`` in a cell between the call and the pop, or
  None when the cell may change what the pair collects."""
  if '.' in target:
    return None
  mentions, shadows = [], []

  class Mentions(cst.CSTVisitor):
    """Every use of ``target`` outside a lambda binding it, and of the
    names the pop assigns."""

    def visit_Lambda(self, node: cst.Lambda) -> None:
      shadows.append(target in {p.name.value for p in node.params.params})

    def leave_Lambda(self, original_node: cst.Lambda) -> None:
      shadows.pop()

    def visit_Name(self, node: cst.Name) -> None:
      if node.value == target and not any(shadows):
        mentions.append(node)
      elif node.value in avoid:
        mentions.append(None)

  module.visit(Mentions())
  if None in mentions:
    return None
  calls = []
  for statement in module.body:
    if _pops(statement, target) or _assigns(statement, target):
      return None
    found = earlier_lib.call_methods(statement, target)
    if any(not method or method.startswith('function:')
           for _, method, _ in found):
      return None
    calls += found
  # Each call names the object once (m(...), m.f(...), F(...)(m, ...)):
  # any other use (nnx.state(m), print(m)) would see what the call sowed.
  if len(calls) != len(mentions):
    return None
  return calls


def link(site, previous: list[tuple[int, str, cst.Module | None]]) -> None:
  """Pairs ``site``, a pop opening its cell, with the call ending an
  earlier cell; ``previous`` holds (index, label, module) of the earlier
  cells, nearest first (module None: the cell does not parse)."""
  target = site.cross_unit
  statement = site.pop_statement_candidate
  if statement is None:
    return
  holder = statement.body[0]
  avoid = (set().union(*(_names(t.target) for t in holder.targets))
           if isinstance(holder, cst.Assign) else set())
  between = []
  for position, (index, label, module) in enumerate(previous):
    if module is None:
      return
    body = list(module.body)
    if body and _call_on(body[-1], target) is not None:
      where = ('earlier in the cell before' if position == 0
               else f'earlier in {label}')
      _pair(site, body, statement, index, where)
      site.between = between
      return
    if position == 0 and body:
      passed = _passed_to(body[-1], target)
      if passed and passed[0] == 'transform':
        site.pop_reasons[:] = [(
            'pop-not-adjacent', f'the cell before calls {target} through '
            f'{passed[1]}; the codemod captures through nnx.vmap and '
            'nnx.split_rngs only: rewrite by hand')]
        return
    calls = _between_calls(module, target, avoid)
    if calls is None:
      return  # the reason stays: no call ends the cell before
    between += [(text, method, f'in {label}', args)
                for text, method, args in calls]


def _pair(site, body, statement, index: int, where: str) -> None:
  site.earlier, site.earlier_closed = earlier_lib.scan(
      reversed(body[:-1]), site.cross_unit, lambda _: where)
  holder = statement.body[0]
  if not (isinstance(holder, cst.Assign) and holder.value is site.node):
    site.pop_reasons[:] = [('pop-form', 'the pop opening this cell is not '
                            's = nnx.pop(m, T)')]
    return
  site.pop_reasons[:] = []
  site.consumer = Consumers(None, [], ('state-use', 'the popped State is read '
                                       'in notebook cells the codemod does not '
                                       'follow'))
  site.pop_call, site.pop_statement = body[-1], statement
  call = _call_on(body[-1], site.cross_unit).value
  site.pop_through = _through_transform(call, site.cross_unit)
  site.pop_call_unit = index
