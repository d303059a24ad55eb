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
"""Runs Flax's static checks on a Flax checkout with our files placed in it.

The checkout is copied to a temporary directory; every tool runs there once
on the pristine copy (the baseline), then ``flax/nnx/sow/`` and
``flax/nnx/capture_compat/`` from this repository are placed in it and the
tool runs again. The checks are the ones Flax runs, with the same command
lines and configuration (the checkout's ``pyproject.toml``):

* ``mypy``: ``mypy --config pyproject.toml flax/ --show-error-codes``, as
  ``tests/run_all_tests.sh --only-mypy`` (``.github/workflows/flax_test.yml``).
  Flax does not pin mypy: its CI installs the newest.
* ``pytype``: ``pytype --jobs auto --config pyproject.toml flax/``, as
  ``tests/run_all_tests.sh --only-pytype``, plus ``--keep-going`` so that one
  failing file does not hide the others (without it ninja stops at the first
  file with an error). Even so ninja skips every target whose dependency
  failed, so each of our files that it did not reach is then checked alone,
  with ninja's own command line. Unpinned too; its last release, 2024.10.11,
  supports Python 3.8 to 3.12 and installs on 3.11. ``--pytype-scope=ours``
  checks our files only (their Flax dependencies are still inferred, errors
  not reported).
* ``ruff``: ruff 0.1.3, as pinned by the checkout's
  ``.pre-commit-config.yaml``; its hook runs ``ruff check --force-exclude``
  on every Python file (here without ``--fix``, so nothing is rewritten).
* ``pyupgrade``: pyupgrade 3.16.0 ``--py310-plus``, the other pre-commit hook
  on Python files; a file it would rewrite is reported with the lines that
  would change.
* ``whitespace``: pre-commit-hooks' ``trailing-whitespace``, on the same
  Python files.

The tools live in their own venv: ``--venv=DIR`` (a relative path is taken
from the current directory), else ``$STATIC_VENV``, else ``build/static-venv``
at this repository's root (``build/`` is ignored by git). It is created on
demand with ``python -m venv`` from this interpreter, holding the tool
versions above and Flax's runtime dependencies (with jax pinned as this
project pins it), plus IPython and tensorboard, which Flax's CI has through
its extras (without them the baseline has import errors); the project's own
venv is not touched.

Copying the checkout and pytype's first run take about 35 minutes on two
cores; ``--workdir=DIR`` keeps the copy and pytype's cache (``.pytype/``)
there, and a later run with the same checkout takes about 5.

Usage, from the repository root::

  python scripts/upstream/check_static.py --flax=/path/to/flax
  python scripts/upstream/check_static.py --flax=PATH --tools=mypy,ruff
  python scripts/upstream/check_static.py --flax=PATH --workdir=build/flax-copy
  # the upstream series: PATCHED (a copy of PATH with it applied) replaces
  # the tree after the baseline; the files it adds or changes are "ours"
  python scripts/upstream/check_static.py --flax=PATH --patched=PATCHED \
      --tools=mypy,pytype --pytype-files=flax/nnx/module.py,...

``--flax`` defaults to ``$FLAX_CHECKOUT``; without either the script says it
skips and exits 0. Per tool it prints the number of errors on the baseline
and with our files, and every error located in our files as
``path:line: code: message``; the full outputs go to ``--out``
(``build/static``). Exits 1 if any error is in our files, 2 if a tool could
not run.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import typing as tp

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
OUR_PATHS = ('flax/nnx/sow', 'flax/nnx/capture_compat')
# Under the repository's build/ (ignored by git), as --out is.
DEFAULT_VENV = os.path.join(REPO, 'build', 'static-venv')
TOOLS = ('mypy', 'pytype', 'ruff', 'pyupgrade', 'whitespace')

# What the tools' venv holds. mypy and pytype are unpinned in Flax's CI (it
# installs the newest); ruff and pyupgrade are pinned by its pre-commit file.
REQUIREMENTS = (
    'mypy',
    'pytype',
    'ruff==0.1.3',
    'pyupgrade==3.16.0',
    # Flax's runtime dependencies, so that the type checkers see the same
    # third-party code as in Flax's CI; jax as this project pins it.
    'jax==0.10.2',
    'jaxlib==0.10.2',
    'numpy>=1.23.2',
    'msgpack',
    'optax',
    'orbax-checkpoint',
    'tensorstore',
    'rich>=11.1',
    'typing_extensions>=4.2',
    'PyYAML>=5.4.1',
    'treescope>=0.1.7',
    'ipython',
    'tensorboard',  # flax.metrics.tensorboard, flax.testing.benchmark
)
# Distributions whose versions are checked (and printed) before a run.
TOOL_MODULES = {'mypy': 'mypy', 'pytype': 'pytype', 'ruff': 'ruff',
                'pyupgrade': 'pyupgrade', 'tensorboard': 'tensorboard'}
SKIP_DIRS = frozenset({'.git', '.pytype', '.mypy_cache', '.ruff_cache',
                       '__pycache__', 'build', '.venv'})


@dataclasses.dataclass(frozen=True, order=True)
class Error:
  """One error reported by a tool, with its path relative to the tree."""

  path: str
  line: int
  code: str
  message: str

  def __str__(self) -> str:
    return f'{self.path}:{self.line}: {self.code}: {self.message}'


@dataclasses.dataclass
class Run:
  """One tool's run on one tree."""

  errors: list[Error]
  returncode: int
  seconds: float
  output: str


