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
"""The rewrites, one class each, applied in one pass over a code unit.

Every rewrite maps an original node to a function of its updated node. They
are applied together by ``Rewriter`` because each is keyed by the identity of
nodes of the original tree, which a previous pass would have replaced.
"""

from __future__ import annotations

import typing as tp

import libcst as cst

from .consumers import Access
from .facts import Site

Edit = tp.Callable[[cst.CSTNode], tp.Any]
_REMOVE = cst.RemovalSentinel.REMOVE


class Rewriter(cst.CSTTransformer):
  """Applies the edits keyed by original node."""

  def __init__(self, edits: dict[cst.CSTNode, Edit]):
    super().__init__()
    self.edits = edits

  def on_leave(self, original_node, updated_node):
    edit = self.edits.get(original_node)
    return updated_node if edit is None else edit(updated_node)


def _keyword(keyword: str, value: cst.BaseExpression) -> cst.Arg:
  return cst.Arg(value, keyword=cst.Name(keyword),
                 equal=cst.AssignEqual(cst.SimpleWhitespace(''),
                                       cst.SimpleWhitespace('')))


def _bound(call: cst.Call, params: tuple[str, ...]) -> dict[str, cst.Arg]:
  bound = {}
  for index, arg in enumerate(call.args):
    key = arg.keyword.value if arg.keyword else params[index]
    bound[key] = arg
  return bound


def _args(values: list[cst.Arg]) -> list[cst.Arg]:
  # Drop trailing commas except where an argument carried a comment.
  out = []
  for index, arg in enumerate(values):
    last = index == len(values) - 1
    comma = cst.MaybeSentinel.DEFAULT if last else cst.Comma(
        whitespace_after=cst.SimpleWhitespace(' '))
    out.append(arg.with_changes(comma=comma))
  return out


class SowRewrite:
  """``recv.sow(nnx.Intermediate, name, v)`` -> ``sow(v, name=name)``."""

  def __init__(self, alias: str, mode: str):
    self.alias, self.mode = alias, mode

  def __call__(self, call: cst.Call) -> cst.Call:
    bound = _bound(call, ('variable_type', 'name', 'value', 'reduce_fn',
                          'init_fn'))
    args = [cst.Arg(bound['value'].value),
            _keyword('name', bound['name'].value)]
    if self.mode == 'clobber':
      args.append(_keyword('mode', cst.SimpleString("'clobber'")))
    return call.with_changes(func=cst.Name(self.alias), args=_args(args))


class PerturbRewrite:
  """``recv.perturb(name, v)`` -> ``perturb(v, name=name)``."""

  def __init__(self, alias: str):
    self.alias = alias

  def __call__(self, call: cst.Call) -> cst.Call:
    bound = _bound(call, ('name', 'value', 'variable_type'))
    args = [cst.Arg(bound['value'].value),
            _keyword('name', bound['name'].value)]
    return call.with_changes(func=cst.Name(self.alias), args=_args(args))


class CaptureRewrite:
  """``nnx.capture(f, nnx.Intermediate)`` -> ``capture(f)``."""

  def __init__(self, alias: str, decorator: bool = False):
    self.alias, self.decorator = alias, decorator

  def __call__(self, call: cst.Call) -> cst.BaseExpression:
    if self.decorator:  # @nnx.capture(nnx.Intermediate) -> @capture
      return cst.Name(self.alias)
    return call.with_changes(func=cst.Name(self.alias),
                             args=_args([call.args[0]]))


