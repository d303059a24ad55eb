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

import collections
import dataclasses
import difflib
import os
import re
import sys
import tempfile
import textwrap
import time

from . import decide as decide_lib
from . import hazards, holders, parallel, plan, reading, reexports
from . import progress as progress_lib
from .analysis import FileAnalysis
from .flags import Flag

EXIT_OK, EXIT_CHANGES, EXIT_USAGE = 0, 1, 2
EXIT_UNREADABLE, EXIT_INTERNAL, EXIT_UNWRITABLE = 3, 4, 5


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
  # Readers of sown values that are no sites (decide.reader_flags).
  readers: collections.Counter = dataclasses.field(
      default_factory=collections.Counter)
  errors: list[str] = dataclasses.field(default_factory=list)
  internal: list[str] = dataclasses.field(default_factory=list)
  flags: list[Flag] = dataclasses.field(default_factory=list)
  seconds: float = 0.0
  # The nnx.capture (and Module.sow) the decisions assumed.
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
    if self.readers:
      out.append(f'  other readers of sown values reported: '
                 f'{sum(self.readers.values())}')
      for code, count in sorted(self.readers.items(),
                                key=lambda i: (-i[1], i[0])):
        out.append(f'    {code}: {count}')
    return out


def run(paths: list[str], *, target: str = 'capture', mode: str = 'diff',
        annotate: bool = False, root: str | None = None,
        verbose: bool = False, out=None, err=None, jobs: int = 1,
        nnx_capture: str = hazards.LEGACY, search_path=None,
        progress: bool = False, **_unused):
  """Runs the codemod over ``paths``; returns (exit code, Summary).

  ``nnx_capture``: the ``nnx.capture`` (and ``Module.sow``) the migrated
  code will run on, ``'legacy'`` or ``'transform'`` (see ``hazards.py``);
  ``'auto'`` (the command line's default): the one of the Flax installed
  here. Called from code, the default is ``'legacy'``, which does not
  depend on what is installed.

  ``search_path``: where the libraries the project imports are found
  (``libraries.py``); by default ``sys.path``. ``progress``: draw a
  progress bar on ``err`` if it is a terminal.
  """
  out, err = out or sys.stdout, err or sys.stderr
  start = time.perf_counter()
  summary = Summary()
  # Both targets depend on it: the functional target's captures cannot run
  # Flax 0.12.8's own Module.sow (decide._runs_kept).
  summary.nnx_capture = (hazards.installed_capture()
                         if nnx_capture == 'auto' else nnx_capture)
  given = reading.find_files(paths)
  summary.files = len(given)
  root = os.path.abspath(root or reading.project_root(paths))
  # Paths in flags, diffs and notes are relative to the project root (a
  # note written into a file must not depend on where the command ran).
  base = root
  # Consumers are searched in the whole project, even on a partial run.
  project_files = [p for p in reading.find_files([root]) if p not in set(given)]
  bar = progress_lib.Progress(err, enabled=progress)
  pool, data = parallel.Pool(jobs, bar), {}
  try:
    with bar:
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
    pattern = None if round_ == 0 else reading.attribute_re(analyses)
    reading.analyse_all(todo, given, base, root, verbose, err, summary,
                        analyses, unknown, skipped, pattern, pool, data,
                        description='analysing' if round_ == 0 else
                        'attribute reads')
    # Files that mention none of the APIs may still read a sown value as
    # an attribute (model.features.value): a second look at those.
    todo, skipped = skipped, []
    if not todo:
      break
  aliases = reexports.collect(root, given + project_files, reading.read)
  cheap: dict[str, list[holders.ClassNames]] = {}
  calls: dict[str, dict[str, set[str]]] = {}  # library classes made
  while True:
    reading.analyse_bases(given + project_files, root, aliases, analyses,
                          verbose, err, summary, unknown, base, pool, data,
                          search_path, calls)
    # The classes that may hold the analysed ones, in files that use none
    # of the APIs (holders.py); then the bases and libraries they name.
    if not reading.analyse_holders(given + project_files, given, root, base,
                                   verbose, err, summary, analyses, unknown,
                                   pool, data, cheap):
      break
  # The holders and libraries read since may sow names that the files not
  # analysed read as attributes (a library's sow, read in a main.py naming
  # no API): a last look at those, with every name known now.
  if reading.attribute_re(analyses).pattern != (
      pattern.pattern if pattern is not None else None):
    looked = {path for path, *_ in unknown}
    reading.analyse_all(
        [p for p in given + project_files
         if p not in analyses and p not in looked], given, base, root,
        verbose, err, summary, analyses, unknown, [],
        reading.attribute_re(analyses), pool, data,
        description='attribute reads')
  failed: set[str] = set()
  results = {}
  # Plan: decide, rewrite in memory; a file that fails to rewrite is taken
  # out and the decisions are made again without it.
  for _ in range(10):
    project = _project(analyses, failed, aliases)
    decisions = decide_lib.decide(
        project, target, summary.nnx_capture or hazards.LEGACY,
        {analyses[p].path for p in given if p in analyses})
    _block_unknown(project, decisions, unknown, target)
    modes = {s.name: s.mode for s in project.sows if s.name}
    readers = collections.defaultdict(list)  # noted with --annotate
    if annotate:
      for found in decide_lib.reader_flags(project, target):
        readers[found[0].path].append(plan.reader_flag(*found))
    results, new_failure = {}, False
    jobs = []
    for path in given:
      analysis = analyses.get(path)
      if analysis is None or path in failed:
        continue
      wanted = [decisions.get(id(s)) for s in parallel.sites_of(analysis)]
      if not readers[analysis.path] and not any(
          d is not None and (d.action == decide_lib.REWRITE or (
              annotate and d.action == 'flag')) for d in wanted):
        continue  # nothing to change
      jobs.append((path, analysis.path, root, data[path], wanted, target,
                   annotate, modes, None if pool.parallel else analysis,
                   sorted(readers[analysis.path])))
    done = pool.map(parallel.rewrite, jobs, 'rewriting',
                    [len(job[3]) for job in jobs])
    for job, (status, *payload) in zip(jobs, done):
      if status == 'ok':
        results[job[0]] = payload[0]
        payload[0].real = job[0]
        continue
      summary.internal.append(reading.one_line(
          f'{job[1]}: internal error: {payload[0]}'))
      if verbose:
        err.write(payload[1])
      failed.add(job[0])
      new_failure = True
    if not new_failure:
      break
  _tally(summary, project, decisions, given, analyses, results, err, target)
  changed = [r for r in results.values() if r.new is not None]
  summary.changed = len(changed)
  if mode == 'write':
    unwritable = [r.path for r in changed if not _writable(r.real)]
    if unwritable:
      for path in unwritable:
        err.write(reading.one_line(f'{path}: cannot write (permission denied); '
                            'nothing was written') + '\n')
      summary.seconds = time.perf_counter() - start
      return EXIT_UNWRITABLE, summary
    for result in changed:
      _write(result.real, result.new)
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


