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
"""Runs Flax's own ``tests/nnx`` and guide with ``capture_compat`` installed.

Flax's tests run as its CI runs them (``tests/run_all_tests.sh``,
``.github/workflows/flax_test.yml``): from the checkout's root, so that its
``pyproject.toml`` pytest settings apply (every warning is an error), with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``,
``JAX_NUMPY_RANK_PROMOTION=raise`` and ``FLAX_PROFILE=1``, on pytest-xdist
workers if it is installed. ``compat_plugin.py`` (beside this script)
installs the layer in ``pytest_configure``; ``results_plugin.py`` records
every test's outcome. The tests exercise the Flax installed in this
environment (the checkout only provides them), so the checkout should be
that version: Flax 0.12.8 is commit 3a491108.

Usage, from the repository root in its venv::

  # tests/nnx with the layer installed
  python scripts/upstream/run_flax_nnx_tests.py --flax=/path/to/flax
  # and without it: which failures come from the layer, which from the
  # environment
  python scripts/upstream/run_flax_nnx_tests.py --flax=PATH --baseline
  # docs_nnx/guides/extracting_intermediates, code cell by code cell
  python scripts/upstream/run_flax_nnx_tests.py --flax=PATH --guide
  # more pytest arguments
  python scripts/upstream/run_flax_nnx_tests.py --flax=PATH -- -k capture

``--flax`` defaults to ``$FLAX_CHECKOUT``; without either, the script says it
skips and exits 0. Each test run writes ``MODE.log`` (pytest's output) and
``MODE.jsonl`` (one line per test report) to ``--out`` (``build/upstream``);
``--summarize-only`` prints the summary of the results already there. The
guide runs in this process, in one namespace, skipping only the cells that
read the private ``__captures__`` attribute (legacy internals). Exits 1 if a
test fails only with the layer (with ``--baseline``; else if any test fails)
or a guide cell fails.
"""

from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import sys
import traceback
import warnings

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
_DEFAULT_OUT = os.path.join(_REPO, 'build', 'upstream')
_GUIDE = os.path.join('docs_nnx', 'guides', 'extracting_intermediates')
_LAYER, _BASELINE = 'layer', 'baseline'
_FAILING = ('failed', 'error')
_STATUSES = ('passed', 'failed', 'error', 'skipped', 'xfailed', 'xpassed')
# What Flax's CI sets for its pytest run (tests/run_all_tests.sh), besides
# XLA_FLAGS=_DEVICE_COUNT_FLAG.
_CI_ENV = {
    'JAX_NUMPY_RANK_PROMOTION': 'raise',
    'FLAX_PROFILE': '1',
}
_DEVICE_COUNT_FLAG = '--xla_force_host_platform_device_count=4'


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      description=__doc__.splitlines()[0],
      formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  parser.add_argument(
      '--flax',
      default=os.environ.get('FLAX_CHECKOUT'),
      help='a Flax checkout (default: $FLAX_CHECKOUT)',
  )
  parser.add_argument(
      '--baseline',
      action='store_true',
      help='also run without the layer, and compare',
  )
  parser.add_argument(
      '--guide',
      action='store_true',
      help='run the extracting_intermediates guide instead of the tests',
  )
  parser.add_argument(
      '--tests',
      default=os.path.join('tests', 'nnx'),
      help='the tests to run, relative to the checkout (default: tests/nnx)',
  )
  parser.add_argument(
      '--workers',
      type=int,
      default=2,
      help='pytest-xdist workers if it is installed; 0: none (default: 2)',
  )
  parser.add_argument(
      '--out', default=_DEFAULT_OUT, help='where results go (build/upstream)'
  )
  parser.add_argument(
      '--summarize-only',
      action='store_true',
      help='do not run pytest; summarize the results in --out',
  )
  parser.add_argument(
      'pytest_args', nargs='*', help='more pytest arguments, after --'
  )
  return parser.parse_args(argv)


def _modes(args: argparse.Namespace) -> list[str]:
  """The modes to run, baseline first (before the layer is ever imported)."""
  return [_BASELINE, _LAYER] if args.baseline else [_LAYER]


