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
"""A call of a method, with the arguments that decide whether it sows.

A method that sows only under ``if sow:`` (CAX's ``_step(..., sow=False)``)
sows nothing when it is called with ``sow`` left False. So a call is kept
as the method it calls and its arguments, each one classified: ``'False'``
or ``'True'`` (the literals), ``'name:x'`` (a plain name, which the caller
resolves: a parameter of the calling method), or ``'?'`` (anything else).
"""

from __future__ import annotations

import dataclasses

import libcst as cst

UNKNOWN = '?'


@dataclasses.dataclass(frozen=True)
class CallArgs:
  """The arguments of one call of ``method`` on an object."""

  method: str
  positional: tuple[str, ...] = ()
  keywords: tuple[tuple[str, str], ...] = ()
  star: bool = False  # *args/**kwargs: anything may be passed


def _classify(node: cst.CSTNode, bound: frozenset[str]) -> str:
  if isinstance(node, cst.Name):
    if node.value in ('False', 'True'):
      return node.value
    if node.value not in bound:
      return 'name:' + node.value
  return UNKNOWN


def of_call(call: cst.Call, method: str,
            bound: frozenset[str] = frozenset()) -> CallArgs:
  """The arguments of ``call``; names in ``bound`` (the parameters of an
  enclosing lambda) are not the caller's and count as unknown."""
  positional, keywords, star = [], [], False
  for arg in call.args:
    if arg.star:
      star = True
    elif arg.keyword is None:
      positional.append(_classify(arg.value, bound))
    else:
      keywords.append((arg.keyword.value, _classify(arg.value, bound)))
  return CallArgs(method, tuple(positional), tuple(keywords), star)


def transform_lambda(call: cst.Call) -> tuple[cst.Lambda, cst.Call,
                                              str] | None:
  """``F(lambda m, ...: m.f(...), ...)(obj, ...)``: (lambda, m.f(...), 'f').

  ``F`` is the chain of calls building the transform (``nnx.split_rngs(
  ...)(nnx.vmap(...))``); it must hold exactly one lambda, whose body calls
  its first parameter (``'__call__'``) or a method of it.
  """
  if not isinstance(call.func, cst.Call):
    return None
  lambdas = []

  class Finder(cst.CSTVisitor):

    def visit_Lambda(self, node: cst.Lambda) -> bool:
      lambdas.append(node)
      return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
      del node
      return False

  call.func.visit(Finder())
  if len(lambdas) != 1 or not lambdas[0].params.params:
    return None
  found = lambdas[0]
  first = found.params.params[0].name.value
  body = found.body
  if not isinstance(body, cst.Call):
    return None
  if isinstance(body.func, cst.Name) and body.func.value == first:
    return found, body, '__call__'
  if (isinstance(body.func, cst.Attribute)
      and isinstance(body.func.value, cst.Name)
      and body.func.value.value == first):
    return found, body, body.func.attr.value
  return None


def lambda_params(node: cst.Lambda | cst.FunctionDef) -> frozenset[str]:
  """The names of every parameter of a lambda or function."""
  params = node.params
  every = (list(params.posonly_params) + list(params.params)
           + list(params.kwonly_params))
  for star in (params.star_arg, params.star_kwarg):
    if isinstance(star, cst.Param):
      every.append(star)
  return frozenset(p.name.value for p in every)


def through_lambda(call: cst.Call) -> CallArgs | None:
  """The call the lambda of ``F(lambda m, ...: m.f(...))(obj, ...)`` makes
  on ``obj``, with its arguments."""
  found = transform_lambda(call)
  if found is None:
    return None
  node, body, method = found
  return of_call(body, method, lambda_params(node))


def params_of(function: cst.FunctionDef) -> tuple[tuple[str, ...],
                                                   frozenset[str]]:
  """The positional parameters after the first (``self``), and those of
  every parameter whose default is the literal ``False``."""
  params = function.params
  positional = list(params.posonly_params) + list(params.params)
  every = positional + list(params.kwonly_params)
  false = frozenset(
      p.name.value for p in every
      if isinstance(p.default, cst.Name) and p.default.value == 'False')
  return tuple(p.name.value for p in positional[1:]), false


class _Assigned(cst.CSTVisitor):
  """The names a function body binds (in nested scopes too: conservative)."""

  def __init__(self):
    super().__init__()
    self.names: set[str] = set()

  def _targets(self, node: cst.CSTNode | None) -> None:
    if isinstance(node, cst.Name):
      self.names.add(node.value)
    elif isinstance(node, (cst.Tuple, cst.List)):
      for element in node.elements:
        self._targets(element.value)
    elif isinstance(node, cst.StarredElement):
      self._targets(node.value)

  def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
    self._targets(node.target)

  def visit_AugAssign(self, node: cst.AugAssign) -> None:
    self._targets(node.target)

  def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
    self._targets(node.target)

  def visit_For(self, node: cst.For) -> None:
    self._targets(node.target)

  def visit_AsName(self, node: cst.AsName) -> None:
    self._targets(node.name)

  def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
    self._targets(node.target)

  def visit_Global(self, node: cst.Global) -> None:
    self.names.update(n.name.value for n in node.names)

  def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
    self.names.update(n.name.value for n in node.names)


def assigned_in(node: cst.CSTNode) -> frozenset[str]:
  """The names bound anywhere in ``node`` (its body, for a function)."""
  visitor = _Assigned()
  body = node.body if isinstance(node, cst.FunctionDef) else node
  body.visit(visitor)
  return frozenset(visitor.names)


def attributes_of(function: cst.FunctionDef, me: str) -> frozenset[str]:
  """The attributes ``function`` uses on its ``me`` parameter: ``me.x``."""
  found = set()

  class Attributes(cst.CSTVisitor):

    def visit_Attribute(self, node: cst.Attribute) -> None:
      if isinstance(node.value, cst.Name) and node.value.value == me:
        found.add(node.attr.value)

  function.body.visit(Attributes())
  return frozenset(found)


def sow_only_params(function: cst.FunctionDef) -> frozenset[str]:
  """The parameters of ``function`` used only to sow on: every use of the
  name is ``p.sow(...)`` or ``p.perturb(...)`` (nothing can flatten or keep
  what is passed there, so passing a module there is as calling its sow)."""
  params = function.params
  names = {p.name.value for p in (*params.posonly_params, *params.params,
                                  *params.kwonly_params)}
  spoiled, receivers = set(), set()

  class Uses(cst.CSTVisitor):

    def visit_Call(self, node: cst.Call) -> None:
      func = node.func
      if (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
          and func.attr.value in ('sow', 'perturb')):
        receivers.add(id(func.value))

    def visit_Name(self, node: cst.Name) -> None:
      if node.value in names and id(node) not in receivers:
        spoiled.add(node.value)

  function.body.visit(Uses())
  return frozenset(names - spoiled)


def truthy_names(test: cst.CSTNode) -> frozenset[str]:
  """The names that must be truthy for ``test`` to be: ``if a:``,
  ``if a and b:``."""
  if isinstance(test, cst.Name):
    return frozenset({test.value})
  if isinstance(test, cst.BooleanOperation) and isinstance(test.operator,
                                                           cst.And):
    return truthy_names(test.left) | truthy_names(test.right)
  return frozenset()
