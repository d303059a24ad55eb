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
"""Phase 3: the new text of one file, from the decisions."""

from __future__ import annotations

import collections
import dataclasses
import re

import libcst as cst
from libcst import metadata

from . import decide as decide_lib
from . import imports, rewrites
from .analysis import FileAnalysis, ParsedUnit
from .flags import MAX_LINE, Flag

FUNCTIONS = ('sow', 'perturb', 'capture')


@dataclasses.dataclass
class FileResult:
  path: str
  old: bytes
  new: bytes | None = None  # None: unchanged
  rewritten: collections.Counter = dataclasses.field(
      default_factory=collections.Counter)


def site_flag(site, decision) -> Flag:
  return Flag(site.path, site.line, site.col, decision.code, decision.detail,
              site.unit_label if site.unit_label.startswith('cell') else '')


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


def _chain(edits, node, edit):
  previous = edits.get(node)
  edits[node] = edit if previous is None else (
      lambda updated, a=previous, b=edit: b(a(updated)))


def _annotation(flag: Flag) -> str:
  # Without line numbers, which the notes themselves shift.
  message = re.sub(r'(\S+\.(?:py|ipynb|md)):\d+', r'\1', flag.message)
  text = f'{flag.code}: {" ".join(message.split())}'
  room = MAX_LINE - len(rewrites.TODO) - 8
  return text if len(text) <= room else text[:room - 3] + '...'


def file_edits(analysis: FileAnalysis, decisions, target: str,
               annotate: bool, modes: dict[str, str],
               counts: collections.Counter):
  """The edits of every unit of a file, and the new names each unit uses."""
  edits: dict[cst.CSTNode, rewrites.Edit] = {}
  used = collections.defaultdict(dict)
  notes = collections.defaultdict(list)
  headers = {}
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
          notes[statement].append(_annotation(site_flag(site, decision)))
          if unit.module.body and statement is unit.module.body[0]:
            headers[statement] = unit.module.header
        continue
      if decision.action != decide_lib.REWRITE:
        continue
      counts[site.kind] += 1
      if site.kind in ('sow', 'perturb', 'capture'):
        used[unit.index][site.kind] = aliases[site.kind]
        if site.kind == 'sow':
          rewrite = rewrites.SowRewrite(aliases['sow'], site.mode)
        elif site.kind == 'perturb':
          rewrite = rewrites.PerturbRewrite(aliases['perturb'])
        else:
          rewrite = rewrites.CaptureRewrite(aliases['capture'], site.decorator)
        _chain(edits, site.node, rewrite)
      else:
        alias = aliases['capture'] if functional else None
        if functional:
          home = site.pop_call_unit if site.pop_call_unit is not None else (
              unit.index)
          used[home]['capture'] = alias
        for node, edit in rewrites.PopRewrite(site, alias).edits().items():
          _chain(edits, node, edit)
      if functional and site.consumer is not None:
        for access in site.consumer.accesses:
          mode = modes.get(access.name, 'append')
          _chain(edits, access.node, rewrites.AccessRewrite(access, mode))
  for statement, messages in notes.items():
    if statement is not None:
      _chain(edits, statement, rewrites.Annotate(
          sorted(set(messages)), headers.get(statement, ())))
  return edits, used


def rewrite_unit(unit: ParsedUnit, edits, used: dict[str, str],
                 kind: str) -> str:
  """The unit's new code (its old code when nothing applies)."""
  module = unit.module.visit(rewrites.Rewriter(edits))
  if module is unit.module or module.deep_equals(unit.module):
    return unit.unit.code
  if used:
    module = imports.add_import(module, used)
    if kind == 'py':  # in notebooks an import may serve other cells
      module = imports.remove_unused(module)
  return module.code


def rewrite_file(analysis: FileAnalysis, decisions, target: str,
                 annotate: bool, modes: dict[str, str]) -> FileResult:
  """Applies the decisions to one file (raises only on codemod bugs)."""
  doc = analysis.doc
  old = doc.render([u.code for u in doc.units])
  result = FileResult(analysis.path, old)
  edits, used = file_edits(analysis, decisions, target, annotate, modes,
                           result.rewritten)
  codes = [u.code for u in doc.units]
  if edits:
    for unit in analysis.units:
      codes[unit.index] = rewrite_unit(unit, edits, used.get(unit.index, {}),
                                       doc.kind)
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
  codes[first] = imports.add_import(
      cst.parse_module(codes[first]), names).code
  return codes
