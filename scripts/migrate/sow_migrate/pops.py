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
"""``nnx.pop``: the call it belongs to, and why it may not become a capture.

``y = m(x)`` right before ``s = nnx.pop(m, T)`` (in the same block, or at
the end of an earlier notebook cell, see ``cells.py``) becomes ``y, s =
nnx.capture(m, T)(x)``; so does a call through ``nnx.vmap`` and
``nnx.split_rngs``. Anything else is a reason, stated as what was found:
the call N statements up, a helper that returns the pop, the object passed
to a function, an earlier call or a later pop of the same object.
"""

from __future__ import annotations

import libcst as cst

from .consumers import Consumers, _code, _full, read_chain, state_reads



class _ThisScopeVisitor(cst.CSTVisitor):
  """Visits one scope's own code: nested lambdas and functions are not
  entered (what they do happens when they are called, not here)."""

  def visit_Lambda(self, node) -> bool:
    del node
    return False

  def visit_FunctionDef(self, node) -> bool:
    del node
    return False


def analyse_pop(collector, site, target) -> None:
  """Finds the call a pop belongs to and how its State is read."""
  if target is None or not isinstance(target, (cst.Name, cst.Attribute)):
    site.pop_reasons.append(('pop-form', 'nnx.pop of an expression'))
    return
  # The expression rooted at the pop: nnx.pop(m, T)['n'].value[-1].
  top = site.node
  while True:
    parent = collector.parent(top)
    if isinstance(parent, (cst.Subscript, cst.Attribute)) and (
        parent.value is top):
      top = parent
    else:
      break
  holder = collector.parent(top)
  statement = collector.parent(holder) if holder is not None else None
  if isinstance(holder, cst.Expr) and top is site.node:
    # Whatever its filters: it reads nothing.
    site.pop_reasons.append(('pop-discarded', 'nnx.pop result discarded: it '
                             'clears intermediates left by calls outside '
                             'nnx.capture; drop it once they are captured'))
    return
  if len(site.types) != 1:
    site.pop_reasons.append(('pop-form', 'nnx.pop with several filters; '
                             'capture each type separately'))
    return
  if not (isinstance(holder, (cst.Assign, cst.Return))
          and holder.value is top
          and isinstance(statement, cst.SimpleStatementLine)
          and len(statement.body) == 1):
    site.pop_reasons.append(('pop-form', 'nnx.pop is not the value of an '
                             'assignment or return statement'))
    return
  site.pop_statement_candidate = statement
  if isinstance(holder, cst.Assign) and len(holder.targets) != 1:
    site.pop_reasons.append(('pop-form', 'chained assignment of nnx.pop'))
    return
  previous = _previous_statement(collector, statement)
  if previous is None and isinstance(collector.parent(statement), cst.Module):
    site.cross_unit = _full(target)  # first statement of a notebook cell
  call_statement = _call_on(previous, _full(target))
  if call_statement is None:
    if site.cross_unit is None:
      site.pop_reasons.append(('pop-not-adjacent', _not_adjacent(
          collector, statement, holder, _full(target))))
    else:  # linked to the previous cell, or explained there
      site.pop_reasons.append(('pop-not-adjacent', 'the cell before does not '
                               f'end with a call of {_code(target)}'))
    return
  # earlier.py builds on this module's helpers: imported here.
  from . import earlier as earlier_lib  # pylint: disable=g-import-not-at-top
  # Decided once the file's functions are known (analysis.py).
  earlier_lib.in_function(collector, site, previous, _full(target))
  later = _later_pop(collector, statement, _full(target))
  if later:
    site.pop_reasons.append(('later-pop', f'{_code(target)} is popped again '
                             f'at line {later}; inside nnx.capture the values '
                             'of other types would not be left for it'))
    return
  small = call_statement
  if isinstance(small, cst.Assign) and top is not site.node:
    site.pop_reasons.append(('pop-form', 'the call result is kept and the pop '
                             'is indexed; write y, s = nnx.capture(...)(...)'))
    return
  site.pop_call, site.pop_statement = previous, statement
  site.pop_through = _through_transform(small.value, _full(target))
  if top is not site.node:
    found, reason = read_chain(collector, site.node)
    if reason is None:
      site.names_read, site.consumer = frozenset({found.name}), Consumers(
          frozenset({found.name}), [found])
    else:
      site.consumer = Consumers(None, [], reason)
  elif isinstance(holder, cst.Return):
    site.consumer = Consumers(None, [], ('escaping-state',
                                         'the popped State is returned'))
  else:
    names, accesses, reason = state_reads(collector, holder.targets[0].target)
    site.consumer = Consumers(names, accesses, reason)


