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
new ``m``) are recorded with the method they call; a call of a method that
cannot sow (``render``, decided with the project's classes, see
``methods.py``) leaves nothing. An object passed to a function (which may
call it) or called in another way is an earlier call that may have sown.
"""

from __future__ import annotations

import libcst as cst

from . import methods
from .consumers import _code, _full
from .pops import (_NOT_CALLING, _ThisScopeVisitor, _assigns, _chain_names,
                   _neighbours, _pops, _through_transform)


def _lambda_method(call: cst.Call, target: str) -> str | None:
  """``nnx.vmap(lambda m, x: m.render(x), ...)(target, ...)``: 'render'."""
  del target
  lambdas = []

  class Finder(_ThisScopeVisitor):

    def visit_Call(self, node: cst.Call) -> None:
      if node.args and isinstance(node.args[0].value, cst.Lambda):
        lambdas.append(node.args[0].value)

  call.func.visit(Finder())
  if len(lambdas) != 1 or not lambdas[0].params.params:
    return None
  first = lambdas[0].params.params[0].name.value
  body = lambdas[0].body
  if not isinstance(body, cst.Call):
    return None
  if isinstance(body.func, cst.Name) and body.func.value == first:
    return '__call__'
  if (isinstance(body.func, cst.Attribute)
      and isinstance(body.func.value, cst.Name)
      and body.func.value.value == first):
    return body.func.attr.value
  return None


def call_methods(node: cst.CSTNode, target: str) -> list[tuple[str, str]]:
  """The calls of ``target`` in ``node``: (what it is, method or '')."""
  found = []

  class Finder(_ThisScopeVisitor):

    def visit_Call(self, call: cst.Call) -> None:
      func = _full(call.func)
      if func == target:
        found.append((f'{_code(call.func)}(...)', '__call__'))
      elif func.startswith(target + '.') and func.count('.') == target.count(
          '.') + 1:
        found.append((f'{_code(call.func)}(...)', func.rsplit('.', 1)[1]))
      elif _through_transform(call, target):
        names = ', '.join(_code(cst.parse_expression(n))
                          for n in _chain_names(call.func))
        found.append((f'{target} through {names}',
                      _lambda_method(call, target) or ''))
      elif any(_full(arg.value) == target for arg in call.args):
        name = (_full(call.func).rsplit('.', 1)[-1] if isinstance(
            call.func, (cst.Name, cst.Attribute)) else '')
        if name not in _NOT_CALLING:
          found.append((f'{target} passed to {_code(call.func)}()',
                        _function(call, target)))

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
  if not isinstance(func, cst.Name) or index is None:
    return ''
  return f'function:{func.value}:{index}'


NOTHING = 'nothing'  # a call known to leave nothing on the object


def local_functions(modules) -> dict[str, cst.FunctionDef]:
  """The top-level functions of a file (or of all a notebook's cells)."""
  found = {}
  for module in modules:
    for statement in module.body:
      if isinstance(statement, cst.FunctionDef):
        found[statement.name.value] = statement
  return found


def leaves_nothing(function: cst.FunctionDef, index: int, functions,
                   depth: int = 0) -> bool:
  """Whether ``function`` leaves no sown value on its ``index``-th
  parameter: every call of it is followed by a pop of it, at the top level
  of the function's body."""
  params = function.params.params
  if depth > 5 or index >= len(params):
    return False
  name, dirty = params[index].name.value, False
  for statement in function.body.body:
    if isinstance(statement, cst.SimpleStatementLine) and _pops(statement,
                                                                name):
      dirty = False
      continue
    for _, method in call_methods(statement, name):
      dirty = dirty or not _clean(method, functions, depth + 1)
  return not dirty


def _clean(method: str, functions, depth: int) -> bool:
  if not method.startswith('function:'):
    return False
  _, name, index = method.split(':')
  function = functions.get(name)
  return function is not None and leaves_nothing(function, int(index),
                                                 functions, depth)


def resolve_functions(site, functions) -> None:
  """Marks the calls passing the object to a function of the file that
  pops what it sows before returning."""
  site.earlier = [
      (text, NOTHING if _clean(method, functions, 0) else (
          '' if method.startswith('function:') else method), where)
      for text, method, where in site.earlier]


def scan(statements, target: str, where) -> tuple[list, bool]:
  """The calls of ``target`` in ``statements`` (nearest first) until a pop
  of it or a new assignment; and whether one was reached.

  Returns:
    ([(description, method or '' if unknown, where), ...], closed).
  """
  found = []
  for statement in statements:
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
      continue  # defining a function calls nothing
    if _pops(statement, target) or _assigns(statement, target):
      return found, True  # cleared, or a new object: nothing sown on it yet
    found += [(text, method, where(statement))
              for text, method in call_methods(statement, target)]
  return found, False


def first_unknown(site) -> tuple[str, str] | None:
  """The earlier-call reason for a call that may have sown, whatever the
  classes (the object passed to a function, or called another way)."""
  for text, method, where in site.earlier:
    if not method or method.startswith('function:'):
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
  for text, method, where in site.earlier:
    if method == NOTHING:
      continue
    if not method or site.root is None or methods.may_sow(
        project, site.root, method):
      what = (f' (it calls .{method}())' if method and method != '__call__'
              else '')
      if what and site.root is None:
        what = (f' (it calls .{method}() and the class of the object is not '
                'known)')
      return ('earlier-call', f'{text} {where}{what} may sow; what it sowed '
              'would be popped too')
  return None
