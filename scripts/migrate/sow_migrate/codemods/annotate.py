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
"""``# TODO(migrate_sow): code: reason`` above a flagged statement, once.

The reason is written whole, wrapped into comment lines of at most
``WIDTH`` characters (the first carries the code, the others continue it).
"""

from __future__ import annotations

import textwrap

import libcst as cst

from . import base

TODO = '# TODO(migrate_sow): '
CONTINUED = '#     '
WIDTH = 79


def comment_lines(message: str) -> list[str]:
  """The comment lines of one note (``code: reason``), whole."""
  lines = textwrap.wrap(message, WIDTH - len(TODO), break_long_words=False,
                        break_on_hyphens=False) or ['']
  rest = textwrap.wrap(' '.join(lines[1:]), WIDTH - len(CONTINUED),
                       break_long_words=False, break_on_hyphens=False)
  return [TODO + lines[0]] + [CONTINUED + line for line in rest]


def rewrite(statement, messages: list[str], header=()):
  # One note per code: a rerun (or a note from an older run) adds nothing.
  # ``header``: the module's header lines when the statement comes first
  # (libcst keeps the comments above the first statement there).
  present = {line.comment.value[len(TODO):].split(':', 1)[0]
             for line in list(statement.leading_lines) + list(header)
             if line.comment is not None
             and line.comment.value.startswith(TODO)}
  new = [cst.EmptyLine(comment=cst.Comment(line))
         for m in messages if m.split(':', 1)[0] not in present
         for line in comment_lines(m)]
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
