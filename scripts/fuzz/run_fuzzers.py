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
"""Runs the differential fuzzers for a time budget: the long search.

The fuzzers, each the property of a test of the suite, run here on fresh
random inputs until the budget is spent:

* ``programs``: random JAX programs through ``capture``/``plant`` against an
  eager oracle (``tests/nnx/sow/differential_fuzz_test.py``);
* ``nnx``: random NNX models through ``nnx.capture`` against Flax 0.12.8's
  own, and their taps against its ``method_outputs``
  (``tests/nnx/capture_compat/compat_differential_fuzz_test.py``);
* ``stacks``: stacks of JAX transforms around and inside loops against the
  loop stepped in Python (``tests/nnx/sow/api/transform_stacks_test.py``;
  not run by default: ``--fuzzers stacks``);
* ``codemod``: random projects of several files through the ``migrate-sow``
  codemod, each version run in fresh processes
  (``tests/migrate/migrate_sow_fuzz_test.py``; not run by default: each
  project takes seconds, and its processes want the cores the other two
  use). Its report counts projects, sites, rewrites and mismatches.

Each runs in processes of its own (``--fuzzers programs nnx`` runs both side
by side: one core each), in rounds of ``--round`` examples, each round with
a seed of its own drawn from ``--seed``; a fresh process takes over every
``--rounds-per-process`` rounds (see ``_chain``). A failure stops that fuzzer
(``--keep-going``: it goes on, with the next round) and prints what
hypothesis prints: the shrunk input, ready to paste into a test,
with the round's seed and the ``@reproduce_failure`` blob. Every minute and
at the end, each fuzzer prints its examples, examples/s and failures.

Run from the repository root (or with a checkout of Flax whose tests hold
these files, ``--tests``)::

  python scripts/fuzz/run_fuzzers.py --minutes 60
  python scripts/fuzz/run_fuzzers.py --minutes 5 --fuzzers nnx --seed 7
  python scripts/fuzz/run_fuzzers.py --minutes 8 --fuzzers codemod --round 5

The budget is checked between rounds: a round of the codemod fuzzer takes
some 20 to 60 s a project on two shared cores, so its last round may end
minutes after the budget. Not ``--round 1``: hypothesis draws the simplest
project first, so one-example rounds all try about the same one.

Exits 1 if any fuzzer found a failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import queue as queue_lib
import random
import sys
import threading
import time
import traceback
import typing as tp

SHARDS = 4  # sow_fuzz_programs.SHARDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


@dataclasses.dataclass
class Report:
  fuzzer: str
  examples: int = 0
  seconds: float = 0.0
  rounds: int = 0
  failure: str | None = None
  # What the codemod fuzzer counted (projects, sites, rewrites, ...).
  counts: dict[str, int] = dataclasses.field(default_factory=dict)

  @property
  def rate(self) -> float:
    return self.examples / self.seconds if self.seconds else 0.0

  def line(self) -> str:
    status = ('no failure' if not self.failure else
              f"FAILED in {self.failure.count('round seed ')} round(s)")
    counts = ''.join(f'; {k} {v}' for k, v in sorted(self.counts.items()))
    return (f'{self.fuzzer}: {self.examples} examples in {self.seconds:.0f} s'
            f' ({self.rate:.2f}/s, {self.rounds} rounds): {status}{counts}')


def _import_paths(tests: str) -> None:
  """What the suite's conftest.py does: the helpers and this tree."""
  sys.path.insert(0, os.path.join(tests, 'nnx', 'sow'))
  sys.path.insert(0, os.path.join(tests, 'nnx', 'sow', 'api'))
  sys.path.insert(0, os.path.join(tests, 'nnx', 'capture_compat'))
  sys.path.insert(0, os.path.join(tests, 'migrate'))
  if os.path.exists(os.path.join(ROOT, '_worktree.py')):
    sys.path.insert(0, ROOT)
    import _worktree  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import


