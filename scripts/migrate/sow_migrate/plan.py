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
"""Phase 3: the new text of one file, from the decisions.

The decisions become a plan (which nodes each transformer of ``codemods``
changes); the transformers run in turn over each code unit the plan
touches, then the imports they asked for are added.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import typing as tp

import libcst as cst
from libcst import metadata
from libcst.codemod import CodemodContext

from . import codemods
from . import decide as decide_lib
from . import imports
from .analysis import FileAnalysis, ParsedUnit
from .codemods import base as codemods_base
from .flags import Flag

FUNCTIONS = ('sow', 'perturb', 'capture')


@dataclasses.dataclass
class FileResult:
  path: str
  old: bytes
  new: bytes | None = None  # None: unchanged
  rewritten: collections.Counter = dataclasses.field(
      default_factory=collections.Counter)
  real: str = ''  # the file on disk (``path`` is relative to the root)


def site_flag(site, decision) -> Flag:
  return Flag(site.path, site.line, site.col, decision.code, decision.detail,
              site.unit_label if site.unit_label.startswith('cell') else '')


def reader_flag(other, code: str, detail: str) -> Flag:
  """The flag of a reader that is no site (``decide.reader_flags``)."""
  return Flag(other.path, other.line, other.col, code, detail, other.unit)


def _aliases(unit: ParsedUnit) -> dict[str, str]:
  # A name the unit already binds gets the functional_ prefix.
  return {name: (f'functional_{name}' if name in unit.global_names else name)
          for name in FUNCTIONS}


def _statement_of(parents, node):
  current = node
  while current is not None and not isinstance(
      current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
    current = parents.get(current)
  return current


def _annotation(flag: Flag) -> str:
  # Without line numbers, which the notes themselves shift; whole (the note
  # is wrapped into comment lines by annotate.rewrite).
  message = re.sub(r'(\S+\.(?:py|ipynb|md)):\d+', r'\1', flag.message)
  return f'{flag.code}: {" ".join(message.split())}'


def file_plan(analysis: FileAnalysis, decisions, target: str, annotate: bool,
              modes: dict[str, str], counts: collections.Counter,
              readers: tp.Sequence[Flag] = ()):
  """What each transformer changes in the file, and the units it touches."""
  plan = codemods_base.FilePlan()
  notes = collections.defaultdict(lambda: [None, []])
  headers = {}
  touched = set()
  functional = target == 'functional'
  for unit in analysis.units:
    aliases = _aliases(unit)
    parents = None
    for site in unit.facts.sites:
      decision = decisions.get(id(site))
      if decision is None:
        continue
      if decision.action == 'flag':
        if annotate:
          if parents is None:
            parents = metadata.MetadataWrapper(
                unit.module, unsafe_skip_copy=True).resolve(
                    metadata.ParentNodeProvider)
          statement = _statement_of(parents, site.node)
          if statement is not None:
            notes[statement][1].append(_annotation(site_flag(site, decision)))
            notes[statement][0] = unit.index
            touched.add(unit.index)
            if unit.module.body and statement is unit.module.body[0]:
              headers[statement] = unit.module.header
        continue
      if decision.action != decide_lib.REWRITE:
        continue
      counts[site.kind] += 1
      touched.add(unit.index)
      if site.kind == 'sow':
        plan.sows.append((unit.index, site.node, aliases['sow'], site.mode))
      elif site.kind == 'perturb':
        plan.perturbs.append((unit.index, site.node, aliases['perturb']))
      elif site.kind == 'capture':
        plan.captures.append((unit.index, site.node, aliases['capture'],
                              site.decorator))
      else:
        plan.pops.append((unit.index, site,
                          aliases['capture'] if functional else None))
        if site.pop_call_unit is not None:
          touched.add(site.pop_call_unit)
      if functional and site.consumer is not None:
        for access in site.consumer.accesses:
          plan.accesses.append((unit.index, access,
                                modes.get(access.name, 'append')))
  if annotate:
    for flag in readers:
      found = _reader_statement(analysis, flag)
      if found is not None:
        unit, statement = found
        notes[statement][1].append(_annotation(flag))
        notes[statement][0] = unit.index
        touched.add(unit.index)
        if unit.module.body and statement is unit.module.body[0]:
          headers[statement] = unit.module.header
  plan.notes = {statement: (unit, sorted(set(messages)),
                            headers.get(statement, ()))
                for statement, (unit, messages) in notes.items()}
  return plan, touched


def _reader_statement(analysis: FileAnalysis, flag: Flag):
  """(unit, innermost statement) at a reader's flag, or None.

  A reader is no site: it is found by its position, in the unit holding its
  line (its cell, for a notebook's flag).
  """
  for unit in analysis.units:
    if flag.unit and unit.unit.label != flag.unit:
      continue
    line = flag.line - unit.unit.first_line + 1
    if line < 1 or line > unit.unit.code.count('\n') + 1:
      continue
    positions = metadata.MetadataWrapper(
        unit.module, unsafe_skip_copy=True).resolve(metadata.PositionProvider)
    best, best_start = None, None
    for node, where in positions.items():
      if not isinstance(node, (cst.SimpleStatementLine,
                               cst.BaseCompoundStatement)):
        continue
      start, end = where.start, where.end
      if (start.line, start.column) <= (line, flag.col - 1) <= (
          end.line, end.column) and (best_start is None or
                                     (start.line, start.column) > best_start):
        best, best_start = node, (start.line, start.column)
    if best is not None:
      return unit, best
  return None


def rewrite_unit(unit: ParsedUnit, plan, tracker, kind: str) -> str:
  """The unit's new code (its old code when nothing applies)."""
  context = CodemodContext()
  module = unit.module
  for transformer in codemods.ORDER:
    if getattr(plan, transformer.ENTRIES):
      module = transformer(context, tracker, plan, unit.index).apply(module)
  if module is unit.module or module.deep_equals(unit.module):
    return unit.unit.code
  module = imports.add_needed(module, context)
  if kind == 'py':  # in notebooks an import may serve other cells
    module = imports.remove_unused(module)
  return module.code


def rewrite_file(analysis: FileAnalysis, decisions, target: str,
                 annotate: bool, modes: dict[str, str],
                 readers: tp.Sequence[Flag] = ()) -> FileResult:
  """Applies the decisions to one file (raises only on codemod bugs);
  ``readers``: the flags of its readers that are no sites, noted with
  ``annotate``."""
  doc = analysis.doc
  old = doc.render([u.code for u in doc.units])
  result = FileResult(analysis.path, old)
  plan, touched = file_plan(analysis, decisions, target, annotate, modes,
                            result.rewritten, readers)
  codes = [u.code for u in doc.units]
  if plan:
    tracker = codemods_base.Tracker(plan.nodes())
    for unit in analysis.units:
      if unit.index in touched:
        codes[unit.index] = rewrite_unit(unit, plan, tracker, doc.kind)
  if doc.kind != 'py':
    codes = _move_imports(doc, codes)
  new = doc.render(codes)
  if new != old:
    result.new = new
  return result


def _move_imports(doc, codes):
  # In a notebook or Markdown page the cells share one namespace: one
  # import line, in the first cell that imports from flax (or the first
  # rewritten cell), is enough.
  line_prefix = f'from {imports.MODULE} import '
  added = {}
  for index, code in enumerate(codes):
    if code != doc.units[index].code:
      for line in code.splitlines(keepends=True):
        if line.startswith(line_prefix) and line not in doc.units[index].code:
          added.setdefault(index, []).append(line)
  if len(added) <= 1:
    return codes
  names = {}
  for lines in added.values():
    for line in lines:
      for part in line[len(line_prefix):].strip().split(', '):
        name, _, alias = part.partition(' as ')
        names[name] = alias or name
  first = min(added)
  for index, lines in added.items():
    for line in lines:
      codes[index] = codes[index].replace(line, '', 1)
  context = CodemodContext()
  imports.request(context, names)
  codes[first] = imports.add_needed(cst.parse_module(codes[first]),
                                    context).code
  return codes