# What counts as ours: OUR_PATHS, or with --patched the files that the
# patched tree adds or changes.
OURS: list[str] = list(OUR_PATHS)


def is_ours(path: str) -> bool:
  return any(path == p or path.startswith(p + '/') for p in OURS)


def python_files(root: str) -> list[str]:
  """Every Python file of the tree, as pre-commit's ``types_or`` selects."""
  out = []
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames[:] = sorted(
        d for d in dirnames if d not in SKIP_DIRS and not d.startswith('.'))
    for name in sorted(filenames):
      if name.endswith(('.py', '.pyi')):
        out.append(os.path.relpath(os.path.join(dirpath, name), root))
  return out


# ----------------------------------------------------------------------------
# The tools' venv.


def venv_python(venv: str) -> str:
  return os.path.join(venv, 'bin', 'python')


def tool_versions(venv: str) -> dict[str, str] | None:
  """The tools' versions in ``venv``, or None if one is missing."""
  code = ('import importlib.metadata as m, json; print(json.dumps('
          '{n: m.version(n) for n in %r}))' % (sorted(TOOL_MODULES),))
  try:
    out = subprocess.run([venv_python(venv), '-c', code], check=True,
                         capture_output=True, text=True).stdout
  except (OSError, subprocess.CalledProcessError):
    return None
  return json.loads(out)


def ensure_venv(venv: str) -> dict[str, str]:
  """Creates ``venv`` with the tools if it lacks them; returns versions."""
  versions = tool_versions(venv)
  pins = dict(r.split('==') for r in REQUIREMENTS if '==' in r)
  if versions is not None and all(
      versions[name] == pins[name] for name in versions if name in pins):
    return versions
  print(f'Creating the tools venv {venv} (once) ...', flush=True)
  if not os.path.exists(venv_python(venv)):
    subprocess.run([sys.executable, '-m', 'venv', venv], check=True)
  subprocess.run([venv_python(venv), '-m', 'pip', 'install', '-q',
                  *REQUIREMENTS], check=True)
  versions = tool_versions(venv)
  if versions is None:
    raise RuntimeError(f'{venv}: the tools did not install')
  return versions


# ----------------------------------------------------------------------------
# Running and parsing each tool.

_MYPY = re.compile(r'^(?P<path>[^:\n]+):(?P<line>\d+)(?::\d+)?: error: '
                   r'(?P<msg>.*?)(?:  \[(?P<code>[a-z0-9-]+)\])?$')
_PYTYPE = re.compile(r'^(?P<path>[^:\s]+):(?P<line>\d+):\d+: error: in '
                     r'[^:]*: (?P<msg>.*?) +\[(?P<code>[a-z0-9-]+)\]$')
