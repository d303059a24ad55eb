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
"""Phase 1 over a project: its files, and the analyses of those that matter.

The files given and the rest of the project (readers are searched in all
of it) are read once; a file is analysed (``analysis.analyse``, in the
pool's workers) only if it mentions the APIs, or, on a second look, reads a
name the project sows as an attribute, or defines a class the analysed ones
derive from or make, in the project or in a library it imports
(``libraries.py``). What could not be analysed is kept as ``unknown``, with
whether it may read sown values, for the decisions to keep its sites.
"""

from __future__ import annotations

import collections
import os
import re
import sys

from . import hazards as hazards_lib
from . import holders, libraries, parallel, reexports
from .analysis import module_name
from .flags import MAX_LINE

EXTENSIONS = ('.py', '.ipynb', '.md')
_SKIP_DIRS = frozenset({'__pycache__', 'node_modules', 'site-packages',
                        '.venv', 'venv', 'build', 'dist'})
_ROOT_MARKERS = ('pyproject.toml', 'setup.py', '.git')
# A file worth analysing names a sow, a Variable type or __captures__; or
# calls pop or capture and names Flax (dict.pop in a file that imports no
# Flax cannot be nnx.pop).
_MENTIONS_RE = re.compile(
    rb'\.sow\s*\(|\.perturb\s*\(|Intermediate|Perturbation|__captures__')
_CALLS_RE = re.compile(rb'\bpop\s*\(|\bcapture\s*\(')
_FLAX_RE = re.compile(rb'\bflax\b|\bnnx\b')
_CLASS_RE = re.compile(rb'^\s*class\s', re.MULTILINE)
_ANY_RE = re.compile(rb'')
_RISKY_RE = re.compile(rb'\.perturb\s*\(|Intermediate\s*\)\s*:')
# What a file that could not be analysed must contain to read sown values.
_READER_RE = re.compile(rb'\bpop\s*\(|capture\s*\(|\bstate\s*\(|'
                        rb'\bsplit\s*\(|\.value\b')


def _mentions(content: bytes) -> bool:
  return bool(_MENTIONS_RE.search(content) or (
      _CALLS_RE.search(content) and _FLAX_RE.search(content)))


def find_files(paths: list[str]) -> list[str]:
  found = []
  for path in paths:
    if os.path.isfile(path):
      found.append(os.path.abspath(path))
      continue
    for directory, subdirs, files in os.walk(path):
      subdirs[:] = sorted(d for d in subdirs
                          if d not in _SKIP_DIRS and not d.startswith('.'))
      found += [os.path.abspath(os.path.join(directory, f))
                for f in sorted(files) if f.endswith(EXTENSIONS)]
  return list(dict.fromkeys(found))


def project_root(paths: list[str]) -> str:
  """The nearest folder above the first path holding a project marker."""
  start = os.path.abspath(paths[0])
  start = start if os.path.isdir(start) else os.path.dirname(start)
  current = start
  while True:
    if any(os.path.exists(os.path.join(current, m)) for m in _ROOT_MARKERS):
      return current
    parent = os.path.dirname(current)
    if parent == current:
      return start
    current = parent


def read(path: str) -> bytes:
  with open(path, 'rb') as f:
    return f.read()


def one_line(text: str) -> str:
  text = ' '.join(str(text).split())
  return text if len(text) <= MAX_LINE else text[:MAX_LINE - 3] + '...'


def relative(path: str, base: str) -> str:
  relative = os.path.relpath(path, base)
  return path if relative.startswith('..') else relative


def attribute_re(analyses):
  # A perturbation is a Variable on the module too (Module.perturb).
  names = {site.name for a in analyses.values() for u in a.units
           for site in u.facts.sites
           if site.name and site.kind in ('sow', 'perturb')}
  if not names:
    return re.compile(rb'(?!)')
  alternatives = b'|'.join(re.escape(n.encode()) for n in sorted(names))
  # ... or any of them: getattr(model, name) with a computed name (may-read).
  return re.compile(rb'\.(' + alternatives + rb')\b\s*(\.\s*(value|get_value)'
                    rb'\b|\[)|\bgetattr\s*\([^,()]+,\s*[A-Za-z_]')