def _not_adjacent(collector, statement, holder, target: str) -> str:
  """Why no call of ``target`` is right before the pop, as found."""
  short = _code(cst.parse_expression(target))
  current, between, pops = statement, 0, 0
  while current is not None and not isinstance(
      current, (cst.FunctionDef, cst.Module, cst.Lambda)):
    block = collector.parent(current)
    body = getattr(block, 'body', None)
    if isinstance(body, (list, tuple)) and current in body:
      for earlier in reversed(list(body)[:list(body).index(current)]):
        if _assigns(earlier, target):
          return (f'{short} is assigned at line '
                  f'{collector.position(earlier)[0]} and not called before '
                  'nnx.pop')
        line = collector.position(earlier)[0]
        if _calls(earlier, target):
          others = (f', {pops} of them nnx.pop taking their types (and '
                    'subclasses) first' if pops else '')
          nested = ('' if current is statement else
                    ' (the pop is in a nested block: it may not run)')
          if not between and current is not statement:
            return (f'{short} is called at line {line} and nnx.pop is in the '
                    'block after it: capture by hand')
          plural = 's' if between != 1 else ''
          return (f'{short} is called at line {line}, with {between} '
                  f'statement{plural} between the call and nnx.pop{others}'
                  f'{nested}: capture by hand')
        passed = _passed_to(earlier, target)
        if passed and passed[0] == 'transform':
          return (f'{short} is called through {passed[1]} at line {line}; '
                  'the codemod captures through nnx.vmap and nnx.split_rngs '
                  'only: rewrite by hand')
        if passed:
          return (f'{short} is passed to {passed[1]}() at line {line}, which '
                  'may call it or read what it sowed: capture by hand')
        between += 1
        pops += 'pop(' in _full(earlier).replace(' ', '')
    current = block
  if isinstance(current, cst.FunctionDef) and isinstance(holder, cst.Return):
    return (f'nnx.pop is what {current.name.value}() returns; {short} runs in '
            'its callers: capture the call there')
  if isinstance(current, cst.FunctionDef):
    return (f'no call of {short} before nnx.pop in {current.name.value}(): '
            'it runs elsewhere; capture the call there')
  return f'no call of {short} before nnx.pop: capture the call by hand'


# Functions that take a module without calling it.
_NOT_CALLING = frozenset({
    'pop', 'state', 'split', 'update', 'graphdef', 'merge', 'iter_modules',
    'iter_graph', 'clone', 'variables', 'print', 'isinstance', 'type', 'id',
    'len', 'getattr', 'hasattr', 'setattr', 'repr', 'str', 'display',
    'Optimizer',  # nnx.Optimizer(model, tx) keeps a reference to the model
})


def _passed_to(node: cst.CSTNode, target: str) -> tuple[str, str] | None:
  """('transform', 'nnx.vmap') for F(...)(target), ('function', 'f') for
  f(target): the call ``node`` passes ``target`` to, if any."""
  found = []

  class Finder(_ThisScopeVisitor):

    def visit_Call(self, call: cst.Call) -> None:
      if any(_full(arg.value) == target for arg in call.args) and not (
          isinstance(call.func, (cst.Name, cst.Attribute))
          and _full(call.func).rsplit('.', 1)[-1] in _NOT_CALLING):
        found.append(call)

  node.visit(Finder())
  if not found:
    return None
  if not isinstance(found[0].func, cst.Call):
    return 'function', _code(found[0].func)
  names = _chain_names(found[0].func)
  return 'transform', ', '.join(
      _code(cst.parse_expression(n)) for n in names) or 'a call'


def _previous_statement(collector, statement):
  block = collector.parent(statement)
  body = getattr(block, 'body', None)
  if isinstance(block, cst.Module):
    body = block.body
  if not isinstance(body, (list, tuple)):
    return None
  index = list(body).index(statement)
  return body[index - 1] if index > 0 else None


