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
"""What ran on the popped object before the call that a capture would wrap.

``y = m(x)`` + ``s = nnx.pop(m, T)`` becomes a capture of ``m(x)`` alone:
whatever an earlier call left on ``m`` would no longer be popped. The calls
of ``m`` before it (back to an earlier pop of ``m`` or an assignment of a
new ``m``) are recorded with the method they call and its arguments; a call
of a method that cannot sow (``render``, or ``cs(x)`` leaving the flag
``sow`` False; decided with the project's classes, see ``methods.py``)
leaves nothing. An object passed to a function of the file is followed
into it (``functions.py``); passed to any other function, used in a lambda
that does not take it as a parameter, or called in another way, it is an
earlier call that may have sown.
"""

from __future__ import annotations

import libcst as cst

from . import calls as calls_lib
from . import functions as functions_lib
from . import methods
from .consumers import _code, _full
from .pops import (_NOT_CALLING, _ThisScopeVisitor, _assigns, _chain_names,
                   _neighbours, _pops, _through_transform)


def _free_in(node: cst.CSTNode, target: str) -> bool:
  """Whether the lambda or function ``node`` uses ``target`` (a plain name)
  without binding it as a parameter."""
  if '.' in target:
    return False
  if target in calls_lib.lambda_params(node):
    return False
  found = []

  class Uses(cst.CSTVisitor):

    def visit_Name(self, name: cst.Name) -> None:
      if name.value == target:
        found.append(name)

  node.body.visit(Uses())
  return bool(found)


def call_methods(node: cst.CSTNode, target: str) -> list[tuple]:
  """The calls of ``target`` in ``node``: (what it is, method or '', the
  arguments or None)."""
  found = []

  class Finder(_ThisScopeVisitor):

    def visit_Lambda(self, lambda_: cst.Lambda) -> bool:
      if _free_in(lambda_, target):
        found.append((f'{target} used in a lambda', '', None))
      return False

    def visit_FunctionDef(self, function: cst.FunctionDef) -> bool:
      if _free_in(function, target):
        found.append((f'{target} used in {function.name.value}()', '',
                      None))
      return False

    def visit_Call(self, call: cst.Call) -> None:
      func = _full(call.func)
      if func == target:
        found.append((f'{_code(call.func)}(...)', '__call__',
                      calls_lib.of_call(call, '__call__')))
      elif func.startswith(target + '.') and func.count('.') == target.count(
          '.') + 1:
        method = func.rsplit('.', 1)[1]
        found.append((f'{_code(call.func)}(...)', method,
                      calls_lib.of_call(call, method)))
      elif _through_transform(call, target):
        names = ', '.join(_code(cst.parse_expression(n))
                          for n in _chain_names(call.func))
        args = calls_lib.through_lambda(call)
        # nnx.vmap(f, ...)(target, ...) with f a function of the file.
        method = args.method if args else _function(call, target)
        found.append((f'{target} through {names}', method, args))
      elif any(_full(arg.value) == target for arg in call.args):
        name = (_full(call.func).rsplit('.', 1)[-1] if isinstance(
            call.func, (cst.Name, cst.Attribute)) else '')
        if name not in _NOT_CALLING:
          found.append((f'{target} passed to {_code(call.func)}()',
                        _function(call, target), None))

  node.visit(Finder())
  return found


def _function(call: cst.Call, target: str) -> str:
  """``f(..., target, ...)`` or ``nnx.jit(f, ...)(..., target, ...)``:
  'function:f:<index of target>' (f may be defined in the file); else ''."""
  func = call.func
  if isinstance(func, cst.Call) and func.args and func.args[0].keyword is None:
    func = func.args[0].value  # the function a transform wraps
  positional = [a for a in call.args if a.keyword is None and not a.star]
  index = next((i for i, a in enumerate(positional)
                if _full(a.value) == target), None)
  if not isinstance(func, cst.Name) or index is None or any(
      a.star for a in call.args):
    return ''
  return f'function:{func.value}:{index}'


# Decorators that only transform the function they wrap.
_PLAIN_DECORATORS = ('nnx.', 'jax.', 'flax.nnx.', 'partial(nnx.',
                     'functools.partial(nnx.', 'partial(jax.',
                     'functools.partial(jax.')


def function_facts(modules, wanted) -> dict[str, functions_lib.FunctionFact]:
  """The top-level functions of a file (or of all a notebook's cells) named
  in ``wanted`` and those they pass objects to, each with what it does with
  its positional parameters; a name defined twice is left out (which one
  runs is not known)."""
  nodes, twice = {}, set()
  for module in modules:
    for statement in module.body:
      if isinstance(statement, cst.FunctionDef):
        name = statement.name.value
        if name in nodes:
          twice.add(name)
        nodes[name] = statement
  found, todo = {}, list(wanted)
  while todo:
    name = todo.pop()
    if name in found or name in twice or name not in nodes:
      continue
    found[name] = fact = _function_fact(nodes[name])
    todo += [e[2] for events in fact.effects if events
             for e in events if e[0] == 'function']
  return found