def analyse_all(paths, given, base, root, verbose, err, summary, analyses,
                 unknown, skipped, pattern, pool=None, data=None,
                 roots=None, description='analysing') -> None:
  """Reads and analyses ``paths`` (in ``pool``'s workers); the results are
  merged in the order of ``paths``."""
  pool = pool or parallel.Pool(1)
  data = {} if data is None else data
  given = set(given)
  jobs = []
  roots = roots or {}
  for path in paths:
    # A library file is named below its search path entry (cax/core/cs.py).
    display = (os.path.relpath(path, roots[path]) if path in roots
               else relative(path, base))
    try:
      content = data[path] if path in roots and path in data else read(path)
    except OSError as e:
      if path in given:
        summary.errors.append(one_line(f'{display}: cannot read: {e}'))
      continue
    if pattern is None and not _mentions(content):
      skipped.append(path)
      continue
    if pattern is not None and not pattern.search(content):
      continue
    data[path] = content
    jobs.append((path, display, roots.get(path, root), content,
                 not pool.parallel))
  done = pool.map(parallel.analyse, jobs, description,
                  [len(job[3]) for job in jobs])
  for job, (status, *payload) in zip(jobs, done):
    path, display, _, content, _ = job
    if status == 'internal':
      line = one_line(f'{display}: internal error: {payload[0]}')
      if verbose:
        err.write(payload[1])
      if path in given:
        summary.internal.append(line)
      unknown.append((display, bool(_RISKY_RE.search(content)),
                      bool(_READER_RE.search(content))))
      continue
    analysis = payload[0]
    if analysis.error:
      if path in given:
        summary.errors.append(one_line(analysis.error))
      unknown.append((display, bool(_RISKY_RE.search(content)),
                      bool(_READER_RE.search(content))))
      continue
    if path in given:
      summary.errors += [one_line(e) for e in analysis.unit_errors]
      summary.analysed += 1
    analyses[path] = analysis


def analyse_bases(files, root, aliases, analyses, verbose, err, summary,
                   unknown, base, pool=None, data=None,
                   search_path=None, calls_cache=None) -> None:
  """Analyses the files defining the project's unknown base classes, and
  the classes its classes make, in the project or in the libraries it
  imports (``libraries.py``).

  A base class in a file that mentions none of the APIs (``class
  System(nnx.Module): pass``) decides whether its subclasses are Modules;
  a submodule class there (CAX's ``NCAUpdate``, whose base makes an
  ``nnx.List``) decides whether ``nnx.capture`` can run the model
  (hazards.py), whether CAX is the project or a library it uses; and the
  library classes the project makes anywhere (``library_calls``, each
  file's kept in ``calls_cache``). ``aliases`` grows with the re-exports of
  the library packages read.
  """
  resolve = reexports.resolver(aliases)
  by_module = {}
  tops = set()
  for path in files:
    name = module_name(root, path).name
    tops.add(name.split('.', 1)[0])
    if path not in analyses:
      by_module.setdefault(name, []).append(path)
  search_path = sys.path if search_path is None else search_path
  data = {} if data is None else data
  looked: set[str] = set()
  calls = library_calls(files, tops, search_path, data, calls_cache)
  for _ in range(libraries.MAX_HOPS):
    wanted = libraries.wanted(analyses, resolve, calls)
    # A call may be of a function: only a module defining one of the names
    # as a class is worth analysing.
    todo = [p for m in sorted(wanted) for p in by_module.get(m, [])
            if _defines_class(p, wanted[m], data)]
    for path in todo:
      by_module[module_name(root, path).name].remove(path)
    reexported = len(aliases)
    found = libraries.files(wanted, tops, looked, search_path, aliases, read)
    if not todo and not found and len(aliases) == reexported:
      return
    if todo:
      analyse_all(todo, (), base, root, verbose, err, summary, analyses,
                  unknown, [], _CLASS_RE, pool, data,
                  description='base classes')
    if found:
      data.update((path, content) for path, _, content in found)
      library = {}
      analyse_all([path for path, _, _ in found], (), base, root, verbose,
                  err, summary, library, [], [], _CLASS_RE, pool, data,
                  roots={path: entry for path, entry, _ in found},
                  description='library classes')
      for path, analysis in library.items():
        analyses[path] = libraries.as_library(analysis)


