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
"""Runs the mutants of ``mutants.py`` against their tests; prints the score.

Usage (from the repository root, in the test environment)::

  python scripts/mutation/run_mutants.py [--jobs 2] [--only ID ...]
      [--json results.json]

Each worker copies the repository's files (``git ls-files``) into a
temporary directory, so the working tree is never modified. The root
``conftest.py`` makes the tests import the copy's ``flax/nnx``. First the
unmutated tests must pass in each copy; then, one mutant at a time, the
mutated file is written, its tests run (``pytest -x``, stopping at the first
failure) and the file restored. A mutant is *killed* if the tests fail or
time out, *survived* if they pass. The score is killed / non-equivalent.

Exit status: 0 if the score reaches ``--min-score``, 1 if not, 2 if a mutant
no longer applies (its text is not in the file exactly once) or the
unmutated tests fail.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import platform
import queue
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import mutants as mutants_lib  # noqa: E402  (beside this script)

ROOT = pathlib.Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Outcome:
  id: str
  path: str
  status: str  # 'killed', 'timeout', 'survived', 'error' or 'equivalent'
  seconds: float
  breaks: str
  detail: str = ''


def check_applies(mutant: mutants_lib.Mutant, root: pathlib.Path) -> str:
  """The mutated text of ``mutant``'s file; raises if it does not apply."""
  text = (root / mutant.path).read_text()
  count = text.count(mutant.old)
  if count != 1:
    raise ValueError(
        f'mutant {mutant.id}: its text occurs {count} times in {mutant.path}'
        ' (it must occur exactly once); update mutants.py'
    )
  return text.replace(mutant.old, mutant.new)


def _copy_repository(destination: pathlib.Path) -> None:
  files = subprocess.run(
      ['git', 'ls-files', '--cached', '--others', '--exclude-standard'],
      cwd=ROOT, check=True, capture_output=True, text=True,
  ).stdout.splitlines()
  for name in files:
    source = ROOT / name
    if source.is_file():
      target = destination / name
      target.parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(source, target)


def _pytest(copy: pathlib.Path, tests, timeout: float):
  command = [
      sys.executable, '-m', 'pytest', '-x', '-q', '--no-header',
      '-p', 'no:cacheprovider', *tests,
  ]
  env = dict(os.environ, PYTHONDONTWRITEBYTECODE='1')
  try:
    done = subprocess.run(
        command, cwd=copy, env=env, capture_output=True, text=True,
        timeout=timeout,
    )
  except subprocess.TimeoutExpired:
    return 'timeout', ''
  last = (done.stdout.strip().splitlines() or [''])[-1]
  # pytest exits 1 when a test failed; any other failure (a conftest that
  # cannot import, no tests collected, a usage error) killed nothing.
  status = {0: 'survived', 1: 'killed'}.get(done.returncode, 'error')
  if status == 'error':
    last = f'pytest exit {done.returncode}: ' + (
        (done.stderr.strip().splitlines() or [last])[-1])
  return status, last


def _first_failure(summary: str) -> str:
  return summary[:160]


def run_one(mutant, copy: pathlib.Path, tests, timeout: float) -> Outcome:
  start = time.perf_counter()
  if mutant.equivalent:
    return Outcome(mutant.id, mutant.path, 'equivalent', 0.0, mutant.breaks,
                   mutant.equivalent)
  target = copy / mutant.path
  original = target.read_text()
  target.write_text(check_applies(mutant, copy))
  try:
    status, summary = _pytest(copy, tests, timeout)
  finally:
    target.write_text(original)
  return Outcome(mutant.id, mutant.path, status,
                 time.perf_counter() - start, mutant.breaks,
                 _first_failure(summary))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--jobs', type=int, default=2)
  parser.add_argument('--only', nargs='*', default=None)
  parser.add_argument('--timeout', type=float, default=900.0)
  parser.add_argument('--min-score', type=float, default=0.95)
  parser.add_argument('--json', type=pathlib.Path, default=None)
  parser.add_argument('--publish', action='store_true',
                      help='write the summary into benchmarks/RESULTS.md'
                      ' (a full run only)')
  parser.add_argument('--tests', nargs='*', default=None,
                      help='run these tests for every mutant instead of'
                      " each mutant's own selection")
  parser.add_argument('--skip-baseline', action='store_true',
                      help='do not first run the unmutated tests')
  args = parser.parse_args(argv)
  if args.publish and (args.only is not None or args.tests is not None):
    parser.error('--publish needs a full run: no --only, no --tests')

  selected = [
      m for m in mutants_lib.MUTANTS if args.only is None or m.id in args.only
  ]
  tests_of = (lambda m: m.tests) if args.tests is None else (
      lambda m: tuple(args.tests))
  try:
    for mutant in selected:
      check_applies(mutant, ROOT)
  except ValueError as e:
    print(e, file=sys.stderr)
    return 2

  start = time.perf_counter()
  outcomes: list[Outcome] = []
  with tempfile.TemporaryDirectory(prefix='mutants-') as tmp:
    copies: queue.Queue = queue.Queue()
    for i in range(args.jobs):
      copy = pathlib.Path(tmp) / f'copy{i}'
      _copy_repository(copy)
      copies.put(copy)
    if not args.skip_baseline:
      tests = sorted({t for m in selected for t in tests_of(m)})
      copy = copies.get()
      status, summary = _pytest(copy, tests, args.timeout * 4)
      copies.put(copy)
      print(f'baseline: {status} ({summary})', flush=True)
      if status != 'survived':
        print('the unmutated tests fail: fix them first', file=sys.stderr)
        return 2

    def work(mutant):
      copy = copies.get()
      try:
        return run_one(mutant, copy, tests_of(mutant), args.timeout)
      finally:
        copies.put(copy)

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
      for outcome in pool.map(work, selected):
        outcomes.append(outcome)
        print(f'{outcome.status:>10}  {outcome.seconds:6.1f}s  {outcome.id}',
              flush=True)
  elapsed = time.perf_counter() - start
  return _report(outcomes, elapsed, args)


