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
"""``# TODO(migrate_sow): code: reason`` above a flagged statement, once."""

from __future__ import annotations

import libcst as cst

from . import base

TODO = '# TODO(migrate_sow): '


def rewrite(statement, messages: list[str], header=()):
  # One note per code: a rerun (or a note from an older run) adds nothing.
  # ``header``: the module's header lines when the statement comes first
  # (libcst keeps the comments above the first statement there).
  present = {line.comment.value[len(TODO):].split(':', 1)[0]
             for line in list(statement.leading_lines) + list(header)
             if line.comment is not None
             and line.comment.value.startswith(TODO)}
  new = [cst.EmptyLine(comment=cst.Comment(TODO + m))
         for m in messages if m.split(':', 1)[0] not in present]
  if not new:
    return statement
  return statement.with_changes(
      leading_lines=list(statement.leading_lines) + new)


class Annotate(base.SiteTransformer):
  """Adds the notes of the flagged sites."""

  ENTRIES = 'notes'

  def edits(self):
    edits = {}
    for statement, (unit, messages, header) in self.plan.notes.items():
      if unit != self.unit:
        continue
      node = self.tracker[statement]
      if isinstance(node, cst.CSTNode):  # not removed by a rewrite
        edits[node] = lambda updated, m=messages, h=header: rewrite(
            updated, m, h)
    return edits