# pytype colors its errors when run outside ninja.
_ANSI = re.compile(r'\x1b\[[0-9;]*m')
_NINJA_DONE = re.compile(r'^\[\d+/\d+\] (?:check|infer) (?P<module>\S+)$')
_RUFF = re.compile(r'^(?P<path>[^:\n]+):(?P<line>\d+):\d+: '
                   r'(?P<code>[A-Z]+[0-9]+) (?:\[\*\] )?(?P<msg>.*)$')


def _relative(path: str, root: str) -> str:
  path = os.path.normpath(path)
  if os.path.isabs(path):
    real_root = os.path.realpath(root)
    for base in (root, real_root):
      if path.startswith(base + os.sep):
        return os.path.relpath(path, base)
  return path


def _parse(pattern: re.Pattern[str], output: str, root: str) -> list[Error]:
  errors = set()
  for line in _ANSI.sub('', output).splitlines():
    m = pattern.match(line.strip())
    if m:
      errors.add(Error(_relative(m['path'], root), int(m['line']),
                       m['code'] or '', m['msg']))
  return sorted(errors)


def _run(cmd: tp.Sequence[str], root: str, venv: str) -> tuple[int, str,
                                                                 float]:
  env = dict(os.environ)
  env['PATH'] = os.path.join(venv, 'bin') + os.pathsep + env.get('PATH', '')
  env.pop('PYTHONPATH', None)
  env['VIRTUAL_ENV'] = venv
  start = time.monotonic()
  proc = subprocess.run(list(cmd), cwd=root, env=env, capture_output=True,
                        text=True)
  return (proc.returncode, proc.stdout + proc.stderr,
          time.monotonic() - start)


def run_mypy(root: str, venv: str, args: argparse.Namespace) -> Run:
  del args
  cmd = ['mypy', '--config', 'pyproject.toml', 'flax/', '--show-error-codes']
  rc, out, secs = _run(cmd, root, venv)
  return Run(_parse(_MYPY, out, root), rc, secs, out)


def run_pytype(root: str, venv: str, args: argparse.Namespace) -> Run:
  if args.pytype_files:
    targets = [f for f in args.pytype_files
               if os.path.exists(os.path.join(root, f))]
    if not targets:
      return Run([], 0, 0.0, 'pytype: none of --pytype-files exists\n')
    rc, out, secs = _run(['pytype', '--jobs', 'auto', '--config',
                          'pyproject.toml', '--keep-going', *targets],
                         root, venv)
    return Run(_parse(_PYTYPE, out, root), rc, secs, out)
  targets = ['flax/'] if args.pytype_scope == 'all' else list(OUR_PATHS)
  cmd = ['pytype', '--jobs', 'auto', '--config', 'pyproject.toml',
         '--keep-going', *targets]
  if args.pytype_scope == 'ours' and not os.path.exists(
      os.path.join(root, OUR_PATHS[0])):
    return Run([], 0, 0.0, 'pytype: --pytype-scope=ours, no file of ours\n')
  rc, out, secs = _run(cmd, root, venv)
  if os.path.exists(os.path.join(root, OUR_PATHS[0])):
    start = time.monotonic()
    out += _pytype_blocked(root, venv, out)
    secs += time.monotonic() - start
  return Run(_parse(_PYTYPE, out, root), rc, secs, out)


def _ninja_statements(root: str) -> list[dict[str, str]]:
  """The build statements of pytype's ``build.ninja``, in its order."""
  statements: list[dict[str, str]] = []
  rules = {}
  rule = None
  with open(os.path.join(root, '.pytype', 'build.ninja'),
            encoding='utf-8') as f:
    for line in f:
      line = line.rstrip('\n')
      if line.startswith('rule '):
        rule = line.split()[1]
      elif line.startswith('  command = ') and rule:
        rules[rule] = line[len('  command = '):]
      elif line.startswith('build '):
        rule = None
        head, _, tail = line[len('build '):].partition(': ')
        action, src = tail.split(' | ')[0].split()[:2]
        statements.append({'out': head, 'action': action, 'in': src})
      elif line.startswith('  ') and statements and ' = ' in line:
        key, _, value = line.strip().partition(' = ')
        statements[-1][key] = value
  for st in statements:
    st['command'] = rules[st['action']]
    st['infer'] = rules['infer']
  return statements


