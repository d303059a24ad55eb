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
"""``y = m(x)`` + ``s = nnx.pop(m, T)`` -> ``y, s = nnx.capture(m, T)(x)``.

With the functional target the capture is ``capture(m)`` from
``flax.nnx.sow``. When the pop opens a notebook cell and the call ends the
previous one, the capture takes the call's place there (the cell keeps its
work) and the pop line goes away.
"""

from __future__ import annotations

import libcst as cst

from . import base


def capture_call(pop: cst.Call, call_statement, alias: str | None):
  """``nnx.capture(m, T)(x)`` (or ``capture(m)(x)``) for ``m(x)``."""
  model_call = call_statement.body[0].value
  wrapped = [cst.Arg(model_call.func)]
  if alias is None:
    func = pop.func.with_changes(attr=cst.Name('capture'))
    wrapped.append(cst.Arg(pop.args[1].value))
  else:
    func = cst.Name(alias)
  return model_call.with_changes(func=cst.Call(func, base.arg_list(wrapped)))


def _pair(left, right, value) -> cst.Assign:
  if isinstance(left, cst.Tuple):
    left = left.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
  return cst.Assign(
      targets=[cst.AssignTarget(cst.Tuple(
          [cst.Element(left, comma=cst.Comma(
              whitespace_after=cst.SimpleWhitespace(' '))),
           cst.Element(right)], lpar=[], rpar=[]))],
      value=value)


def site_edits(tracker, site, alias, unit: int):
  """The edits of one pop in ``unit``, and the node whose edit needs the
  import (None: not in this unit)."""
  pop, call_line = tracker[site.node], tracker[site.pop_call]
  statement = tracker[site.pop_statement]
  across = site.pop_call_unit is not None
  if across and unit == site.unit:
    return {statement: lambda _: base.REMOVE}, None
  holder = statement.body[0]
  leading = list(call_line.leading_lines)
  edits = {} if across else {call_line: lambda _: base.REMOVE}
  if isinstance(holder, cst.Assign) and holder.value is pop:
    first = call_line.body[0]
    left = (first.targets[0].target if isinstance(first, cst.Assign)
            else cst.Name('_'))
    new = _pair(left, holder.targets[0].target,
                capture_call(pop, call_line, alias))
    if across:
      edits[call_line] = lambda updated: updated.with_changes(body=[new])
      return edits, call_line
    edits[statement] = lambda updated: updated.with_changes(
        body=[new], leading_lines=leading + list(updated.leading_lines))
    return edits, statement
  # return nnx.pop(m, T) / s = nnx.pop(m, T)['n']...: the capture's State.
  replacement = cst.Subscript(capture_call(pop, call_line, alias), [
      cst.SubscriptElement(cst.Index(cst.Integer('1')))])
  edits[pop] = lambda _: replacement
  edits[statement] = lambda updated: updated.with_changes(
      leading_lines=leading + list(updated.leading_lines))
  return edits, pop


class PopToCapture(base.SiteTransformer):
  """Rewrites the planned call + ``nnx.pop`` pairs into captures."""

  ENTRIES = 'pops'

  def edits(self):
    edits = {}
    for _, site, alias in self.plan.pops:
      home = site.pop_call_unit if site.pop_call_unit is not None else (
          site.unit)
      if self.unit not in (site.unit, home):
        continue
      found, landing = site_edits(self.tracker, site, alias, self.unit)
      for node, edit in found.items():
        edits[node] = base.chain(edits.get(node), edit)
      if landing is not None:
        self.needs(landing, 'capture' if alias else None, alias)
    return edits