def _check_version(checkout: str) -> None:
  """Warns if the checkout is not the installed Flax's version."""
  with open(os.path.join(checkout, 'flax', 'version.py')) as f:
    match = re.search(r"__version__\s*=\s*'([^']+)'", f.read())
  tests_version = match.group(1) if match else '?'
  installed = importlib.metadata.version('flax')
  print(f'checkout: {checkout} (Flax {tests_version}); installed: {installed}')
  if tests_version != installed:
    print(
        f'warning: the checkout is Flax {tests_version} but Flax {installed}'
        ' is installed: its tests may not fit the installed code.'
    )


# ---------------------------------------------------------------------------
# Flax's tests
# ---------------------------------------------------------------------------


def ci_environment(mode: str) -> dict[str, str]:
  """This process's environment with Flax's CI settings, for ``mode``."""
  env = dict(os.environ, **_CI_ENV)
  xla_flags = env.get('XLA_FLAGS', '')
  if 'xla_force_host_platform_device_count' not in xla_flags:
    env['XLA_FLAGS'] = f'{xla_flags} {_DEVICE_COUNT_FLAG}'.strip()
  # Never import the checkout's `flax/` package (pytest runs from its root,
  # and xdist workers start with `python -c`): test the installed Flax.
  env['PYTHONSAFEPATH'] = '1'
  paths = [_HERE] + ([_REPO] if mode == _LAYER else [])
  if env.get('PYTHONPATH'):
    paths.append(env['PYTHONPATH'])
  env['PYTHONPATH'] = os.pathsep.join(paths)
  return env


def pytest_command(
    mode: str, results: str, tests: str, workers: int, extra: list[str]
) -> list[str]:
  """The pytest command line of one run."""
  command = [sys.executable, '-P', '-m', 'pytest', tests, '-rfE']
  command += ['-p', 'no:cacheprovider', '-p', 'results_plugin']
  command += [f'--upstream-results={results}']
  if mode == _LAYER:
    command += ['-p', 'compat_plugin']
  if workers and importlib.util.find_spec('xdist') is not None:
    command += ['-n', str(workers)]
  return command + extra


def run_tests(checkout: str, mode: str, args: argparse.Namespace) -> None:
  """Runs the tests in ``mode``; pytest's output goes to ``MODE.log``."""
  results = os.path.join(args.out, f'{mode}.jsonl')
  log = os.path.join(args.out, f'{mode}.log')
  command = pytest_command(
      mode, results, args.tests, args.workers, args.pytest_args
  )
  env = ci_environment(mode)
  shown = shlex.join(command)
  print(f'[{mode}] cd {checkout} && {_env_prefix(env)}{shown}')
  print(f'[{mode}] log: {log}', flush=True)
  with open(log, 'w') as f:
    code = subprocess.call(
        command, cwd=checkout, env=env, stdout=f, stderr=subprocess.STDOUT
    )
  print(f'[{mode}] pytest exited with {code}', flush=True)


def _env_prefix(env: dict[str, str]) -> str:
  names = [*_CI_ENV, 'XLA_FLAGS', 'PYTHONSAFEPATH', 'PYTHONPATH']
  return ''.join(f'{name}={shlex.quote(env[name])} ' for name in names)


def load_outcomes(path: str) -> dict[str, tuple[str, str]]:
  """``{test id: (status, message)}`` from a results file."""
  reports = collections.defaultdict(list)
  with open(path) as f:
    for line in f:
      record = json.loads(line)
      reports[record['nodeid']].append(record)
  return {nodeid: _outcome(records) for nodeid, records in reports.items()}


def _outcome(records: list[dict]) -> tuple[str, str]:
  """One test's status, as pytest's summary counts it, and its message."""
  by_phase = {record['when']: record for record in records}
  call = by_phase.get('call')
  if call is not None and call['outcome'] == 'failed':
    return 'failed', call['message']
  for phase in ('collect', 'setup', 'teardown'):
    record = by_phase.get(phase)
    if record is not None and record['outcome'] == 'failed':
      return 'error', f'({phase}) {record["message"]}'
  record = call if call is not None else by_phase.get('setup')
  if record is None:
    return 'error', 'no setup or call report'
  if record['wasxfail']:
    return ('xfailed' if record['outcome'] == 'skipped' else 'xpassed'), ''
  if record['outcome'] == 'skipped':  # with its reason
    return 'skipped', record['message']
  return record['outcome'], ''