def _property(fuzzer: str) -> tuple[tp.Any, tp.Callable[[tp.Any], None]]:
  """(strategy, check) of ``fuzzer``: the suite's property tests' own."""
  # pylint: disable=g-import-not-at-top
  import hypothesis.strategies as st
  if fuzzer == 'stacks':
    import transform_stacks as ts
    import transform_stacks_test as test

    def check_case(case):
      outcome = ts.check(case)
      if outcome.kind == 'failure' and not test.known_failure(case, outcome):
        raise AssertionError(f'{case}: {outcome.detail}')

    stack = st.lists(st.sampled_from(ts.TRANSFORMS), min_size=1, max_size=4)
    cases = st.builds(
        lambda stack, split, loop, site, jit: ts.Case(
            outer=tuple(stack[:split % (len(stack) + 1)]),
            inner=tuple(stack[split % (len(stack) + 1):]),
            loop=loop, site=site, jit=jit),
        stack, st.integers(0, 4), st.sampled_from(ts.LOOPS),
        st.sampled_from(ts.SITES), st.booleans())
    return cases, check_case
  if fuzzer == 'programs':
    import differential_fuzz_test as test
    import sow_fuzz_programs as fp
    case = test.DifferentialFuzzTest()

    def check_program(drawn):
      (program, shape), jit = drawn
      test.check_against_oracle(case, program, shape, jit=jit)

    return st.tuples(fp.programs(), st.booleans()), check_program
  if fuzzer == 'codemod':
    import migrate_sow_fuzz_test as test
    if test.hypothesis is None:
      raise SystemExit('codemod: the fuzzer needs hypothesis')
    return test.project_fuzz.specs(), test.check
  import compat_differential_fuzz_test as test
  import sow_fuzz_models as fm
  import sow_legacy
  if not sow_legacy.is_available():
    raise SystemExit(f'nnx: {sow_legacy.SKIP_REASON}')
  case = test.CompatDifferentialFuzzTest()

  def check_model(drawn):
    spec, call = drawn
    case.check(spec, call)

  # Mostly any model; a quarter plain ones, where taps are compared too.
  return st.one_of(fm.models(), fm.models(), fm.models(),
                   fm.plain_models()), check_model