class PopRewrite:
  """``y = m(x)`` + ``s = nnx.pop(m, T)`` -> ``y, s = capture(m)(x)``.

  ``functional_alias`` None keeps the legacy API:
  ``y, s = nnx.capture(m, T)(x)``.
  """

  def __init__(self, site: Site, functional_alias: str | None):
    self.site, self.alias = site, functional_alias

  def capture_call(self) -> cst.Call:
    pop = self.site.node
    call_small = self.site.pop_call.body[0]
    model_call = call_small.value
    wrapped = [cst.Arg(model_call.func)]
    if self.alias is None:
      func = pop.func.with_changes(attr=cst.Name('capture'))
      wrapped.append(cst.Arg(pop.args[1].value))
    else:
      func = cst.Name(self.alias)
    inner = cst.Call(func, _args(wrapped))
    return model_call.with_changes(func=inner)

  def edits(self) -> dict[cst.CSTNode, Edit]:
    site = self.site
    statement = site.pop_statement
    holder = statement.body[0]
    call_line = site.pop_call
    edits: dict[cst.CSTNode, Edit] = {call_line: lambda _: _REMOVE}
    leading = list(call_line.leading_lines)
    across = site.pop_call_unit is not None
    if across:
      # The call ends the previous notebook cell: it becomes the capture
      # there (the cell keeps its work), and the pop line goes away.
      edits = {statement: lambda _: _REMOVE}
    if isinstance(holder, cst.Assign) and holder.value is site.node:
      first = call_line.body[0]
      left = (first.targets[0].target if isinstance(first, cst.Assign)
              else cst.Name('_'))
      if isinstance(left, cst.Tuple):
        left = left.with_changes(lpar=[cst.LeftParen()],
                                 rpar=[cst.RightParen()])
      right = holder.targets[0].target
      capture_call = self.capture_call()

      def edit_statement(updated):
        new = cst.Assign(
            targets=[cst.AssignTarget(cst.Tuple(
                [cst.Element(left, comma=cst.Comma(
                    whitespace_after=cst.SimpleWhitespace(' '))),
                 cst.Element(right)], lpar=[], rpar=[]))],
            value=capture_call)
        if across:
          return updated.with_changes(body=[new])
        return updated.with_changes(
            body=[new], leading_lines=leading + list(updated.leading_lines))
      edits[call_line if across else statement] = edit_statement
    else:
      replacement = cst.Subscript(self.capture_call(), [cst.SubscriptElement(
          cst.Index(cst.Integer('1')))])
      edits[site.node] = lambda _: replacement
      edits[statement] = lambda updated: updated.with_changes(
          leading_lines=leading + list(updated.leading_lines))
    return edits


class AccessRewrite:
  """``s['n'].value`` -> ``s['n']``, ``s.n`` -> ``s['n']``.

  For a keep-last sow (``mode='clobber'``), ``s['n'].value`` and ``s['n']``
  become ``s['n'][0]``.
  """

  def __init__(self, access: Access, mode: str):
    self.access, self.mode = access, mode

  def __call__(self, node: cst.CSTNode) -> cst.CSTNode:
    base = node.value if self.access.value else node
    if isinstance(base, cst.Attribute):
      base = cst.Subscript(base.value, [cst.SubscriptElement(cst.Index(
          cst.SimpleString(repr(self.access.name))))])
    if self.mode == 'clobber':
      # The legacy Variable holds the last value itself; the functional
      # tuple holds it as its only element.
      base = cst.Subscript(base, [cst.SubscriptElement(
          cst.Index(cst.Integer('0')))])
    return base


TODO = '# TODO(migrate_sow): '


class Annotate:
  """Adds ``# TODO(migrate_sow): code: reason`` above a statement, once."""

  def __init__(self, messages: list[str], header=()):
    # header: the module's header lines when the statement comes first
    # (libcst keeps the comments above the first statement there).
    self.messages, self.header = messages, list(header)

  def __call__(self, statement):
    # One note per code: a rerun (or a note from an older run) adds nothing.
    present = {line.comment.value[len(TODO):].split(':', 1)[0]
               for line in list(statement.leading_lines) + self.header
               if line.comment is not None
               and line.comment.value.startswith(TODO)}
    new = [cst.EmptyLine(comment=cst.Comment(TODO + m))
           for m in self.messages if m.split(':', 1)[0] not in present]
    if not new:
      return statement
    return statement.with_changes(
        leading_lines=list(statement.leading_lines) + new)