def print_test_summary(outcomes: dict[str, dict]) -> bool:
  """Prints counts per mode and the layer's failures; True if none."""
  print('\nmode      ' + ' '.join(f'{s:>8}' for s in _STATUSES) + '    total')
  for mode, by_id in outcomes.items():
    counts = collections.Counter(status for status, _ in by_id.values())
    cells = ' '.join(f'{counts[s]:>8}' for s in _STATUSES)
    print(f'{mode:<9} {cells} {len(by_id):>8}')
  layer = outcomes.get(_LAYER)
  if layer is None:
    return True
  baseline = outcomes.get(_BASELINE, {})
  only_layer = _failing(layer, exclude=baseline)
  title = 'fail only with the layer' if baseline else 'fail with the layer'
  _print_ids(title, only_layer, layer)
  if baseline:
    _print_ids('fail only without the layer', _failing(baseline, layer),
               baseline)
    both = sorted(set(_failing(layer)) & set(_failing(baseline)))
    _print_ids('fail in both modes (the environment)', both, layer)
  return not only_layer


def _failing(by_id: dict, exclude: dict | None = None) -> list[str]:
  """Failing ids of ``by_id`` that do not fail in ``exclude``."""
  exclude = exclude or {}
  return sorted(
      nodeid
      for nodeid, (status, _) in by_id.items()
      if status in _FAILING
      and exclude.get(nodeid, ('missing', ''))[0] not in _FAILING
  )


def _print_ids(title: str, ids: list[str], by_id: dict) -> None:
  print(f'\n{title}: {len(ids)}')
  for nodeid in ids:
    status, message = by_id[nodeid]
    print(f'  {nodeid} [{status}]\n      {_one_line(message, 150)}')


def tests_main(checkout: str, args: argparse.Namespace) -> int:
  tests = os.path.join(checkout, args.tests)
  if not os.path.exists(tests):
    print(f'error: {tests} does not exist')
    return 2
  os.makedirs(args.out, exist_ok=True)
  outcomes = {}
  for mode in _modes(args):
    if not args.summarize_only:
      run_tests(checkout, mode, args)
    results = os.path.join(args.out, f'{mode}.jsonl')
    if not os.path.exists(results):
      print(f'error: no results for {mode} in {results}')
      return 2
    outcomes[mode] = load_outcomes(results)
  return 0 if print_test_summary(outcomes) else 1


# ---------------------------------------------------------------------------
# The guide
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class CellResult:
  """What running one code cell gave."""

  index: int  # 1-based, among code cells
  where: str  # the cell's first line in the guide's file, e.g. 'md:77'
  status: str  # 'ran', 'skipped' or 'failed'
  detail: str  # one line: the value shown, why skipped, or the exception
  value: str = ''  # the value the cell displays, for comparison


def guide_cells(checkout: str) -> tuple[str, list[tuple[str, str]]]:
  """The guide's path and its code cells, ``(where, source)``, by jupytext."""
  import jupytext  # pylint: disable=g-import-not-at-top

  for extension in ('.md', '.ipynb'):
    path = os.path.join(checkout, _GUIDE + extension)
    if os.path.exists(path):
      notebook = jupytext.read(path)
      sources = [c.source for c in notebook.cells if c.cell_type == 'code']
      return path, list(zip(_locations(path, sources), sources))
  raise FileNotFoundError(os.path.join(checkout, _GUIDE + '.md'))


def _locations(path: str, sources: list[str]) -> list[str]:
  """Each cell's first line in a text file (``md:LINE``), else ``?``."""
  extension = os.path.splitext(path)[1][1:]
  with open(path) as f:
    text = f.read()
  where, offset = [], 0
  for source in sources:
    found = text.find(source, offset) if source else -1
    if found < 0 or extension == 'ipynb':
      where.append('?')
      continue
    where.append(f'{extension}:{text.count(chr(10), 0, found) + 1}')
    offset = found + len(source)
  return where


def reads_captures(source: str) -> bool:
  """Whether a cell reads the private ``__captures__`` attribute."""
  try:
    tree = ast.parse(source)
  except SyntaxError:
    return '__captures__' in source
  return any(
      (isinstance(node, ast.Attribute) and node.attr == '__captures__')
      or (isinstance(node, ast.Constant) and node.value == '__captures__')
      for node in ast.walk(tree)
  )