def _pytype_blocked(root: str, venv: str, output: str) -> str:
  """Checks our modules that ninja never started.

  With ``--keep-going`` ninja still skips every target whose dependency
  failed, so one of our files with an error hides the errors of our files
  that import it. Each such file is checked here with the command ninja
  would have run, after writing the missing ``.pyi`` of its dependencies
  with pytype's ``infer`` command (which reports no errors).
  """
  ran = {m['module'] for m in map(_NINJA_DONE.match, output.splitlines())
         if m}
  ours = {p.replace('/', '.').removesuffix('.py') for p in OUR_PATHS}
  text = []
  for st in _ninja_statements(root):
    mine = any(st['module'] == o or st['module'].startswith(o + '.')
               for o in ours)
    blocked = mine and st['action'] == 'check' and st['module'] not in ran
    if not blocked and os.path.exists(st['out']):
      continue
    cmds = []
    if blocked:
      cmds.append(st['command'])
      text.append(f'[blocked] check {st["module"]}\n')
    cmds.append(st['infer'])  # no-op if check wrote it
    for command in cmds:
      if command is st['infer'] and os.path.exists(st['out']):
        continue
      line = (command.replace('$imports', st['imports'])
              .replace('$module', st['module']).replace('$out', st['out'])
              .replace('$in', st['in']))
      _, out, _ = _run(line.split(), root, venv)
      if command is not st['infer']:
        text.append(out)
  return ''.join(text)


def run_ruff(root: str, venv: str, args: argparse.Namespace) -> Run:
  del args
  files = python_files(root)
  cmd = ['ruff', 'check', '--force-exclude', '--no-fix', '--no-cache',
         '--output-format', 'text', *files]
  rc, out, secs = _run(cmd, root, venv)
  return Run(_parse(_RUFF, out, root), rc, secs, out)


def run_pyupgrade(root: str, venv: str, args: argparse.Namespace) -> Run:
  """Runs pyupgrade on a scratch copy; reports the lines it would change."""
  del args
  files = [f for f in python_files(root) if f.endswith('.py')]
  scratch = tempfile.mkdtemp(prefix='pyupgrade-')
  try:
    for rel in files:
      os.makedirs(os.path.join(scratch, os.path.dirname(rel)), exist_ok=True)
      shutil.copy2(os.path.join(root, rel), os.path.join(scratch, rel))
    rc, out, secs = _run(['pyupgrade', '--py310-plus', *files], scratch,
                         venv)
    errors = []
    for rel in files:
      with open(os.path.join(root, rel), encoding='utf-8') as f:
        before = f.read().splitlines()
      with open(os.path.join(scratch, rel), encoding='utf-8') as f:
        after = f.read().splitlines()
      if before == after:
        continue
      matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
      for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == 'equal':
          continue
        new = ' / '.join(s.strip() for s in after[j1:j2]) or '(removed)'
        errors.append(Error(rel, i1 + 1, 'pyupgrade',
                            f'--py310-plus rewrites to: {new}'))
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  return Run(sorted(errors), rc, secs, out)


def run_whitespace(root: str, venv: str, args: argparse.Namespace) -> Run:
  """Lines that pre-commit's ``trailing-whitespace`` hook would strip."""
  del venv, args
  start = time.monotonic()
  errors = []
  for rel in python_files(root):
    with open(os.path.join(root, rel), 'rb') as f:
      for number, raw in enumerate(f, 1):
        line = raw.rstrip(b'\r\n')
        if line != line.rstrip():
          errors.append(Error(rel, number, 'trailing-whitespace',
                              'trailing whitespace'))
  out = ''.join(f'{e}\n' for e in errors)
  return Run(errors, 1 if errors else 0, time.monotonic() - start, out)


RUNNERS: dict[str, tp.Callable[[str, str, argparse.Namespace], Run]] = {
    'mypy': run_mypy,
    'pytype': run_pytype,
    'ruff': run_ruff,
    'pyupgrade': run_pyupgrade,
    'whitespace': run_whitespace,
}


# ----------------------------------------------------------------------------
# Placing our files, comparing and reporting.