def library_calls(files, tops, search_path, data,
                  cache=None) -> dict[str, set[str]]:
  """{module: names} of the classes of installed libraries that the files
  of the project make (``holders.library_calls``), each file parsed once
  (``cache``: path -> its calls), and only if it imports such a
  library."""
  cache = {} if cache is None else cache
  installed: dict[str, bool] = {}

  def library(top: str) -> bool:
    return top not in tops and libraries.installed(top, search_path,
                                                   installed)
  found: dict[str, set[str]] = {}
  for path in files:
    if path not in cache:
      try:
        content = data[path] if path in data else read(path)
      except OSError:
        content = b''
      cache[path] = holders.library_calls(path, content, library)
    for module, names in cache[path].items():
      found.setdefault(module, set()).update(names)
  return found


def _defines_class(path: str, names: set[str], data) -> bool:
  try:
    content = data[path] if data and path in data else read(path)
  except OSError:
    return False
  return libraries.defines_class(content, names)


def holder_names(analyses) -> tuple[dict[str, set[str]], set[str]]:
  """(classes whose holders matter, Module classes), by their last name
  (the first: with the last part of each module defining one).

  A holder matters if it may hold a class that sows: one with a sow or
  perturb of its own, or one deriving from or making such a class,
  transitively. Flax's own classes are left out (run on Flax's repository,
  ``nnx.Module`` itself sows). A class keeping a module passed in is
  matched by its own test (``holders.holding``).
  """
  facts = [c for a in analyses.values() for u in a.units
           for c in u.facts.classes]
  wanted = {s.owner for a in analyses.values() for u in a.units
            for s in u.facts.sites if s.kind in ('sow', 'perturb')
            and s.owner and not s.owner.startswith('flax.')}
  changed = True
  while changed:
    changed = False
    for fact in facts:
      if fact.qualified in wanted or fact.qualified.startswith('flax.'):
        continue
      if (wanted.intersection(fact.bases)
          or wanted.intersection(q for q, _ in fact.calls)):
        wanted.add(fact.qualified)
        changed = True
  # The Module classes (by their last name): deriving from one, to a fixed
  # point (a dataclass of the project holds no module).
  modules = {'Module', 'List', 'Dict', 'Sequential'}
  for _ in range(len(facts) + 1):
    more = {c.qualified.rsplit('.', 1)[-1] for c in facts
            if {b.rsplit('.', 1)[-1] for b in c.bases} & modules} - modules
    if not more:
      break
    modules |= more
  by_name = collections.defaultdict(set)
  for qualified in wanted:
    parts = qualified.split('.')
    by_name[parts[-1]].add(parts[-2] if len(parts) > 1 else '')
  return by_name, modules


def analyse_holders(files, given, root, base, verbose, err, summary,
                    analyses, unknown, pool, data, cheap) -> bool:
  """Analyses the files of the project with a class that may hold a class
  that sows (``holders.py``), to a fixed point; whether any was added.

  ``cheap`` keeps each file's classes by the cheap pass: every file of the
  project is read and parsed at most once.
  """
  failed = {path for path, *_ in unknown}
  added = False
  tops = {module_name(root, path).name.split('.', 1)[0] for path in files}

  def library(top: str) -> bool:
    # A package other than the project's that may define NNX modules.
    return top not in tops and not hazards_lib.not_modules(top)
  while True:
    for path in files:
      if path in cheap or path in analyses:
        continue
      try:
        content = data[path] if path in data else read(path)
      except OSError:
        cheap[path] = []
        continue
      cheap[path] = holders.classes(path, content)
    wanted, modules = holder_names(analyses)
    candidates = {p: found for p, found in cheap.items()
                  if found and p not in analyses and p not in failed}
    # A class deriving from a Module class of a candidate file is a Module.
    for _ in range(len(candidates)):
      more = {c.name for found in candidates.values() for c in found
              if c.bases & modules} - modules
      if not more:
        break
      modules |= more
    todo = [p for p in files
            if p in holders.holding(candidates, wanted, modules, library)]
    if not todo:
      return added
    for path in todo:
      candidates.pop(path)
      failed.add(path)  # analysed once, whatever the outcome
    analyse_all(todo, given, base, root, verbose, err, summary, analyses,
                unknown, [], _ANY_RE, pool, data, description='holders')
    added = True
