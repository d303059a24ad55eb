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
"""How the State returned by ``nnx.capture``/``nnx.pop`` is read.

The legacy State is nested by module path, its leaves are ``Intermediate``
Variables holding a tuple; the functional ``capture`` returns a flat dict
``{name: tuple}``. A root-level read ``s['n'][i]`` means the same in both;
``s['n'].value`` and ``s.n`` are mapped; anything else (a path, an
iteration, the State passed on) is a reason not to migrate.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
from libcst import metadata

_STATE_METHODS = {
    'to_pure_dict': 'to-pure-dict', 'flat_state': 'to-flat-state',
    'items': 'state-use', 'keys': 'state-use', 'values': 'state-use',
    'filter': 'state-use', 'split': 'state-use', 'get': 'state-use',
}


@dataclasses.dataclass(eq=False)
class Access:
  """One read ``s['n']...`` of the State: ``node`` is what gets replaced."""

  name: str
  node: cst.CSTNode  # s['n'].value, s.n.value, s.n or s['n']
  value: bool  # followed by .value


@dataclasses.dataclass(eq=False)
class Consumers:
  names: frozenset[str] | None  # None: unknown (a reason is set)
  accesses: list[Access]
  reason: tuple[str, str] | None = None
  call: cst.Call | None = None  # nnx.capture(f, T)(x): the outer call


def _code(node: cst.CSTNode) -> str:
  text = cst.Module([]).code_for_node(node)
  return text if len(text) <= 50 else text[:47] + '...'


def _full(node: cst.CSTNode) -> str:
  return cst.Module([]).code_for_node(node)


def _literal_key(node: cst.Subscript) -> str | None:
  if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
    return None
  value = node.slice[0].slice.value
  if isinstance(value, cst.SimpleString) and isinstance(
      value.evaluated_value, str):
    return value.evaluated_value
  return None


def read_chain(collector, top: cst.CSTNode):
  """Classifies the expression rooted at ``top`` (the State).

  Returns:
    (access, None) for a root-level read, or (None, (code, detail)).
  """
  parent = collector.parent(top)
  name, node = None, top
  if isinstance(parent, cst.Subscript) and parent.value is top:
    name, node = _literal_key(parent), parent
    if name is None:
      return None, ('state-use', f'the State is indexed with a computed key '
                    f'in {_code(parent)}')
  elif isinstance(parent, cst.Attribute) and parent.value is top:
    attr = parent.attr.value
    if attr in _STATE_METHODS:
      return None, (_STATE_METHODS[attr], f'State.{attr}() over the captured '
                    'values; read s[name] instead')
    name, node = attr, parent
    collector.handled.add(parent)  # not an attribute read of the module
  elif isinstance(parent, cst.Arg):
    call = collector.parent(parent)
    func = _code(call.func) if isinstance(call, cst.Call) else '?'
    if func.startswith(('jax.tree', 'jax.tree_util')):
      return None, ('tree-leaves', f'{func}() over the captured State')
    if 'to_flat_state' in func or 'flat_state' in func:
      return None, ('to-flat-state', f'{func}() flattens the captured State')
    return None, ('escaping-state', f'the captured State is passed to {func}()')
  elif isinstance(parent, cst.ComparisonTarget) and isinstance(
      parent.operator, (cst.In, cst.NotIn)):
    return None, None  # `'n' in s` means the same for the functional dict
  elif isinstance(parent, (cst.Return, cst.Yield)):
    return None, ('escaping-state', 'the captured State is returned')
  elif isinstance(parent, (cst.For, cst.CompFor)):
    return None, ('state-use', 'the captured State is iterated')
  else:
    return None, ('escaping-state', 'the captured State is used as a whole '
                  f'in {_code(parent) if parent is not None else "?"}')
  after = collector.parent(node)
  if isinstance(after, cst.Subscript) and after.value is node:
    if _literal_key(after) is not None:
      return None, ('nested-consumer', f'{_code(after)} reads by module path; '
                    'functional names are flat')
    return Access(name, node, False), None
  if (isinstance(after, cst.Attribute) and after.value is node
      and after.attr.value == 'value'):
    return Access(name, after, True), None
  return None, ('state-use', f'{_code(node)} is used as a Variable (no [i] '
                'or .value after it)')


def state_reads(collector, target: cst.CSTNode):
  """The reads of the State bound to the Name ``target``."""
  if not isinstance(target, cst.Name):
    return None, [], ('unknown-result', 'the State is not bound to a name')
  if target.value == '_':
    return frozenset(), [], None
  scope = collector.get_metadata(metadata.ScopeProvider, target, None)
  if scope is None:
    return None, [], ('state-use', 'the State has no scope')
  assignments = [a for a in scope.assignments[target.value]
                 if isinstance(a, metadata.Assignment)]
  if len(assignments) != 1:
    return None, [], ('state-use', f'{target.value} is assigned more than once')
  names, accesses = set(), []
  for access in assignments[0].references:
    found, reason = read_chain(collector, access.node)
    if reason is not None:
      return None, [], reason
    if found is None:
      continue
    names.add(found.name)
    accesses.append(found)
  return frozenset(names), accesses, None


def _pair_target(collector, call: cst.CSTNode):
  # `y, s = call` -> s
  assign = collector.parent(call)
  if (isinstance(assign, cst.Assign) and len(assign.targets) == 1
      and isinstance(assign.targets[0].target, (cst.Tuple, cst.List))
      and len(assign.targets[0].target.elements) == 2):
    return assign.targets[0].target.elements[1].value
  return None


def analyse_capture(collector, site) -> Consumers:
  """``y, s = nnx.capture(f, T)(x)`` and the reads of ``s``."""
  outer = collector.parent(site.node)
  if site.decorator and isinstance(outer, cst.Decorator):
    function = collector.parent(outer)
    if isinstance(function, cst.FunctionDef) and len(function.decorators) == 1:
      return _stored_capture(collector, function.name, function)
  if not site.decorator and isinstance(outer, cst.Assign) and len(
      outer.targets) == 1 and isinstance(outer.targets[0].target, cst.Name):
    return _stored_capture(collector, outer.targets[0].target)
  if site.decorator or not (isinstance(outer, cst.Call)
                            and outer.func is site.node):
    return Consumers(None, [], ('unknown-result', 'the wrapped function is '
                                'stored or decorated; the codemod follows only '
                                'y, s = nnx.capture(f, T)(x)'))
  target = _pair_target(collector, outer)
  if target is None:
    return Consumers(None, [], ('unknown-result', 'the result is not unpacked '
                                'as y, s = nnx.capture(f, T)(x)'), outer)
  names, accesses, reason = state_reads(collector, target)
  return Consumers(names, accesses, reason, outer)


def _stored_capture(collector, name: cst.Name,
                    definition: cst.CSTNode | None = None) -> Consumers:
  # forward = nnx.capture(m, T); y, s = forward(x); ... (or a decorator)
  scope = collector.get_metadata(metadata.ScopeProvider, definition or name,
                                 None)
  assignments = [a for a in (scope.assignments[name.value] if scope else ())
                 if isinstance(a, metadata.Assignment)]
  unknown = Consumers(None, [], ('unknown-result', f'{name.value} is not only '
                                 f'called as y, s = {name.value}(x)'))
  if len(assignments) != 1 or not assignments[0].references:
    return unknown
  names, accesses = set(), []
  for reference in assignments[0].references:
    call = collector.parent(reference.node)
    if not (isinstance(call, cst.Call) and call.func is reference.node):
      return unknown
    target = _pair_target(collector, call)
    if target is None:
      return unknown
    found, reads, reason = state_reads(collector, target)
    if reason is not None:
      return Consumers(None, [], reason)
    names |= found
    accesses += reads
  return Consumers(frozenset(names), accesses)


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
  earlier = _earlier_call(collector, previous, _full(target))
  if earlier:
    site.pop_reasons.append(('earlier-call', f'{_code(target)} is also called '
                             f'at line {earlier}; what that call sows would '
                             'be popped too'))
    return
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
          others = f', {pops} of them nnx.pop' if pops else ''
          nested = ('' if current is statement
                    else ' (the pop is in a nested block)')
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
})


def _passed_to(node: cst.CSTNode, target: str) -> tuple[str, str] | None:
  """('transform', 'nnx.vmap') for F(...)(target), ('function', 'f') for
  f(target): the call ``node`` passes ``target`` to, if any."""
  found = []

  class Finder(cst.CSTVisitor):

    def visit_Lambda(self, node) -> bool:
      return False

    def visit_FunctionDef(self, node) -> bool:
      return False

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
  if isinstance(small, cst.Expr) or isinstance(small, cst.Assign) and len(small.targets) == 1:
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
  """The functions called to build ``func``: nnx.split_rngs(..)(nnx.vmap(..))."""
  names = []

  class Names(cst.CSTVisitor):

    def visit_Lambda(self, node) -> bool:
      return False

    def visit_FunctionDef(self, node) -> bool:
      return False

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
  return bool(names) and all(
      n.rsplit('.', 1)[-1] in _CAPTURABLE_TRANSFORMS for n in names)


def _earlier_call(collector, statement, target: str) -> int | None:
  """The line of an earlier call of ``target`` in the same function."""
  current = statement
  while current is not None and not isinstance(
      current, (cst.FunctionDef, cst.Module, cst.Lambda)):
    block = collector.parent(current)
    body = block.body if isinstance(block, (cst.Module, cst.IndentedBlock)) else None
    if isinstance(body, (list, tuple)) and current in body:
      for earlier in reversed(list(body)[:list(body).index(current)]):
        code = _full(earlier)
        if f'pop({target},' in code.replace(' ', '').replace('nnx.', ''):
          return None
        if _assigns(earlier, target):
          return None  # a new object: nothing sown on it yet
        if _calls(earlier, target):
          return collector.position(earlier)[0]
    current = block
  return None


def _later_pop(collector, statement, target: str) -> int | None:
  """The line of a later ``nnx.pop(target, ...)`` before another call."""
  current = statement
  while current is not None and not isinstance(
      current, (cst.FunctionDef, cst.Module, cst.Lambda)):
    block = collector.parent(current)
    body = block.body if isinstance(block, (cst.Module, cst.IndentedBlock)) else None
    if isinstance(body, (list, tuple)) and current in body:
      for later in list(body)[list(body).index(current) + 1:]:
        if _assigns(later, target) or _calls(later, target):
          return None
        code = _full(later).replace(' ', '').replace('nnx.', '')
        if f'pop({target},' in code:
          return collector.position(later)[0]
    current = block
  return None


def _calls(node: cst.CSTNode, target: str) -> bool:
  found = []

  class Finder(cst.CSTVisitor):

    def visit_Lambda(self, node) -> bool:
      return False  # runs later, if ever, with its own parameters

    def visit_FunctionDef(self, node) -> bool:
      return False

    def visit_Call(self, call: cst.Call) -> None:
      func = _full(call.func)
      if func == target or (func.startswith(target + '.') and
                            func.count('.') == target.count('.') + 1):
        found.append(call)
      elif _through_transform(call, target):
        found.append(call)

  node.visit(Finder())
  return bool(found)


def link_across_units(site, previous_module: cst.Module | None) -> None:
  """A pop opening a notebook cell, after a cell that ends with the call."""
  target = site.cross_unit
  if previous_module is None or not previous_module.body:
    return
  body = list(previous_module.body)
  last = body[-1]
  small = _call_on(last, target)
  statement = site.pop_statement_candidate
  passed = _passed_to(last, target) if small is None else None
  if passed and passed[0] == 'transform':
    site.pop_reasons[:] = [('pop-not-adjacent', f'the cell before calls '
                            f'{target} through {passed[1]}; the codemod '
                            'captures through nnx.vmap and nnx.split_rngs '
                            'only: rewrite by hand')]
  if small is None or statement is None:
    return
  if any(_calls(earlier, target) for earlier in body[:-1]):
    site.pop_reasons[:] = [('earlier-call', f'{target} is also called earlier '
                            'in the cell before; what that call sows would '
                            'be popped too')]
    return
  holder = statement.body[0]
  if not (isinstance(holder, cst.Assign) and holder.value is site.node):
    site.pop_reasons[:] = [('pop-form', 'the pop opening this cell is not '
                            's = nnx.pop(m, T)')]
    return
  site.pop_reasons[:] = []
  site.consumer = Consumers(None, [], ('state-use', 'the popped State is read '
                                       'in notebook cells the codemod does not '
                                       'follow'))
  site.pop_call, site.pop_statement = last, statement
  site.pop_call_unit = site.unit - 1


def earlier_call_in_cells(site, previous_modules) -> None:
  """A notebook or page: an earlier cell may have called the model too."""
  if site.pop_call is None or site.pop_reasons:
    return
  target = _full(site.node.args[0].value)
  for module in reversed(previous_modules):
    for statement in reversed(list(module.body)):
      if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        continue  # defining a function calls nothing
      code = _full(statement)
      if f'pop({target},' in code.replace(' ', '').replace('nnx.', ''):
        return
      if _assigns(statement, target):
        return  # a new object: nothing sown on it yet
      if _calls(statement, target):
        site.pop_reasons[:] = [('earlier-call', f'{target} is also called in '
                                'an earlier cell; what that call sows would be '
                                'popped too')]
        site.pop_call = site.pop_statement = None
        return


def _assigns(statement, target: str) -> bool:
  if not isinstance(statement, cst.SimpleStatementLine):
    return False
  return any(isinstance(small, cst.Assign) and any(
      _full(t.target) == target for t in small.targets)
             for small in statement.body)