def _function_fact(function: cst.FunctionDef) -> functions_lib.FunctionFact:
  params = function.params
  positional = list(params.posonly_params) + list(params.params)
  rebound = calls_lib.assigned_in(function)
  effects = []
  for param in positional:
    name = param.name.value
    if name in rebound:
      effects.append(None)
      continue
    events = []
    for statement in function.body.body:
      if isinstance(statement, cst.SimpleStatementLine) and _pops(statement,
                                                                  name):
        events.append(('pop',))
        continue
      for text, method, args in call_methods(statement, name):
        if method.startswith('function:'):
          _, called, index = method.split(':')
          events.append(('function', text, called, int(index)))
        elif method:
          events.append(('call', text, method, args))
        else:
          events.append(('unknown', text))
    effects.append(tuple(events))
  plain = all(_full(d.decorator).replace(' ', '').startswith(
      _PLAIN_DECORATORS) for d in function.decorators)
  return functions_lib.FunctionFact(function.name.value, tuple(effects),
                                    plain)


def scan(statements, target: str, where) -> tuple[list, bool]:
  """The calls of ``target`` in ``statements`` (nearest first) until a pop
  of it or a new assignment; and whether one was reached.

  Returns:
    ([(description, method or '' if unknown, where, args), ...], closed).
  """
  found = []
  for statement in statements:
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
      continue  # defining a function calls nothing
    if _pops(statement, target) or _assigns(statement, target):
      return found, True  # cleared, or a new object: nothing sown on it yet
    found += [(text, method, where(statement), args)
              for text, method, args in call_methods(statement, target)]
  return found, False


def functions_called(site) -> set[str]:
  """The functions of the file ``site``'s object is passed to before."""
  return {m.split(':')[1] for _, m, _, _ in site.earlier
          if m.startswith('function:')}


def first_unknown(site, functions) -> tuple[str, str] | None:
  """The earlier-call reason for a call that may have sown, whatever the
  classes (the object passed to a function not defined in the file, or
  used in another way)."""
  for text, method, where, _ in site.earlier:
    if not method or (method.startswith('function:')
                      and method.split(':')[1] not in functions):
      return ('earlier-call', f'{text} {where} may have sown; what it '
              'sowed would be popped too')
  return None


def in_function(collector, site, previous, target: str) -> None:
  """The calls before ``previous`` (the call statement) in its function."""

  def where(statement):
    return f'at line {collector.position(statement)[0]}'

  site.earlier, site.earlier_closed = scan(
      _neighbours(collector, previous, before=True), target, where)


def in_cells(site, modules, label: str) -> None:
  """Adds the calls in earlier notebook cells (or Markdown fences), nearest
  first, unless the scan already reached a pop or an assignment."""
  if site.earlier_closed:
    return
  target = _full(site.node.args[0].value)
  for module in modules:
    found, closed = scan(reversed(list(module.body)), target,
                         lambda _: label)
    site.earlier += found
    if closed:
      site.earlier_closed = True
      return


def reason(project, site) -> tuple[str, str] | None:
  """Why an earlier call may have left values that the pop collects."""
  for text, method, where, args in site.earlier:
    if method.startswith('function:'):
      _, name, index = method.split(':')
      if functions_lib.leaves_nothing(project, site.root, site.functions,
                                      name, int(index)):
        continue
      return ('earlier-call', f'{text} {where} may have sown; what it sowed '
              'would be popped too')
    if not method or site.root is None or methods.may_sow(
        project, site.root, method, args):
      what = (f' (it calls .{method}())' if method and method != '__call__'
              else '')
      if what and site.root is None:
        what = (f' (it calls .{method}() and the class of the object is not '
                'known)')
      return ('earlier-call', f'{text} {where}{what} may sow; what it sowed '
              'would be popped too')
  return None


def between_reason(project, site) -> tuple[str, str] | None:
  """Why a call in the cells between the call and a pop opening a later
  cell may change what the pair collects: it may sow, or read what the
  call sowed (which a capture does not leave on the object)."""
  reached = project.reached(site)
  names = (None if any(s.name is None for s in reached)
           else frozenset(s.name for s in reached))
  for text, method, where, args in site.between:
    if site.root is None or methods.may_touch(project, site.root, method,
                                              args, names):
      return ('pop-not-adjacent', f'{text} {where}, between the call and '
              'nnx.pop, may sow or read what the call sowed: capture by hand')
  return None
