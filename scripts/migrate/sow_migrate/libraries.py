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
"""Library classes a project's models are made of, read from their source.

A project's model may be built of another package's modules (a growing NCA
on CAX: the model subclasses ``cax.core.ComplexSystem`` and holds
``cax.core.update.NCAUpdate``, whose ``nnx.List`` Flax 0.12.8's
``nnx.capture`` breaks under ``nnx.vmap``). Whether a capture can run such a
model depends on those classes, so their files are found on the search path
(``sys.path`` of the interpreter running the codemod, where the project's
dependencies are installed) and analysed like the project's own, without
importing anything. Their sites are the library's: never rewritten, never
reported.

Only packages that may define NNX modules are read: a file that names
neither ``flax`` nor ``nnx`` defines none, and neither does the standard
library.
"""

from __future__ import annotations

import collections
import os
import re
import sys

from . import analysis as analysis_lib
from . import hazards
from . import reexports

_NNX_RE = re.compile(rb'\bflax\b|\bnnx\b')
# Packages that define no NNX module of their own: not worth reading.
_NEVER = frozenset({'flax', 'jax', 'jaxlib', 'numpy', 'builtins', 'typing',
                    '__future__'})


def _stdlib(top: str) -> bool:
  return top in getattr(sys, 'stdlib_module_names', ()) or top in _NEVER


def find(module: str, search_path: list[str]) -> tuple[str, str] | None:
  """(search path entry, file) of ``module``'s source, or None.

  Found as the import system would find a regular package's module
  (``pkg/mod.py`` or ``pkg/mod/__init__.py`` under an entry of
  ``search_path``), without importing anything.
  """
  parts = module.split('.')
  if not parts or not all(p.isidentifier() for p in parts) or _stdlib(
      parts[0]):
    return None
  for entry in search_path:
    entry = os.path.abspath(entry or os.curdir)
    base = os.path.join(entry, *parts)
    for candidate in (base + '.py', os.path.join(base, '__init__.py')):
      if os.path.isfile(candidate):
        return entry, candidate
  return None


def installed(top: str, search_path: list[str], cache: dict) -> bool:
  """Whether the top-level package ``top`` is found on ``search_path`` and
  may define modules (not the standard library's, nor one known to hold
  none)."""
  if top not in cache:
    cache[top] = not hazards.not_modules(top) and find(
        top, search_path) is not None
  return cache[top]


def may_define_modules(data: bytes) -> bool:
  """Whether a library file may define an NNX module (it names flax)."""
  return bool(_NNX_RE.search(data))


MAX_HOPS = 12  # bases of bases, re-exports of re-exports


def wanted(analyses, resolve, calls=None) -> dict[str, set[str]]:
  """{module: class names} that the classes of ``analyses`` derive from or
  call, or that their readers pop or capture, and that none of them
  defines (a call may be of a function); and those of ``calls``
  (``holders.library_calls``: made anywhere in the project)."""
  known = {c.qualified for a in analyses.values() for u in a.units
           for c in u.facts.classes}
  found = collections.defaultdict(set)
  for module, names in (calls or {}).items():
    found[module] |= {n for n in names if f'{module}.{n}' not in known}
  for analysis in analyses.values():
    for unit in analysis.units:
      # The classes of popped or captured objects too (`cs: ComplexSystem`).
      names = [s.root for s in unit.facts.sites
               if s.kind in ('pop', 'capture') and s.root]
      for fact in unit.facts.classes:
        names += [*fact.bases, *(q for q, _ in fact.calls)]
      for name in names:
        name = resolve(name)
        if name not in known and '.' in name and not name.startswith(
            'flax.'):
          module, short = name.rsplit('.', 1)
          found[module].add(short)
  return found


def defines_class(content: bytes, names: set[str]) -> bool:
  return any(re.search(rb'^\s*class\s+' + re.escape(n.encode()) + rb'\b',
                       content, re.MULTILINE) for n in names)


def files(wanted_names, tops, looked, search_path, aliases, read):
  """(file, search path entry, content) of the library modules defining
  classes of ``wanted_names``; ``tops`` are the project's own packages,
  ``looked`` the modules already looked for. The re-exports of the
  packages among them go to ``aliases`` (followed in the next round)."""
  found = []
  for module in sorted(wanted_names):
    if module in looked or module.split('.', 1)[0] in tops:
      continue  # the project's own modules are its files
    looked.add(module)
    where = find(module, search_path)
    if where is None:
      continue
    entry, path = where
    try:
      content = read(path)
    except OSError:
      continue
    if path.endswith('__init__.py'):  # a package re-exports what it defines
      aliases.update(reexports.file_aliases(module, content))
    # A file naming no flax defines no module, but its classes are read
    # too (cheaply: no sow there): a class of a library that was found is
    # then known to hold no nnx.List, where one not read would count as a
    # hazard (tunix's MockVocab, a sentencepiece SentencePieceProcessor).
    if defines_class(content, wanted_names[module]) and (
        may_define_modules(content) or not hazards.not_modules(
            module.split('.', 1)[0])):
      found.append((path, entry, content))
  return found


def as_library(analysis):
  """A library file's facts: its classes, and its sows as sites that are
  never rewritten (its readers and filters are the library's business)."""
  for unit in analysis.units:
    unit.facts.sites = [s for s in unit.facts.sites
                        if s.kind in ('sow', 'perturb')]
    for site in unit.facts.sites:
      site.library = True
      site.block('library', f'sown in {analysis.path}, a library the '
                 'codemod does not rewrite')
    unit.facts.others = [o for o in unit.facts.others
                         if o.code == 'direct-intermediate']
    unit.facts.state_names = set()
  return analysis


def _read(path: str) -> bytes:
  with open(path, 'rb') as f:
    return f.read()


def follow(analyses, aliases: dict[str, str], search_path=None,
           calls=None) -> None:
  """Adds to ``analyses`` (path -> FileAnalysis) the library files defining
  the classes its classes derive from or make (and ``calls``, as in
  ``wanted``), in this process (the command line does the same in its
  workers, with the project's files)."""
  search_path = sys.path if search_path is None else search_path
  resolve = reexports.resolver(aliases)
  looked: set[str] = set()
  for _ in range(MAX_HOPS):
    before = len(aliases)
    todo = files(wanted(analyses, resolve, calls), (), looked, search_path,
                 aliases, _read)
    for path, entry, content in todo:
      result = analysis_lib.analyse(os.path.relpath(path, entry), content,
                                    entry, path)
      if result.error is None:
        analyses[path] = as_library(result)
    if not todo and len(aliases) == before:
      return
