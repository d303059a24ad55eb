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
"""Parsing a document and collecting its facts, unit by unit."""

from __future__ import annotations

import dataclasses
import os
import re

import libcst as cst
from libcst import metadata
from libcst.helpers import ModuleNameAndPackage

from . import cells, documents, earlier, namespace
from . import facts as facts_lib


@dataclasses.dataclass(eq=False)
class ParsedUnit:
  index: int
  unit: documents.Unit
  module: cst.Module
  facts: facts_lib.UnitFacts
  global_names: frozenset[str]


@dataclasses.dataclass(eq=False)
class FileAnalysis:
  path: str
  doc: documents.Document | None = None
  units: list[ParsedUnit] = dataclasses.field(default_factory=list)
  error: str | None = None  # the file could not be read or parsed
  unit_errors: list[str] = dataclasses.field(default_factory=list)
  mentions: str = ''  # the text, kept for failed files' textual checks


_WORTH_RE = re.compile(r'\.sow\s*\(|\.perturb\s*\(|Intermediate|Perturbation|'
                       r'\bpop\s*\(|\bcapture\s*\(|^\s*class\s|'
                       # A sown value read back in a cell of its own.
                       r'\bgetattr\s*\(|__captures__|\.(?:get_)?value\b',
                       re.MULTILINE)
# The callees of a cell not worth analysing (`model` in `model(x)`): a read
# in another cell of what such a call sowed is a read of a sown value.
_CALLEE_RE = re.compile(r'(?<![\w.])([A-Za-z_][\w.]*)\s*\(')


def module_name(root: str, path: str) -> ModuleNameAndPackage:
  """The dotted module name of ``path`` below ``root`` (notebooks too)."""
  relative = os.path.relpath(path, root)
  stem = relative.rsplit('.', 1)[0].replace(os.sep, '.').replace('-', '_')
  stem = stem.removeprefix('src.')  # the src layout: src/pkg/mod.py is pkg.mod
  if stem.endswith('.__init__'):
    stem = stem[:-len('.__init__')]
    return ModuleNameAndPackage(stem, stem)
  package = stem.rsplit('.', 1)[0] if '.' in stem else ''
  return ModuleNameAndPackage(stem, package)


def analyse(path: str, data: bytes, root: str,
            real_path: str | None = None) -> FileAnalysis:
  """Reads, parses and collects ``path``; parse errors are per unit.

  Raises:
    Exception: only for bugs of the codemod (the caller reports them).
  """
  result = FileAnalysis(path)
  try:
    doc = documents.read_document(path, data)
  except (UnicodeDecodeError, SyntaxError, ValueError, LookupError) as e:
    result.error = f'cannot read: {type(e).__name__}: {e}'
    return result
  result.doc = doc
  names = module_name(root, os.path.abspath(real_path or path))
  parsed = []
  for index, unit in enumerate(doc.units):
    try:
      parsed.append((index, unit, cst.parse_module(unit.code)))
    except cst.ParserSyntaxError as e:
      line = unit.first_line + e.raw_line - 1
      where = f'{path}:{line}'
      message = f'{where}: does not parse ({e.message.splitlines()[0]})'
      if doc.kind == 'py':
        result.error = message
        return result
      result.unit_errors.append(f'{message}; that {unit.label.split()[0]} '
                                'is left as it is')
  # Notebook cells and Markdown fences share one namespace: a name imported
  # in one unit resolves in the others.
  space = (namespace.Namespace(parsed, names.name) if doc.kind != 'py'
           else None)
  shared = space.shared() if space else {}
  for index, unit, module in parsed:
    if doc.kind != 'py' and not _WORTH_RE.search(unit.code):
      # A cell with no API and no class: nothing to learn, and resolving
      # its names is the slow part. It is kept (with no facts) because an
      # edit may still land in it: the call before a pop opening the next
      # cell.
      result.units.append(ParsedUnit(
          index, unit, module,
          facts_lib.UnitFacts(called=set(_CALLEE_RE.findall(unit.code))),
          frozenset()))
      continue
    unit_names = names
    if doc.kind != 'py':
      unit_names = ModuleNameAndPackage(f'{names.name}.unit{index}',
                                        names.package)
    wrapper = metadata.MetadataWrapper(module, unsafe_skip_copy=True)
    unit_facts = facts_lib.collect(wrapper, path, index, unit.label,
                                   unit.first_line,
                                   space.shared(index) if space else {},
                                   alone=False, module=(unit_names.name,
                                                        unit_names.package))
    scopes = wrapper.resolve(metadata.ScopeProvider)
    global_scope = scopes.get(module)
    global_names = frozenset(a.name for a in global_scope.assignments) if (
        global_scope is not None) else frozenset()
    result.units.append(ParsedUnit(index, unit, module, unit_facts,
                                   global_names))
  facts_lib.keep_attribute_reads([u.facts for u in result.units])
  doc_imports = None
  if doc.kind != 'py':
    doc_imports = frozenset(v.rsplit('.', 1)[0] if '.' in v else v
                            for k, v in shared.items() if not k.startswith('='))
    doc_imports |= frozenset(v for k, v in shared.items()
                             if not k.startswith('='))
  for parsed_unit in result.units:
    for site in parsed_unit.facts.sites:
      site.module, site.imports = names.name, doc_imports
  by_index = {u.index: u for u in result.units}
  for parsed_unit in result.units:
    for site in parsed_unit.facts.sites:
      if site.cross_unit and site.pop_call is None:
        previous = [(i, u.unit.label if u else '', u.module if u else None)
                    for i in range(parsed_unit.index - 1, -1, -1)
                    for u in [by_index.get(i)]]
        cells.link(site, previous)
      if site.kind == 'pop' and doc.kind != 'py' and (
          site.pop_call is not None and not site.pop_reasons):
        # Cells before the one holding the call, nearest first.
        first = (site.pop_call_unit if site.pop_call_unit is not None
                 else parsed_unit.index)
        earlier.in_cells(site, [u.module for u in reversed(result.units)
                                if u.index < first], 'in an earlier cell')
  pending = [s for u in result.units for s in u.facts.sites
             if s.kind == 'pop' and s.pop_call is not None
             and not s.pop_reasons]
  functions = earlier.function_facts(
      [u.module for u in result.units],
      set().union(*map(earlier.functions_called, pending))) if pending else {}
  for site in pending:
    unknown = earlier.first_unknown(site, functions)
    if unknown:
      site.pop_reasons[:] = [unknown]
      site.pop_call = site.pop_statement = None
    elif earlier.functions_called(site):
      # Decided with the project's classes (earlier.reason).
      site.functions = functions
  return result