def _report(outcomes: list[Outcome], elapsed: float, args) -> int:
  scored = [o for o in outcomes if o.status != 'equivalent']
  killed = [o for o in scored if o.status in ('killed', 'timeout')]
  survived = [o for o in scored if o.status == 'survived']
  score = len(killed) / len(scored) if scored else 1.0
  print()
  print(f'mutants: {len(outcomes)}  equivalent: '
        f'{len(outcomes) - len(scored)}  killed: {len(killed)}  survived: '
        f'{len(survived)}  score: {score:.1%}  time: {elapsed / 60:.1f} min'
        f' ({args.jobs} jobs)')
  for outcome in survived:
    print(f'  SURVIVED {outcome.id} ({outcome.path}): {outcome.breaks}')
  errors = [o for o in scored if o.status == 'error']
  for outcome in errors:
    print(f'  ERROR {outcome.id}: the tests did not run ({outcome.detail})')
  for outcome in outcomes:
    if outcome.status == 'equivalent':
      print(f'  equivalent {outcome.id}: {outcome.detail}')
  if args.json is not None:
    args.json.write_text(json.dumps({
        'score': score,
        'minutes': elapsed / 60,
        'jobs': args.jobs,
        'outcomes': [dataclasses.asdict(o) for o in outcomes],
    }, indent=2))
  if errors:
    return 2  # a score over tests that did not run means nothing
  if args.publish:
    publish(summary(outcomes, elapsed, args.jobs))
  return 0 if score >= args.min_score else 1


RESULTS = ROOT / 'benchmarks' / 'RESULTS.md'
# Kept in step with benchmarks/sow_bench.py, which keeps what follows it.
OTHERS_MARKER = '<!-- sections below are written by other scripts -->'
START, END = '<!-- mutation:start -->', '<!-- mutation:end -->'


def summary(outcomes: list[Outcome], elapsed: float, jobs: int) -> str:
  """The Markdown section for ``benchmarks/RESULTS.md``."""
  scored = [o for o in outcomes if o.status != 'equivalent']
  killed = [o for o in scored if o.status in ('killed', 'timeout')]
  per_file: dict[str, list[Outcome]] = {}
  for outcome in scored:
    per_file.setdefault(outcome.path, []).append(outcome)
  lines = [
      '## Mutation testing',
      '',
      f'`python scripts/mutation/run_mutants.py --jobs {jobs} --publish` on'
      f' {time.strftime("%Y-%m-%d")}, {platform.machine()},'
      f' {os.cpu_count()} cores, CPython {platform.python_version()}:'
      f' {len(outcomes)} hand-written semantic mutants'
      f' ({len(outcomes) - len(scored)} equivalent), each run against the'
      f' deterministic tests of its module; **{len(killed)} of {len(scored)}'
      f' killed ({len(killed) / max(len(scored), 1):.1%})** in'
      f' {elapsed / 60:.1f} minutes.',
      '',
      '| module | mutants | killed |',
      '|---|---|---|',
  ]
  for path, group in sorted(per_file.items()):
    dead = sum(o.status in ('killed', 'timeout') for o in group)
    lines.append(f'| `{path}` | {len(group)} | {dead} |')
  survivors = [o for o in scored if o.status == 'survived']
  lines += ['', 'Surviving mutants (the behaviour no test pins):', '']
  lines += [f'- `{o.id}`: {o.breaks}' for o in survivors] or ['- none']
  lines += ['', 'Equivalent mutants (left out of the score):', '']
  lines += [f'- `{o.id}`: {o.detail}' for o in outcomes
            if o.status == 'equivalent'] or ['- none']
  return '\n'.join(lines)


def publish(section: str) -> None:
  content = RESULTS.read_text()
  block = f'{START}\n{section}\n{END}'
  if START in content:
    before, rest = content.split(START, 1)
    content = before + block + rest.split(END, 1)[1]
  else:
    if OTHERS_MARKER not in content:
      content = content.rstrip('\n') + f'\n\n{OTHERS_MARKER}\n'
    content = content.rstrip('\n') + f'\n\n{block}\n'
  RESULTS.write_text(content)


if __name__ == '__main__':
  sys.exit(main())
