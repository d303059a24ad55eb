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
"""Runs the sow codemod over real repositories and tallies the outcome.

Usage::

  python scripts/migrate/acceptance.py --repos DIR [--results FILE]
  FLAX_SOW_REPOS=DIR python scripts/migrate/acceptance.py

``DIR`` holds checkouts (or ``git archive`` extractions, with the commit in a
file ``.commit``) named ``flax``, ``maxtext``, ``tunix`` and ``cax``; missing
ones are skipped, and without ``DIR`` nothing runs (exit 0). Nothing of them
is committed here. Each repository is copied to a temporary folder and the
codemod runs there with ``--write --annotate``, once per target; then:

* NNX sites are counted independently, with ``ast`` (not libcst): calls of
  ``.sow``/``.perturb`` in classes whose bases come from ``flax.nnx`` (or
  that name an ``nnx`` Variable type), and ``nnx.capture``/``nnx.pop`` calls
  that name ``Intermediate``/``Perturbation`` or a class of the repository.
* crashes: internal errors, tracebacks, or an exit code other than 0/3.
* idempotence: a second run, ``--check --annotate``, must change nothing
  (exit 0, or 3 when the repository holds files that do not parse, which
  are reported again).
* every rewritten ``.py`` file must still parse.

* the sound ceiling: the sites a sound rewrite of the code as it is could
  migrate, counted as the codemod's sites less those whose reason (for a
  ``legacy-reader``, the reason of the site it follows) is in ``BEYOND``:
  the result depends on values left on the module, the capture cannot run
  the model (``capture-hazard``; ``kept-module-sow``, a functional capture
  running Flax 0.12.8's own ``Module.sow``), or the site is not the
  codemod's to change.
* other readers: readers of sown values that are no site (attribute reads,
  ``nnx.state`` of ``nnx.Intermediate``, ``__captures__``), reported.

``--jobs N`` is passed to the codemod (default 2). ``--results FILE`` replaces the table
between the markers ``<!-- migrate-acceptance:start -->`` and
``<!-- migrate-acceptance:end -->``.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPOS = ('cax', 'tunix', 'maxtext', 'flax')
# (--target, --nnx-capture): each target for either nnx.capture (and
# Module.sow) the migrated code may run on, Flax 0.12.8's or
# capture_compat's (see hazards.py).
TARGETS = (('capture', 'legacy'), ('capture', 'transform'),
           ('functional', 'legacy'), ('functional', 'transform'))
_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       'migrate_sow.py')
_START, _END = ('<!-- migrate-acceptance:start -->',
                '<!-- migrate-acceptance:end -->')
_FENCE = re.compile(r'^```(?:python|py|python3|ipython3|\{code-cell\}\s*'
                    r'ipython3|\{\s*\.python[^}\n]*\})\s*\n(.*?)^```',
                    re.MULTILINE | re.DOTALL)
_FLAG = re.compile(r'^\S+:\d+:\d+: ([a-z-]+): (.*)$')
# Why a site stays, when no sound rewrite of this code alone could move it:
# the legacy program's result depends on values left on the module, which
# no capture reproduces without changing code elsewhere (a helper's callers,
# a loss that reads an attribute, a pop that also takes Variables assigned
# directly or the values of several calls), or Flax 0.12.8's nnx.capture
# cannot run the model, or the site is not the codemod's to change. Every
# other reason (an earlier call the codemod cannot prove harmless, a type it
# cannot resolve...) is a limit of the codemod: those sites count as
# reachable, below the ceiling.
BEYOND = frozenset({'pop-discarded', 'pop-not-adjacent', 'pop-form',
                    'later-pop', 'attribute-read', 'direct-intermediate',
                    'capture-hazard', 'kept-module-sow', 'outside-paths',
                    'library',
                    'method-outputs', 'kwargs', 'custom-reducer',
                    'module-path', 'multi-instance', 'not-in-module',
                    'nonliteral-name', 'sow-result-used', 'transform',
                    'filter-use', 'state-use', 'escaping-state',
                    'unknown-result', 'nested-consumer', 'to-pure-dict',
                    'to-flat-state', 'tree-leaves', 'no-sow-found'})


def _root_code(code: str, message: str) -> str:
  """The reason a flagged site stays: its own, or for a legacy-reader (or
  legacy-sow) the one of the site it follows, ``which stays (code)`` (the
  code may be cut short with the line, at 200 characters)."""
  if code not in ('legacy-reader', 'legacy-sow'):
    return code
  match = re.search(r'which stays \(([a-z-]+)', message)
  if match is None:
    return code
  found = [c for c in sorted(BEYOND) + ['earlier-call', 'unknown-type']
           if c.startswith(match.group(1))]
  return found[0] if len(found) == 1 else code


def _units(path: str) -> list[str]:
  with open(path, encoding='utf-8', errors='replace') as f:
    text = f.read()
  if path.endswith('.py'):
    return [text]
  if path.endswith('.ipynb'):
    try:
      cells = json.loads(text).get('cells', [])
    except ValueError:
      return []
    return [''.join(c['source']) if isinstance(c['source'], list)
            else c['source'] for c in cells if c.get('cell_type') == 'code']
  return _FENCE.findall(text)


def _parse(code: str):
  code = re.sub(r'^(\s*)([%!].*)$', r'\1pass', code, flags=re.MULTILINE)
  try:
    return ast.parse(code)
  except SyntaxError:
    return None


def _imports(trees) -> tuple[set[str], set[str]]:
  nnx, linen = set(), set()
  for tree in trees:
    for node in ast.walk(tree):
      pairs = []
      if isinstance(node, ast.Import):
        pairs = [(a.name, a.asname or a.name.split('.')[0]) for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module:
        pairs = [(f'{node.module}.{a.name}', a.asname or a.name)
                 for a in node.names]
      for full, local in pairs:
        if full.startswith(('flax.nnx', 'flax.experimental.nnx')):
          nnx.add(local)
        elif full.startswith('flax.linen'):
          linen.add(local)
  return nnx, linen


def _root(node):
  while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
    node = node.value if not isinstance(node, ast.Call) else node.func
  return node.id if isinstance(node, ast.Name) else None


def count_sites(repo: str) -> collections.Counter:
  """NNX sites by kind, found with ``ast`` independently of the codemod."""
  counts = collections.Counter()
  for directory, subdirs, files in os.walk(repo):
    subdirs[:] = [d for d in subdirs if not d.startswith('.')]
    for name in files:
      if not name.endswith(('.py', '.ipynb', '.md')):
        continue
      trees = [t for t in map(_parse, _units(os.path.join(directory, name)))
               if t is not None]
      nnx, linen = _imports(trees)
      for tree in trees:
        enclosing = {}
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
          for inner in ast.walk(cls):
            enclosing[id(inner)] = cls  # the innermost class wins (walk order)
        for node in ast.walk(tree):
          if not (isinstance(node, ast.Call)
                  and isinstance(node.func, ast.Attribute)):
            continue
          attr, text = node.func.attr, ast.unparse(node)
          if attr in ('sow', 'perturb'):
            cls = enclosing.get(id(node))
            bases = {_root(b) for b in cls.bases} if cls else set()
            if bases & linen:
              continue
            if bases & nnx or (attr == 'sow' and node.args and any(
                _root(node.args[0]) == n for n in nnx)):
              counts[attr] += 1
            elif cls is not None and nnx and not linen and not (
                node.args and isinstance(node.args[0], ast.Constant)
                and attr == 'sow'):
              counts[attr] += 1  # a subclass of a repository's NNX class
          elif attr in ('capture', 'pop') and _root(node.func) in nnx:
            if attr == 'pop' and not re.search(
                r'Intermediate|Perturbation|losses|acceptance', text):
              continue
            if attr == 'capture' and '*' in text.split('(', 1)[1][:2]:
              continue
            counts[attr] += 1
  return counts


def _commit(repo: str) -> str:
  marker = os.path.join(repo, '.commit')
  if os.path.exists(marker):
    with open(marker) as f:
      return f.read().strip()[:12]
  result = subprocess.run(['git', '-C', repo, 'rev-parse', 'HEAD'],
                          capture_output=True, text=True, check=False)
  return result.stdout.strip()[:12] or '?'


def _cli(args: list[str], cwd: str):
  start = time.perf_counter()
  result = subprocess.run([sys.executable, _SCRIPT, *args], cwd=cwd,
                          capture_output=True, text=True, check=False)
  return result, time.perf_counter() - start


def _snapshot(directory: str) -> dict[str, bytes]:
  found = {}
  for folder, subdirs, files in os.walk(directory):
    subdirs[:] = [d for d in subdirs if not d.startswith('.')]
    for name in files:
      if name.endswith(('.py', '.ipynb', '.md')):
        path = os.path.join(folder, name)
        with open(path, 'rb') as f:
          found[path] = f.read()
  return found


def run_repo(repo: str, target: str, jobs: int = 1,
             nnx_capture: str | None = None) -> dict:
  """Runs the codemod over a copy of ``repo``; returns one table row."""
  options = ['--target', target, '--jobs', str(jobs)]
  if nnx_capture:
    options += ['--nnx-capture', nnx_capture]
  with tempfile.TemporaryDirectory() as scratch:
    copy = os.path.join(scratch, os.path.basename(repo))
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns('.git'),
                    symlinks=True)
    before = _snapshot(copy)
    first, seconds = _cli([*options, '--write', '--annotate',
                           '--project-root', copy, '.'], copy)
    after = _snapshot(copy)
    again, _ = _cli([*options, '--check', '--annotate',
                     '--project-root', copy, '.'], copy)
  changed = [p for p in after if after[p] != before.get(p)]
  broken = [p for p in changed if p.endswith('.py') and _broken(after[p])]
  flags, readers, roots = (collections.Counter(), collections.Counter(),
                           collections.Counter())
  summary = {}
  counter = None
  for line in first.stderr.splitlines():
    match = _FLAG.match(line)
    if match:
      # The root reason of a site (a legacy-reader names the one it follows).
      roots[_root_code(match.group(1), match.group(2))] += 1
    elif line.startswith('  NNX sites:'):
      summary['line'] = line.strip()
      counter = flags
    elif line.startswith('  other readers of sown values reported:'):
      counter = readers
    elif counter is not None and line.startswith('    '):
      code, _, count = line.strip().partition(': ')
      counter[code] += int(count)
  # Reader flags are no sites: their roots are their own codes.
  for code, count in readers.items():
    roots[code] -= count
  rewritten = re.search(r'rewritten: (\d+)', summary.get('line', ''))
  ok = re.search(r'already fine: (\d+)', summary.get('line', ''))
  sites = re.search(r'NNX sites: (\d+)', summary.get('line', ''))
  crashes = sum(': internal error: ' in l for l in first.stderr.splitlines())
  crashes += int(first.returncode not in (0, 3) or 'Traceback' in first.stderr)
  return {
      'target': target + (f' ({nnx_capture} nnx.capture)' if nnx_capture
                          else ''),
      'files': len(before),
      'changed_files': len(changed),
      'codemod_sites': int(sites.group(1)) if sites else 0,
      'rewritten': int(rewritten.group(1)) if rewritten else 0,
      'already_fine': int(ok.group(1)) if ok else 0,
      'flags': flags,
      'readers': readers,
      'beyond': sum(n for code, n in roots.items() if code in BEYOND),
      'crashes': int(crashes),
      'exit': first.returncode,
      'broken': len(broken),
      'idempotent': again.returncode in (0, 3),
      'seconds': seconds,
      'max_flag_line': max((len(l) for l in first.stderr.splitlines()
                            if _FLAG.match(l)), default=0),
  }


def _broken(data: bytes) -> bool:
  try:
    ast.parse(data)
  except SyntaxError:
    return True
  return False


def table(results: dict) -> str:
  lines = [
      '| repository (commit) | target | files | NNX sites (ast / codemod) '
      '| rewritten | already in target form | migrated | sound ceiling '
      '| flagged (by reason) | other readers reported | crashes '
      '| idempotent | time (s) |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
  ]
  for name, (commit, sites, rows) in results.items():
    for row in rows:
      total = row['codemod_sites'] or 1
      migrated = row['rewritten'] + row['already_fine']
      ceiling = row['codemod_sites'] - row['beyond']
      reasons = ', '.join(f'{k} {v}' for k, v in row['flags'].most_common())
      readers = ', '.join(f'{k} {v}'
                          for k, v in row['readers'].most_common())
      lines.append(
          f"| {name} ({commit}) | {row['target']} | {row['files']} | "
          f"{sum(sites.values())} / {row['codemod_sites']} | "
          f"{row['rewritten']} | {row['already_fine']} | "
          f'{migrated} ({100 * migrated / total:.0f}%) | {ceiling} | '
          f"{sum(row['flags'].values())}: {reasons or '-'} | "
          f"{sum(row['readers'].values())}: {readers or '-'} | "
          f"{row['crashes']} | {'yes' if row['idempotent'] else '**no**'} | "
          f"{row['seconds']:.0f} |")
  return '\n'.join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--repos', default=os.environ.get('FLAX_SOW_REPOS'))
  parser.add_argument('--only', nargs='*', default=REPOS)
  parser.add_argument('--results', default=None)
  parser.add_argument('--jobs', type=int, default=2,
                      help="passed to the codemod's --jobs")
  args = parser.parse_args(argv)
  if not args.repos or not os.path.isdir(args.repos):
    print('acceptance: no --repos/FLAX_SOW_REPOS directory; skipped')
    return 0
  results = {}
  for name in args.only:
    repo = os.path.join(args.repos, name)
    if not os.path.isdir(repo):
      print(f'acceptance: {repo} missing; skipped')
      continue
    rows = [run_repo(repo, target, args.jobs, nnx_capture)
            for target, nnx_capture in TARGETS]
    results[name] = (_commit(repo), count_sites(repo), rows)
    for row in rows:
      print(name, json.dumps({k: v for k, v in row.items()}, default=str))
  text = table(results)
  print(text)
  if args.results:
    with open(args.results, encoding='utf-8') as f:
      old = f.read()
    block = f'{_START}\n{text}\n{_END}'
    if _START in old:
      new = old[:old.index(_START)] + block + old[old.index(_END) + len(_END):]
    else:
      new = old.rstrip('\n') + '\n\n' + block + '\n'
    with open(args.results, 'w', encoding='utf-8') as f:
      f.write(new)
  failed = any(row['crashes'] or row['broken'] or not row['idempotent']
               for _, _, rows in results.values() for row in rows)
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main())