def copy_checkout(src: str, dst: str) -> None:
  """Copies the checkout to ``dst``; over a previous copy if there is one.

  Modification times are kept, so that in a reused ``dst`` pytype's cache
  (``.pytype/``, not copied) only redoes what changed.
  """
  for rel in OUR_PATHS:
    path = os.path.join(dst, rel)
    if os.path.isdir(path):
      shutil.rmtree(path)
    elif os.path.exists(path):
      os.remove(path)
  shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True,
                  ignore=shutil.ignore_patterns(*SKIP_DIRS))


def changed_files(root: str, patched: str) -> list[str]:
  """Files of the tree ``patched`` that ``root`` lacks or has otherwise."""
  changed = []
  for dirpath, dirnames, filenames in os.walk(patched):
    dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
    for name in sorted(filenames):
      rel = os.path.relpath(os.path.join(dirpath, name), patched)
      mine = os.path.join(root, rel)
      if not os.path.exists(mine) or not filecmp.cmp(
          mine, os.path.join(patched, rel), shallow=False):
        changed.append(rel)
  return changed


def place_patched(root: str, patched: str) -> list[str]:
  """Makes the tree ``root`` the tree ``patched``; returns what changed."""
  changed = changed_files(root, patched)
  for rel in changed:
    os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
    shutil.copy2(os.path.join(patched, rel), os.path.join(root, rel))
  return changed


def place_ours(root: str) -> None:
  """Copies our files into the tree ``root``, replacing any already there."""
  for rel in OUR_PATHS:
    src, dst = os.path.join(REPO, rel), os.path.join(root, rel)
    if os.path.isdir(dst):
      shutil.rmtree(dst)
    if os.path.isdir(src):
      shutil.copytree(src, dst, ignore=shutil.ignore_patterns('__pycache__'))
    else:
      shutil.copy2(src, dst)


def _key(error: Error) -> tuple[str, str, str]:
  # Lines move when files change; an error is the same one if its path, code
  # and message are.
  return (error.path, error.code, error.message)


def report(tool: str, base: Run, ours: Run) -> list[Error]:
  """Prints one tool's comparison; returns the errors in our files."""
  in_ours = [e for e in ours.errors if is_ours(e.path)]
  base_keys = {_key(e) for e in base.errors}
  new_elsewhere = [e for e in ours.errors
                   if not is_ours(e.path) and _key(e) not in base_keys]
  ours_keys = {_key(e) for e in ours.errors}
  gone = [e for e in base.errors if _key(e) not in ours_keys]
  print(f'== {tool}: baseline {len(base.errors)} errors '
        f'(exit {base.returncode}, {base.seconds:.0f}s); with our files '
        f'{len(ours.errors)} (exit {ours.returncode}, {ours.seconds:.0f}s); '
        f'in our files {len(in_ours)}')
  for e in in_ours:
    print(f'  {e}')
  if new_elsewhere:
    print(f'  new errors outside our files: {len(new_elsewhere)}')
    for e in new_elsewhere:
      print(f'    {e}')
  if gone:
    print(f'  baseline errors gone with our files: {len(gone)}')
  for run in (base, ours):
    if run.returncode not in (0, 1) or (run.returncode and not run.errors):
      print(f'  note: exit {run.returncode} with {len(run.errors)} parsed '
            'errors; see the log')
  return in_ours


def parse_args(argv: tp.Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--flax', default=os.environ.get('FLAX_CHECKOUT'),
                      help='a Flax checkout (default: $FLAX_CHECKOUT)')
  parser.add_argument(
      '--venv', default=os.environ.get('STATIC_VENV', DEFAULT_VENV),
      help='the tools venv, created if missing (default: $STATIC_VENV or '
      'build/static-venv in this repository)')
  parser.add_argument('--tools', default=','.join(TOOLS),
                      help=f'comma-separated subset of {",".join(TOOLS)}')
  parser.add_argument('--pytype-scope', choices=('all', 'ours'),
                      default='all',
                      help='pytype on flax/ as Flax CI (all) or on our '
                      'files only (ours)')
  parser.add_argument('--out', default=os.path.join(REPO, 'build', 'static'),
                      help='where the tools outputs and summary.json go')
  parser.add_argument(
      '--patched',
      help='a patched copy of --flax (the upstream series applied): it'
      ' replaces the tree after the baseline, instead of our files, and'
      ' the files it adds or changes count as ours')
  parser.add_argument(
      '--pytype-files', default='',
      help='comma-separated files: pytype on them only (both runs)')
  parser.add_argument('--keep', action='store_true',
                      help='keep the temporary copy of the checkout')
  parser.add_argument('--workdir',
                      help='copy the checkout here instead of a temporary '
                      'directory, and keep it: a later run with the same '
                      'checkout reuses its pytype cache (minutes, not half '
                      'an hour)')
  args = parser.parse_args(argv)
  # The tools run from the checkout's copy: the venv's path must not depend
  # on the working directory.
  args.venv = os.path.abspath(args.venv)
  args.tools = [t.strip() for t in args.tools.split(',') if t.strip()]
  args.pytype_files = [f for f in args.pytype_files.split(',') if f]
  unknown = set(args.tools) - set(TOOLS)
  if unknown:
    parser.error(f'unknown tools: {sorted(unknown)}')
  return args


