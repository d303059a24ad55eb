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
"""Times the sow codemod over a checkout of Flax's repository.

Usage::

  python benchmarks/migrate_bench.py --flax_checkout PATH [--jobs 2]
      [--repeat 3] [--publish]

Each run is the command as a user runs it, in a fresh process:
``scripts/migrate/migrate_sow.py --check --no-progress --jobs N PATH``
(the default target; ``--check`` writes nothing), timed wall-clock from
the start of the process to its end (interpreter start, imports, the
spawned workers, the whole analysis). ``--repeat`` runs are made one after
the other; the table gives the fastest and the median, the files the
codemod found and analysed (from its summary), the machine's cores and its
load average before the first run (other jobs share the cores). The aim:
under 60 s with ``--jobs 2`` on 2 cores. ``--publish`` replaces the rows
between ``<!-- migrate-bench:start -->`` and ``<!-- migrate-bench:end -->``
in benchmarks/RESULTS.md. Without a checkout it says it skips and exits 0.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'scripts', 'migrate', 'migrate_sow.py')
RESULTS = os.path.join(ROOT, 'benchmarks', 'RESULTS.md')
START, END = '<!-- migrate-bench:start -->', '<!-- migrate-bench:end -->'
AIM_SECONDS = 60.0
_SUMMARY = re.compile(r'migrate_sow: (\d+) files, (\d+) analysed')


def _commit(path: str) -> str:
  result = subprocess.run(['git', '-C', path, 'rev-parse', 'HEAD'],
                          capture_output=True, text=True, check=False)
  if result.returncode == 0:
    return result.stdout.strip()[:12]
  marker = os.path.join(path, '.commit')
  if os.path.exists(marker):
    with open(marker, encoding='utf-8') as f:
      return f.read().strip()[:12]
  return '?'


def run_once(checkout: str, jobs: int) -> tuple[float, int, int, int]:
  """(seconds, exit code, files, analysed) of one run of the command."""
  start = time.perf_counter()
  result = subprocess.run(
      [sys.executable, SCRIPT, '--check', '--no-progress', '--jobs',
       str(jobs), checkout], capture_output=True, text=True, check=False,
      cwd=checkout)
  seconds = time.perf_counter() - start
  match = _SUMMARY.search(result.stderr)
  if match is None:
    raise RuntimeError(f'no summary from the codemod:\n{result.stderr}')
  return seconds, result.returncode, int(match.group(1)), int(match.group(2))


def measure(checkout: str, jobs: int, repeat: int) -> dict:
  load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')
  runs = [run_once(checkout, jobs) for _ in range(repeat)]
  times = [r[0] for r in runs]
  return {
      'jobs': jobs, 'fastest': min(times), 'median': statistics.median(times),
      'repeat': repeat, 'exit': sorted({r[1] for r in runs}),
      'files': runs[0][2], 'analysed': runs[0][3], 'load': load,
      'cores': os.cpu_count(),
  }


def table(rows: list[dict], checkout: str) -> str:
  lines = [
      f'Flax at {_commit(checkout)}, the codemod at {_commit(ROOT)}, '
      f'{datetime.date.today().isoformat()}:',
      '',
      '| --jobs | files (analysed) | fastest (s) | median (s) | runs | cores '
      '| load before | under 60 s |',
      '|---|---|---|---|---|---|---|---|',
  ]
  for row in rows:
    lines.append(
        f"| {row['jobs']} | {row['files']} ({row['analysed']}) | "
        f"{row['fastest']:.1f} | {row['median']:.1f} | {row['repeat']} | "
        f"{row['cores']} | {row['load']:.1f} | "
        f"{'yes' if row['median'] < AIM_SECONDS else '**no**'} |")
  return '\n'.join(lines)


def publish(text: str, path: str = RESULTS) -> None:
  with open(path, encoding='utf-8') as f:
    old = f.read()
  block = f'{START}\n{text}\n{END}'
  if START in old:
    new = old[:old.index(START)] + block + old[old.index(END) + len(END):]
  else:
    new = old.rstrip('\n') + '\n\n' + block + '\n'
  with open(path, 'w', encoding='utf-8') as f:
    f.write(new)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--flax_checkout', default=os.environ.get(
      'FLAX_CHECKOUT'), help='a checkout of google/flax')
  parser.add_argument('--jobs', default='2',
                      help='comma-separated --jobs values to time (2)')
  parser.add_argument('--repeat', type=int, default=3,
                      help='runs per --jobs value (3)')
  parser.add_argument('--publish', action='store_true',
                      help='write the table into benchmarks/RESULTS.md')
  args = parser.parse_args(argv)
  if not args.flax_checkout or not os.path.isdir(args.flax_checkout):
    print('migrate_bench: no --flax_checkout; skipped')
    return 0
  checkout = os.path.abspath(args.flax_checkout)
  rows = [measure(checkout, int(jobs), args.repeat)
          for jobs in args.jobs.split(',')]
  text = table(rows, checkout)
  print(text)
  if args.publish:
    publish(text)
  return 0 if all(row['median'] < AIM_SECONDS for row in rows) else 1


if __name__ == '__main__':
  sys.exit(main())