def _project(analyses, failed, aliases=None) -> decide_lib.Project:
  sites, classes, others = [], [], []
  state_names = collections.defaultdict(set)
  aliases = dict(aliases or {})
  for path, analysis in analyses.items():
    for unit in analysis.units:
      aliases.update(unit.facts.aliases)  # ModuleList = nnx.List
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


def _tally(summary, project, decisions, given, analyses, results, err,
           target):
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
  readers = {plan.reader_flag(other, code, detail)
             for other, code, detail in decide_lib.reader_flags(project,
                                                                target)
             if other.path in given_paths}
  for flag in sorted(set(flags)):
    summary.flagged[flag.code] += 1
  for flag in readers:
    summary.readers[flag.code] += 1
  flags = sorted(set(flags) | readers)
  for flag in flags:
    write_flag(err, flag)
  summary.flags = flags


def write_flag(err, flag: Flag, width: int | None = None) -> None:
  """One flag, whole: one line, or wrapped to ``width`` (by default the
  width of ``err`` if it is a terminal)."""
  text = str(flag)
  width = _terminal_width(err) if width is None else width
  if width:
    text = textwrap.fill(text, width, subsequent_indent='    ',
                         break_long_words=False, break_on_hyphens=False)
  err.write(text + '\n')


def _terminal_width(stream) -> int:
  try:
    if not stream.isatty():
      return 0
    return os.get_terminal_size(stream.fileno()).columns
  except (AttributeError, OSError, ValueError):
    return 0


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
  # Paths relative to the project root, as git writes them: `git apply` and
  # `patch -p1` run there take it (a file outside the root keeps its
  # absolute path, without the leading slash: apply it from /).
  # Lines end at '\n' only, as patch reads them (str.splitlines would also
  # split at a form feed or '\r' inside a line).
  old = re.findall(r'[^\n]*\n|[^\n]+$', result.old.decode('utf-8', 'replace'))
  new = re.findall(r'[^\n]*\n|[^\n]+$', result.new.decode('utf-8', 'replace'))
  path = result.path.replace(os.sep, '/').lstrip('/')
  lines = difflib.unified_diff(old, new, fromfile=f'a/{path}',
                               tofile=f'b/{path}')
  return ''.join(line if line.endswith('\n') else
                 line + '\n\\ No newline at end of file\n' for line in lines)