def _call_on(statement, target: str):
  """The small statement ``m(x)`` / ``y = m(x)`` / ``m.f(x)``, if it is one."""
  if not (isinstance(statement, cst.SimpleStatementLine)
          and len(statement.body) == 1):
    return None
  small = statement.body[0]
  if isinstance(small, cst.Expr) or (
      isinstance(small, cst.Assign) and len(small.targets) == 1):
    value = small.value
  else:
    return None
  if not isinstance(value, cst.Call):
    return None
  func = _full(value.func)
  if func == target or (func.startswith(target + '.')
                        and func.count('.') == target.count('.') + 1):
    return small
  if _through_transform(value, target):
    return small
  return None


# Transforms a call of the model may go through and still become
# nnx.capture(<transformed function>, T)(m, ...): the values pop and capture
# collect are the same (checked by executing CAX's pattern,
# nnx.split_rngs(...)(nnx.vmap(f, in_axes=(StateAxes, 0)))(m, x)).
_CAPTURABLE_TRANSFORMS = frozenset({'vmap', 'split_rngs'})


def _chain_names(func: cst.CSTNode) -> list[str]:
  """The functions called to build ``func``, as in
  ``nnx.split_rngs(...)(nnx.vmap(...))``."""
  names = []

  class Names(_ThisScopeVisitor):

    def visit_Call(self, call: cst.Call) -> None:
      if isinstance(call.func, (cst.Name, cst.Attribute)):
        names.append(_full(call.func))

  if isinstance(func, (cst.Name, cst.Attribute)):
    return [_full(func)]
  func.visit(Names())
  return list(dict.fromkeys(names))


def _through_transform(call: cst.Call, target: str) -> bool:
  """``F(...)(target, ...)`` with F built only from capturable transforms."""
  if not isinstance(call.func, cst.Call) or not call.args:
    return False
  first = call.args[0]
  if first.keyword is not None or first.star or _full(first.value) != target:
    return False
  names = _chain_names(call.func)
  # nnx.vmap, flax.nnx.vmap or vmap imported from flax.nnx; never jax.vmap,
  # under which the legacy sows do not reach the module at all.
  return bool(names) and all(
      n.rsplit('.', 1)[-1] in _CAPTURABLE_TRANSFORMS
      and n.rsplit('.', 1)[0] in (n, 'nnx', 'flax.nnx') for n in names)


def _neighbours(collector, statement, *, before: bool):
  """The statements around ``statement`` in its function, nearest first:
  those of its block before (or after) it, then those of each enclosing
  block before (or after) the statement holding it."""
  current = statement
  while current is not None and not isinstance(
      current, (cst.FunctionDef, cst.Module, cst.Lambda)):
    block = collector.parent(current)
    body = (block.body
            if isinstance(block, (cst.Module, cst.IndentedBlock)) else None)
    if isinstance(body, (list, tuple)) and current in body:
      body = list(body)
      at = body.index(current)
      yield from reversed(body[:at]) if before else body[at + 1:]
    current = block


def _pops(node: cst.CSTNode, target: str) -> bool:
  """Whether ``node`` holds ``nnx.pop(target, ...)``."""
  code = _full(node).replace(' ', '').replace('nnx.', '')
  return f'pop({target},' in code


def _later_pop(collector, statement, target: str) -> int | None:
  """The line of a later ``nnx.pop(target, ...)`` before another call."""
  for later in _neighbours(collector, statement, before=False):
    if _assigns(later, target) or _calls(later, target):
      return None
    if _pops(later, target):
      return collector.position(later)[0]
  return None


def _calls(node: cst.CSTNode, target: str) -> bool:
  found = []

  class Finder(_ThisScopeVisitor):

    def visit_Call(self, call: cst.Call) -> None:
      func = _full(call.func)
      if func == target or (func.startswith(target + '.') and func.count(
          '.') == target.count('.') + 1) or _through_transform(call, target):
        found.append(call)

  node.visit(Finder())
  return bool(found)


def _assigns(statement, target: str) -> bool:
  if not isinstance(statement, cst.SimpleStatementLine):
    return False
  return any(isinstance(small, cst.Assign) and any(
      _full(t.target) == target for t in small.targets)
             for small in statement.body)
