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
"""What the transformers share: the plan of a file and the node tracker."""

from __future__ import annotations

import dataclasses
import typing as tp

import libcst as cst
from libcst.codemod import CodemodContext, ContextAwareTransformer
from libcst.codemod.visitors import AddImportsVisitor

MODULE = 'flax.nnx.sow'  # where the functional API lives
Edit = tp.Callable[[cst.CSTNode], tp.Any]
REMOVE = cst.RemovalSentinel.REMOVE


@dataclasses.dataclass
class FilePlan:
  """What to change in one file, keyed by nodes of its original trees.

  Every entry starts with the index of the code unit holding its nodes.

  Attributes:
    sows: (unit, call, local name of ``sow``, mode) per sow to rewrite.
    perturbs: (unit, call, local name of ``perturb``) per perturb.
    captures: (unit, call, local name of ``capture``, decorator form).
    pops: (unit, site, local name of ``capture`` or None: ``nnx.capture``);
      the call may be in the unit before (``site.pop_call_unit``).
    accesses: (unit, access, mode) per read of a captured State.
    notes: statement -> (unit, TODO messages, module header lines).
  """

  sows: list = dataclasses.field(default_factory=list)
  perturbs: list = dataclasses.field(default_factory=list)
  captures: list = dataclasses.field(default_factory=list)
  pops: list = dataclasses.field(default_factory=list)
  accesses: list = dataclasses.field(default_factory=list)
  notes: dict = dataclasses.field(default_factory=dict)

  def nodes(self) -> list[cst.CSTNode]:
    """Every original node some transformer changes or reads."""
    found = [call for _, call, *_ in self.sows + self.perturbs
             + self.captures]
    for _, site, _ in self.pops:
      found += [site.node, site.pop_call, site.pop_statement]
    found += [access.node for _, access, _ in self.accesses]
    found += list(self.notes)
    return [n for n in found if n is not None]

  def __bool__(self) -> bool:
    return any((self.sows, self.perturbs, self.captures, self.pops,
                self.accesses, self.notes))


class Tracker:
  """Maps nodes of the original trees to the nodes that replaced them.

  Every pass rebuilds the nodes it visits, so a node of the original tree
  is found again through what each pass turned it into.
  """

  def __init__(self, nodes: tp.Iterable[cst.CSTNode]):
    self.current: dict[cst.CSTNode, tp.Any] = {n: n for n in nodes}

  def __getitem__(self, original: cst.CSTNode):
    return self.current.get(original, original)

  def watched(self) -> set[cst.CSTNode]:
    return {n for n in self.current.values() if isinstance(n, cst.CSTNode)}

  def advance(self, moved: dict[cst.CSTNode, tp.Any]) -> None:
    for original, node in self.current.items():
      if isinstance(node, cst.CSTNode) and node in moved:
        self.current[original] = moved[node]


class SiteTransformer(ContextAwareTransformer):
  """A transformer applying one kind of rewrite to the planned nodes.

  Subclasses implement ``edits()``: current node -> function of the node as
  updated by this pass, for the nodes of unit ``self.unit``, made from the
  entries of the plan's attribute ``ENTRIES`` only. The imports an edit needs
  are asked for when it is applied.
  """

  # The FilePlan attribute this rewrite reads: without entries there, it is
  # not made at all (making a libcst transformer costs milliseconds).
  ENTRIES: tp.ClassVar[str]

  def __init__(self, context: CodemodContext, tracker: Tracker,
               plan: FilePlan, unit: int = 0):
    super().__init__(context)
    self.tracker, self.plan, self.unit = tracker, plan, unit
    self._edits: dict[cst.CSTNode, Edit] = {}
    self._imports: dict[cst.CSTNode, tuple[str, str]] = {}
    self._watched: set[cst.CSTNode] = set()
    self._moved: dict[cst.CSTNode, tp.Any] = {}

  def edits(self) -> dict[cst.CSTNode, Edit]:
    raise NotImplementedError

  def needs(self, node: cst.CSTNode, name: str | None,
            alias: str | None) -> None:
    """Editing ``node`` needs ``from flax.nnx.sow import name as alias``."""
    if name is not None:
      self._imports[node] = (name, alias or name)

  def apply(self, module: cst.Module) -> cst.Module:
    self._edits = self.edits()
    if not self._edits:
      return module
    self._watched = self.tracker.watched()
    self._moved = {}
    result = module.visit(self)
    self.tracker.advance(self._moved)
    return result

  def on_leave(self, original_node, updated_node):
    result = super().on_leave(original_node, updated_node)
    edit = self._edits.get(original_node)
    if edit is not None:
      result = edit(result)
      if original_node in self._imports:
        name, alias = self._imports[original_node]
        AddImportsVisitor.add_needed_import(
            self.context, MODULE, name, None if alias == name else alias)
    if original_node in self._watched:
      self._moved[original_node] = result
    return result


def keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
  return cst.Arg(value, keyword=cst.Name(name),
                 equal=cst.AssignEqual(cst.SimpleWhitespace(''),
                                       cst.SimpleWhitespace('')))


def bound_args(call: cst.Call, params: tuple[str, ...]) -> dict[str, cst.Arg]:
  bound = {}
  for index, arg in enumerate(call.args):
    bound[arg.keyword.value if arg.keyword else params[index]] = arg
  return bound


def arg_list(values: list[cst.Arg]) -> list[cst.Arg]:
  """The arguments with ', ' between them and no trailing comma."""
  out = []
  for index, arg in enumerate(values):
    last = index == len(values) - 1
    comma = cst.MaybeSentinel.DEFAULT if last else cst.Comma(
        whitespace_after=cst.SimpleWhitespace(' '))
    out.append(arg.with_changes(comma=comma))
  return out


def chain(first: Edit | None, then: Edit) -> Edit:
  """``then`` applied after ``first`` (two rewrites of one node)."""
  if first is None:
    return then
  return lambda updated: then(first(updated))
