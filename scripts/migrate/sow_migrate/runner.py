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
"""The command line: find files, analyse the project, plan, then write.

Nothing is written until every file's new text is known and every file to
write is known to be writable. A bug of the codemod on one file becomes one
line, ``path: internal error: ...``; that file is left as it is, and so are
the sites of other files linked to its sites.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import difflib
import os
import re
import sys
import tempfile
import time

from . import decide as decide_lib
from . import hazards, libraries, parallel, plan, reexports
from .analysis import FileAnalysis, module_name
from .flags import MAX_LINE, Flag

EXTENSIONS = ('.py', '.ipynb', '.md')
_SKIP_DIRS = frozenset({'__pycache__', 'node_modules', 'site-packages',
                        '.venv', 'venv', 'build', 'dist'})
_ROOT_MARKERS = ('pyproject.toml', 'setup.py', '.git')
EXIT_OK, EXIT_CHANGES, EXIT_USAGE = 0, 1, 2
EXIT_UNREADABLE, EXIT_INTERNAL, EXIT_UNWRITABLE = 3, 4, 5
_MENTIONS_RE = re.compile(
    rb'\.sow\s*\(|\.perturb\s*\(|Intermediate|Perturbation|\bpop\s*\(|'
    rb'\bcapture\s*\(')
_CLASS_RE = re.compile(rb'^\s*class\s', re.MULTILINE)
_RISKY_RE = re.compile(rb'\.perturb\s*\(|Intermediate\s*\)\s*:')
# What a file that could not be analysed must contain to read sown values.
_READER_RE = re.compile(rb'\bpop\s*\(|capture\s*\(|\bstate\s*\(|'
                        rb'\bsplit\s*\(|\.value\b')


@dataclasses.dataclass
class Summary:
  files: int = 0
  analysed: int = 0
  changed: int = 0
  sites: int = 0
  linen: int = 0
  unchanged_ok: int = 0
  rewritten: collections.Counter = dataclasses.field(
      default_factory=collections.Counter)
  flagged: collections.Counter = dataclasses.field(
      default_factory=collections.Counter)
  errors: list[str] = dataclasses.field(default_factory=list)
  internal: list[str] = dataclasses.field(default_factory=list)
  flags: list[Flag] = dataclasses.field(default_factory=list)
  seconds: float = 0.0
  # With --target=capture: the nnx.capture the decisions assumed.
  nnx_capture: str = ''

  def lines(self) -> list[str]:
    out = [f'migrate_sow: {self.files} files, {self.analysed} analysed, '
           f'{self.changed} changed, {len(self.errors)} unreadable, '
           f'{len(self.internal)} internal errors ({self.seconds:.1f} s)']
    detail = ', '.join(f'{k}: {v}' for k, v in sorted(self.rewritten.items()))
    out.append(f'  NNX sites: {self.sites}; rewritten: '
               f'{sum(self.rewritten.values())}' + (f' ({detail})' if detail
                                                    else '')
               + f'; already fine: {self.unchanged_ok}; flagged: '
               f'{sum(self.flagged.values())}; Linen sites left alone: '
               f'{self.linen}')
    if self.nnx_capture:
      out.append(f'  for the {self.nnx_capture} nnx.capture (--nnx-capture)')
    for code, count in sorted(self.flagged.items(), key=lambda i: (-i[1],
                                                                  i[0])):
      out.append(f'    {code}: {count}')
    return out


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


def _read(path: str) -> bytes:
  with open(path, 'rb') as f:
    return f.read()


def _one_line(text: str) -> str:
  text = ' '.join(str(text).split())
  return text if len(text) <= MAX_LINE else text[:MAX_LINE - 3] + '...'


def _relative(path: str, base: str) -> str:
  relative = os.path.relpath(path, base)
  return path if relative.startswith('..') else relative


def run(paths: list[str], *, target: str = 'capture', mode: str = 'diff',
        annotate: bool = False, root: str | None = None,
        verbose: bool = False, out=None, err=None, jobs: int = 1,
        nnx_capture: str = hazards.LEGACY, search_path=None, **_unused):
  """Runs the codemod over ``paths``; returns (exit code, Summary).

  ``nnx_capture`` (``--target=capture``): the ``nnx.capture`` the migrated
  code will run on, ``'legacy'`` or ``'transform'`` (see ``hazards.py``);
  ``'auto'`` (the command line's default): the one of the Flax installed
  here. Called from code, the default is ``'legacy'``, which does not
  depend on what is installed.

  ``search_path``: where the libraries the project imports are found
  (``libraries.py``); by default ``sys.path``.
  """
  out, err = out or sys.stdout, err or sys.stderr
  start = time.perf_counter()
  summary = Summary()
  if target == 'capture':
    summary.nnx_capture = (hazards.installed_capture()
                           if nnx_capture == 'auto' else nnx_capture)
  given = find_files(paths)
  summary.files = len(given)
  root = os.path.abspath(root or project_root(paths))
  base = os.getcwd()
  # Consumers are searched in the whole project, even on a partial run.
  project_files = [p for p in find_files([root]) if p not in set(given)]
  pool, data = parallel.Pool(jobs), {}
  try:
    return _run(given, project_files, target, mode, annotate, root, base,
                verbose, out, err, summary, start, pool, data, search_path)
  finally:
    pool.close()


def _run(given, project_files, target, mode, annotate, root, base, verbose,
         out, err, summary, start, pool, data, search_path=None):
  analyses: dict[str, FileAnalysis] = {}
  unknown: list[tuple[str, bool]] = []  # files whose facts are missing
  skipped: list[str] = []
  todo = given + project_files
  for round_ in range(2):
    _analyse_all(todo, given, base, root, verbose, err, summary, analyses,
                 unknown, skipped, None if round_ == 0 else _attribute_re(
                     analyses), pool, data)
    # Files that mention none of the APIs may still read a sown value as
    # an attribute (model.features.value): a second look at those.
    todo, skipped = skipped, []
    if not todo:
      break
  aliases = reexports.collect(root, given + project_files, _read)
  _analyse_bases(given + project_files, root, aliases, analyses, verbose, err,
                 summary, unknown, base, pool, data, search_path)
  failed: set[str] = set()
  results = {}
  # Plan: decide, rewrite in memory; a file that fails to rewrite is taken
  # out and the decisions are made again without it.
  for _ in range(10):
    project = _project(analyses, failed, aliases)
    decisions = decide_lib.decide(project, target,
                                  summary.nnx_capture or hazards.LEGACY)
    _block_unknown(project, decisions, unknown, target)
    modes = {s.name: s.mode for s in project.sows if s.name}
    results, new_failure = {}, False
    jobs = []
    for path in given:
      analysis = analyses.get(path)
      if analysis is None or path in failed:
        continue
      wanted = [decisions.get(id(s)) for s in parallel.sites_of(analysis)]
      if not any(d is not None and (d.action == decide_lib.REWRITE or (
          annotate and d.action == 'flag')) for d in wanted):
        continue  # nothing to change
      jobs.append((path, analysis.path, root, data[path], wanted, target,
                   annotate, modes, None if pool.parallel else analysis))
    for job, (status, *payload) in zip(jobs, pool.map(parallel.rewrite,
                                                      jobs)):
      if status == 'ok':
        results[job[0]] = payload[0]
        continue
      summary.internal.append(_one_line(
          f'{job[1]}: internal error: {payload[0]}'))
      if verbose:
        err.write(payload[1])
      failed.add(job[0])
      new_failure = True
    if not new_failure:
      break
  _tally(summary, project, decisions, given, analyses, results, err)
  changed = [r for r in results.values() if r.new is not None]
  summary.changed = len(changed)
  if mode == 'write':
    unwritable = [r.path for r in changed if not _writable(r.path)]
    if unwritable:
      for path in unwritable:
        err.write(_one_line(f'{path}: cannot write (permission denied); '
                            'nothing was written') + '\n')
      summary.seconds = time.perf_counter() - start
      return EXIT_UNWRITABLE, summary
    for result in changed:
      _write(result.path, result.new)
  elif mode == 'diff':
    for result in changed:
      out.write(_diff(result))
  for line in summary.errors + summary.internal:
    err.write(line + '\n')
  summary.seconds = time.perf_counter() - start
  if summary.internal:
    return EXIT_INTERNAL, summary
  if summary.errors:
    return EXIT_UNREADABLE, summary
  if mode == 'check' and changed:
    return EXIT_CHANGES, summary
  return EXIT_OK, summary


def _attribute_re(analyses):
  names = {site.name for a in analyses.values() for u in a.units
           for site in u.facts.sites if site.name and site.kind == 'sow'}
  if not names:
    return re.compile(rb'(?!)')
  alternatives = b'|'.join(re.escape(n.encode()) for n in sorted(names))
  return re.compile(rb'\.(' + alternatives + rb')\b\s*(\.\s*(value|get_value)'
                    rb'\b|\[)')


def _analyse_all(paths, given, base, root, verbose, err, summary, analyses,
                 unknown, skipped, pattern, pool=None, data=None,
                 roots=None) -> None:
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
               else _relative(path, base))
    try:
      content = data[path] if path in roots and path in data else _read(path)
    except OSError as e:
      if path in given:
        summary.errors.append(_one_line(f'{display}: cannot read: {e}'))
      continue
    if pattern is None and not _MENTIONS_RE.search(content):
      skipped.append(path)
      continue
    if pattern is not None and not pattern.search(content):
      continue
    data[path] = content
    jobs.append((path, display, roots.get(path, root), content,
                 not pool.parallel))
  for job, (status, *payload) in zip(jobs, pool.map(parallel.analyse, jobs)):
    path, display, _, content, _ = job
    if status == 'internal':
      line = _one_line(f'{display}: internal error: {payload[0]}')
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
        summary.errors.append(_one_line(analysis.error))
      unknown.append((display, bool(_RISKY_RE.search(content)),
                      bool(_READER_RE.search(content))))
      continue
    if path in given:
      summary.errors += [_one_line(e) for e in analysis.unit_errors]
      summary.analysed += 1
    analyses[path] = analysis


def _analyse_bases(files, root, aliases, analyses, verbose, err, summary,
                   unknown, base, pool=None, data=None,
                   search_path=None) -> None:
  """Analyses the files defining the project's unknown base classes, and
  the classes its classes make, in the project or in the libraries it
  imports (``libraries.py``).

  A base class in a file that mentions none of the APIs (``class
  System(nnx.Module): pass``) decides whether its subclasses are Modules;
  a submodule class there (CAX's ``NCAUpdate``, whose base makes an
  ``nnx.List``) decides whether ``nnx.capture`` can run the model
  (hazards.py), whether CAX is the project or a library it uses.
  ``aliases`` grows with the re-exports of the library packages read.
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
  for _ in range(libraries.MAX_HOPS):
    wanted = libraries.wanted(analyses, resolve)
    # A call may be of a function: only a module defining one of the names
    # as a class is worth analysing.
    todo = [p for m in sorted(wanted) for p in by_module.get(m, [])
            if _defines_class(p, wanted[m], data)]
    for path in todo:
      by_module[module_name(root, path).name].remove(path)
    reexported = len(aliases)
    found = libraries.files(wanted, tops, looked, search_path, aliases, _read)
    if not todo and not found and len(aliases) == reexported:
      return
    if todo:
      _analyse_all(todo, (), base, root, verbose, err, summary, analyses,
                   unknown, [], _CLASS_RE, pool, data)
    if found:
      data.update((path, content) for path, _, content in found)
      read = {}
      _analyse_all([path for path, _, _ in found], (), base, root, verbose,
                   err, summary, read, [], [], _CLASS_RE, pool, data,
                   roots={path: entry for path, entry, _ in found})
      for path, analysis in read.items():
        analyses[path] = libraries.as_library(analysis)


def _defines_class(path: str, names: set[str], data) -> bool:
  try:
    content = data[path] if data and path in data else _read(path)
  except OSError:
    return False
  return libraries.defines_class(content, names)


def _project(analyses, failed, aliases=None) -> decide_lib.Project:
  sites, classes, others = [], [], []
  state_names = collections.defaultdict(set)
  for path, analysis in analyses.items():
    for unit in analysis.units:
      state_names[analysis.path] |= unit.facts.state_names
      classes += unit.facts.classes
      others += unit.facts.others
      if path in failed:
        for site in unit.facts.sites:
          if not any(code == 'internal-error' for code, _ in site.reasons):
            site.block('internal-error', 'the codemod failed on this file; '
                       'it is left as it is')
      sites += unit.facts.sites
  return decide_lib.Project(sites, classes, others, state_names, aliases)


def _block_unknown(project, decisions, unknown, target) -> None:
  # A file that could not be analysed may read any sow (functional) or sow
  # types nnx.capture would not collect (capture): keep the sites it may
  # affect.
  if not unknown:
    return
  for path, risky, reads in unknown:
    for site in project.sites:
      decision = decisions[id(site)]
      if decision.action != decide_lib.REWRITE:
        continue
      if (target == 'functional' and reads) or (risky and site.kind == 'pop'):
        decisions[id(site)] = decide_lib.Decision(
            'flag', 'legacy-reader', f'{path} could not be analysed and may '
            'read or affect it; fix that file and run again')


def _tally(summary, project, decisions, given, analyses, results, err):
  given_paths = {analyses[p].path for p in given if p in analyses}
  flags = []
  for site in project.sites:
    if site.path not in given_paths or site.library:
      continue
    summary.sites += 1
    decision = decisions[id(site)]
    if decision.action == 'flag':
      flags.append(plan.site_flag(site, decision))
    elif decision.action == decide_lib.OK:
      summary.unchanged_ok += 1
  summary.linen = sum(1 for s in project.linen
                       if s.path in given_paths and not s.library)
  for result in results.values():
    summary.rewritten.update(result.rewritten)
  flags = sorted(set(flags))
  for flag in flags:
    summary.flagged[flag.code] += 1
    err.write(f'{flag}\n')
  summary.flags = flags


def _writable(path: str) -> bool:
  # A file without write permission bits is read-only on purpose, even for
  # a user (root) whom the system would let write it.
  if not os.stat(path).st_mode & 0o222:
    return False
  return os.access(path, os.W_OK) and os.access(
      os.path.dirname(os.path.abspath(path)), os.W_OK)


def _write(path: str, data: bytes) -> None:
  # Written beside the file and renamed over it: never half a file.
  directory = os.path.dirname(os.path.abspath(path))
  mode = os.stat(path).st_mode
  handle, temporary = tempfile.mkstemp(dir=directory, prefix='.migrate_sow.')
  try:
    with os.fdopen(handle, 'wb') as f:
      f.write(data)
    os.chmod(temporary, mode & 0o7777)
    os.replace(temporary, path)
  except BaseException:
    if os.path.exists(temporary):
      os.unlink(temporary)
    raise


def _diff(result) -> str:
  old = result.old.decode('utf-8', 'replace').splitlines(keepends=True)
  new = result.new.decode('utf-8', 'replace').splitlines(keepends=True)
  lines = difflib.unified_diff(old, new, fromfile=f'a/{result.path}',
                               tofile=f'b/{result.path}')
  return ''.join(line if line.endswith('\n') else line + '\n'
                 for line in lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      prog='migrate_sow.py',
      description='Migrates Module.sow/nnx.capture code to flax.nnx.sow.',
      epilog='Exit codes: 0 ok; 1 --check found changes; 2 usage error; '
             '3 some file could not be read or parsed; 4 internal error on '
             'some file (left untouched); 5 a file to write is not writable '
             '(nothing written).')
  parser.add_argument('paths', nargs='+', metavar='PATH')
  parser.add_argument('--target', choices=('functional', 'capture'),
                      default='capture')
  parser.add_argument(
      '--nnx-capture', choices=('auto', hazards.LEGACY, hazards.TRANSFORM),
      default='auto',
      help="with --target=capture: the nnx.capture the migrated code will "
      "run on. 'legacy' (Flax 0.12.8's, which writes on the model) keeps "
      "pops it would break; 'transform' (flax.nnx.capture_compat's) has no "
      "such hazard. Default: the one installed here")
  group = parser.add_mutually_exclusive_group()
  group.add_argument('--diff', dest='mode', action='store_const',
                     const='diff', help='print a unified diff (default)')
  group.add_argument('--write', dest='mode', action='store_const',
                     const='write', help='rewrite the files in place')
  group.add_argument('--check', dest='mode', action='store_const',
                     const='check', help='exit 1 if anything would change')
  parser.add_argument('--annotate', action='store_true',
                      help='add TODO(migrate_sow) comments at flagged sites')
  parser.add_argument('--project-root', dest='root', default=None,
                      help='where consumers are searched (default: the '
                      'nearest folder with pyproject.toml, setup.py or .git)')
  parser.add_argument('--verbose', action='store_true',
                      help='print the traceback of internal errors')
  parser.add_argument('--quiet', action='store_true')
  parser.add_argument('--jobs', type=int, default=1, metavar='N',
                      help='analyse and rewrite files in N processes (the '
                      'output is the same as with 1)')
  parser.add_argument('--no-progress', dest='progress', action='store_false')
  args = parser.parse_args(argv)
  missing = [p for p in args.paths if not os.path.exists(p)]
  if missing:
    parser.error('no such file or directory: ' + ', '.join(missing))
  args.mode = args.mode or 'diff'
  return args


def main(argv: list[str] | None = None) -> int:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  err = open(os.devnull, 'w') if args.quiet else sys.stderr
  try:
    code, summary = run(args.paths, target=args.target, mode=args.mode,
                        annotate=args.annotate, root=args.root,
                        verbose=args.verbose, err=err, jobs=args.jobs,
                        nnx_capture=args.nnx_capture)
    for line in summary.lines():
      err.write(line + '\n')
  finally:
    if args.quiet:
      err.close()
  return code