def run_cell(source: str, namespace: dict, filename: str) -> tuple[str, str]:
  """Runs a cell as a notebook does; returns its displayed value and output.

  The cell's last expression, if any, is evaluated separately: its value is
  what the notebook would display.
  """
  tree = ast.parse(source, filename)
  last = None
  if tree.body and isinstance(tree.body[-1], ast.Expr):
    last = ast.Expression(tree.body.pop().value)
  stdout = io.StringIO()
  with contextlib.redirect_stdout(stdout):
    code = compile(tree, filename, 'exec')
    exec(code, namespace)  # pylint: disable=exec-used
    value = None
    if last is not None:
      code = compile(last, filename, 'eval')
      value = eval(code, namespace)  # pylint: disable=eval-used
  shown = '' if value is None else repr(value)
  return shown, stdout.getvalue()


def _one_line(text: str, width: int = 110) -> str:
  text = ' '.join(text.split())
  return text if len(text) <= width else text[: width - 3] + '...'


def _exception_line(error: BaseException, filename: str) -> str:
  """``Type: first line of message (cell line N)``."""
  lines = [line for line in str(error).splitlines() if line.strip()]
  text = f'{type(error).__name__}: {lines[0] if lines else ""}'
  cell_lines = [
      frame.lineno
      for frame in traceback.extract_tb(error.__traceback__)
      if frame.filename == filename
  ]
  if cell_lines:
    text += f' (cell line {cell_lines[-1]})'
  return text


def _warning_note(caught: list) -> str:
  if not caught:
    return ''
  first = caught[0]
  message = _one_line(str(first.message), 60)
  kind = first.category.__name__
  return f' [{len(caught)} warning(s), first {kind}: {message}]'


def _shown(value: str, printed: str) -> str:
  if value:
    return _one_line(f'=> {value}')
  if printed.strip():
    return _one_line(f'prints: {printed}')
  return '(no output)'


def run_guide(
    cells: list[tuple[str, str]], mode: str
) -> list[CellResult]:
  """Runs the code cells in one namespace, in ``mode``."""
  namespace = {'__name__': '__main__'}
  results = []
  for index, (where, source) in enumerate(cells, 1):
    if reads_captures(source):
      results.append(CellResult(
          index, where, 'skipped', 'reads the private __captures__ attribute'
      ))
      continue
    filename = f'<{mode} cell {index}>'
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      try:
        shown, printed = run_cell(source, namespace, filename)
      except Exception as e:  # pylint: disable=broad-except
        results.append(CellResult(
            index, where, 'failed', _exception_line(e, filename)
        ))
        continue
    detail = _shown(shown, printed) + _warning_note(caught)
    results.append(CellResult(index, where, 'ran', detail, shown + printed))
  return results


def _install_layer() -> None:
  if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
  import _worktree  # noqa: F401  pylint: disable=g-import-not-at-top
  from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top

  capture_compat.install()


def print_guide_report(
    path: str, by_mode: dict[str, list[CellResult]]
) -> bool:
  """Prints every cell's result per mode; True if no cell failed."""
  print(f'guide: {path}')
  ok = True
  for mode, results in by_mode.items():
    counts = collections.Counter(result.status for result in results)
    print(f'\n[{mode}] ' + ', '.join(f'{n} {s}' for s, n in counts.items()))
    for result in results:
      print(f'  cell {result.index:>2} ({result.where:>6}) {result.status:<7}'
            f' {result.detail}')
    ok = ok and not counts['failed']
  if _BASELINE in by_mode and _LAYER in by_mode:
    _print_guide_differences(by_mode[_BASELINE], by_mode[_LAYER])
  return ok


def _print_guide_differences(baseline, layer) -> None:
  differ = [
      b.index
      for b, l in zip(baseline, layer)
      if (b.status, b.value) != (l.status, l.value)
  ]
  print(f'\ncells whose status or output differ between modes: {differ}')


def guide_main(checkout: str, args: argparse.Namespace) -> int:
  path, cells = guide_cells(checkout)
  by_mode = {}
  for mode in _modes(args):
    if mode == _LAYER:
      _install_layer()
    by_mode[mode] = run_guide(cells, mode)
  return 0 if print_guide_report(path, by_mode) else 1


def main(argv: list[str]) -> int:
  args = parse_args(argv)
  if not args.flax:
    print('skipped: no Flax checkout (pass --flax=PATH or set FLAX_CHECKOUT)')
    return 0
  checkout = os.path.abspath(args.flax)
  _check_version(checkout)
  if args.guide:
    return guide_main(checkout, args)
  return tests_main(checkout, args)


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