def _run(fuzzer: str, seconds: float, seed: int, round_size: int,
         tests: str, keep_going: bool, max_rounds: int, queue) -> None:
  """One fuzzer in this process, until ``seconds`` are spent or
  ``max_rounds`` rounds have run."""
  import warnings  # pylint: disable=g-import-not-at-top
  warnings.filterwarnings('ignore', category=DeprecationWarning)
  if fuzzer == 'programs':
    # Simulated CPU devices, for the programs' shard_maps (before JAX starts).
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '')
                               + f' --xla_force_host_platform_device_count={SHARDS}')
  _import_paths(tests)
  import hypothesis  # pylint: disable=g-import-not-at-top

  strategy, check = _property(fuzzer)
  report = Report(fuzzer)
  seeds = random.Random(seed)
  start = last_print = time.monotonic()
  failures = []
  while (time.monotonic() - start < seconds and report.rounds < max_rounds
         and (keep_going or not failures)):
    round_seed = seeds.randrange(2**32)

    @hypothesis.seed(round_seed)
    @hypothesis.settings(
        max_examples=round_size, database=None, deadline=None,
        derandomize=False, print_blob=True,
        suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(strategy)
    def one_round(drawn):
      report.examples += 1
      check(drawn)

    failed = False
    try:
      one_round()  # pylint: disable=no-value-for-parameter
    except Exception:  # pylint: disable=broad-exception-caught
      failed = True
      failures.append(f'round seed {round_seed}'
                      f' (@hypothesis.seed({round_seed})):\n'
                      + traceback.format_exc())
      report.failure = '\n\n'.join(failures)
    report.rounds += 1
    report.seconds = time.monotonic() - start
    report.counts = _counts(fuzzer)
    if time.monotonic() - last_print >= 60 or failed:
      print(report.line(), flush=True)
      if failed:
        print(failures[-1], flush=True)
      last_print = time.monotonic()
  report.seconds = time.monotonic() - start
  queue.put(dataclasses.asdict(report))


def _counts(fuzzer: str) -> dict[str, int]:
  """What ``fuzzer`` counted in this process (the codemod's: projects,
  sites, rewrites and flags by target, mismatches)."""
  if fuzzer != 'codemod':
    return {}
  import migrate_sow_fuzz_test as test  # pylint: disable=g-import-not-at-top
  return {'projects': 0, 'mismatches': 0, **test.STATS}


def _chain(context, fuzzer: str, seconds: float, seed: int, args,
           reports: list[Report], slot: int) -> None:
  """Runs ``fuzzer`` in fresh processes of at most
  ``args.rounds_per_process`` rounds each, until ``seconds`` are spent,
  and puts the sum of their reports at ``reports[slot]``.

  A process lives for a bounded number of rounds: in one process, after
  about 2,500 inputs of the nnx fuzzer, every round failed with a
  RecursionError inside hypothesis' own engine, at a shallow stack. The
  interpreter's recursion count leaks in jaxlib: its pytree flattening
  enters a recursive call for a container and does not leave it when the
  keys of a dict inside cannot be sorted (``jax.tree.flatten(({('a', 1): 0,
  ('a', 'b'): 1},))`` raises and costs one level, for good). Flax 0.12.8's
  own ``nnx.capture`` (the fuzzer's oracle) raises that error on some models
  (a BatchNorm under ``nnx.cond``: "Comparator raised exception while
  sorting pytree dictionary keys"); the package's side leaks nothing
  (``concurrency_and_leaks_test.LongProcessTest``).
  """
  total = Report(fuzzer)
  start = time.monotonic()
  failures = []
  part = 0
  while time.monotonic() - start < seconds and (args.keep_going
                                                or not failures):
    queue = context.Queue()
    process = context.Process(target=_run, args=(
        fuzzer, seconds - (time.monotonic() - start), seed + part,
        args.round, args.tests, args.keep_going, args.rounds_per_process,
        queue))
    process.start()
    report = None
    while report is None:
      try:
        report = Report(**queue.get(timeout=5))
      except queue_lib.Empty:
        if not process.is_alive():
          # It died (an import error, a crash of XLA) and sends nothing.
          report = Report(fuzzer, failure=(
              f'the process exited with code {process.exitcode} before'
              ' reporting (its error is printed above)'))
          args.keep_going = False  # it would die again
    process.join()
    part += 1
    total.examples += report.examples
    total.rounds += report.rounds
    for key, count in report.counts.items():
      total.counts[key] = total.counts.get(key, 0) + count
    if report.failure:
      failures.append(report.failure)
  total.seconds = time.monotonic() - start
  total.failure = '\n\n'.join(failures) or None
  reports[slot] = total


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--minutes', type=float, required=True,
                      help='wall-clock budget of each fuzzer')
  parser.add_argument('--fuzzers', nargs='+', default=['programs', 'nnx'],
                      choices=['programs', 'nnx', 'stacks', 'codemod'],
                      help='which fuzzers to run, each in its own process')
  parser.add_argument('--seed', type=int, default=None,
                      help='seed of the rounds\' seeds (default: random,'
                      ' printed)')
  parser.add_argument('--round', type=int, default=100,
                      help='examples per round (one hypothesis run)')
  parser.add_argument('--tests', default=os.path.join(ROOT, 'tests'),
                      help='the folder holding nnx/sow and'
                      ' nnx/capture_compat (default: this repository\'s)')
  parser.add_argument('--keep-going', action='store_true',
                      help='after a failure, go on with the next round'
                      ' (every failure is printed and reported)')
  parser.add_argument('--rounds-per-process', type=int, default=10,
                      help='rounds a fuzzer runs in one process before a'
                      ' fresh one goes on')
  parser.add_argument('--json', default=None,
                      help='also write the reports to this file')
  args = parser.parse_args(argv)
  seed = args.seed if args.seed is not None else random.randrange(2**31)
  print(f'seed {seed}; {args.minutes} min each: {" ".join(args.fuzzers)}',
        flush=True)
  context = multiprocessing.get_context('spawn')
  reports: list[Report] = [None] * len(args.fuzzers)  # type: ignore[list-item]
  threads = [
      threading.Thread(target=_chain, args=(
          context, fuzzer, args.minutes * 60, seed + 1000 * i, args, reports,
          i))
      for i, fuzzer in enumerate(args.fuzzers)
  ]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  print()
  for report in reports:
    print(report.line())
    if report.failure:
      print(report.failure)
  if args.json:
    with open(args.json, 'w', encoding='utf-8') as f:
      json.dump({'seed': seed, 'reports': [dataclasses.asdict(r)
                                           for r in reports]}, f, indent=2)
  return 1 if any(r.failure for r in reports) else 0


if __name__ == '__main__':
  sys.exit(main())