def main(argv: tp.Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  if not args.flax or not os.path.isfile(
      os.path.join(args.flax, 'pyproject.toml')):
    print('check_static: skipped, no Flax checkout (pass --flax=PATH or set '
          f'FLAX_CHECKOUT; got {args.flax!r})')
    return 0
  started = time.monotonic()
  versions = ensure_venv(args.venv)
  print('tools: ' + ', '.join(f'{k} {v}' for k, v in sorted(
      versions.items())) + f' (venv {args.venv})')
  os.makedirs(args.out, exist_ok=True)
  if args.workdir:
    tmp, root = None, os.path.abspath(args.workdir)
  else:
    tmp = tempfile.mkdtemp(prefix='check-static-')
    root = os.path.join(tmp, 'flax')
  # One tree: the baseline runs first, then our files are placed in it, so
  # that pytype's cache (.pytype/) only has to redo what our files change.
  summary: dict[str, tp.Any] = {'checkout': os.path.abspath(args.flax),
                                'versions': versions, 'tools': {}}
  failed_to_run = []
  try:
    copy_checkout(args.flax, root)
    if any(os.path.exists(os.path.join(root, p)) for p in OUR_PATHS):
      print('note: the checkout already has our paths; the baseline '
            'includes its copies')
    base = {}
    for tool in args.tools:
      print(f'-- {tool}: baseline ...', flush=True)
      base[tool] = RUNNERS[tool](root, args.venv, args)
    if args.patched:
      OURS[:] = place_patched(root, args.patched)
      summary['changed'] = list(OURS)
      print(f'placed {args.patched}: {len(OURS)} files added or changed')
    else:
      place_ours(root)
    all_ours = []
    for tool in args.tools:
      print(f'-- {tool}: with our files ...', flush=True)
      ours = RUNNERS[tool](root, args.venv, args)
      for mode, run in (('baseline', base[tool]), ('ours', ours)):
        with open(os.path.join(args.out, f'{tool}.{mode}.log'), 'w',
                  encoding='utf-8') as f:
          f.write(run.output)
      in_ours = report(tool, base[tool], ours)
      all_ours += in_ours
      if any(r.returncode not in (0, 1) or (r.returncode and not r.errors)
             for r in (base[tool], ours)):
        failed_to_run.append(tool)
      summary['tools'][tool] = {
          'baseline': len(base[tool].errors),
          'with_ours': len(ours.errors),
          'in_ours': [str(e) for e in in_ours],
          'seconds': [round(base[tool].seconds, 1), round(ours.seconds, 1)],
          'exit': [base[tool].returncode, ours.returncode],
      }
  finally:
    if args.keep or tmp is None:
      print(f'kept {root}')
    else:
      shutil.rmtree(tmp, ignore_errors=True)
  elapsed = time.monotonic() - started
  summary['seconds'] = round(elapsed, 1)
  with open(os.path.join(args.out, 'summary.json'), 'w',
            encoding='utf-8') as f:
    json.dump(summary, f, indent=2)
  print(f'{len(all_ours)} errors in our files; {elapsed:.0f}s; logs in '
        f'{args.out}')
  if all_ours:
    return 1
  return 2 if failed_to_run else 0


if __name__ == '__main__':
  sys.exit(main())
