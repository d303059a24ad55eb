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
"""Two JAX processes on localhost, as a multi-controller cluster runs.

The multiprocess tests start two workers (Python scripts beside them) that
join one JAX cluster on ``localhost``, 2 CPU devices each, gloo
collectives. A cluster cannot be set up or torn down inside a process that
has already started JAX, so a test only starts them (``run_workers``),
waits with a deadline (so that a hang fails) and asserts on what they
report (``assert_workers_passed``).

A worker calls ``worker_main(argv, run)``: it joins the cluster, calls
``run(args)`` and prints one line, ``RESULT_PREFIX`` followed by the JSON
``{'checks': {check: None if it passed, else its traceback}, 'data': ...}``
(``data``: whatever the test compares across processes).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import typing as tp

import sow_layout

RESULT_PREFIX = 'SOW_MULTIPROCESS_RESULT '
PROCESSES = 2
DEVICES_PER_PROCESS = 2
# The coordinator (process 0) crashes with this when another program took
# the port between choosing it and binding it: then the pair is started again.
_PORT_TAKEN = 'Failed to add port to server'
_ATTEMPTS = 3


# The test's side.


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def _worker_env() -> dict[str, str]:
  env = dict(os.environ)
  flags = re.sub(r'--xla_force_host_platform_device_count=\S*', '',
                 env.get('XLA_FLAGS', ''))
  env['XLA_FLAGS'] = (f'{flags} --xla_force_host_platform_device_count='
                      f'{DEVICES_PER_PROCESS}').strip()
  env['JAX_PLATFORMS'] = 'cpu'
  env['PYTHONPATH'] = sow_layout.child_pythonpath(env)
  return env


class Run:
  """One run of the workers: their exit codes and outputs."""

  def __init__(self, returncodes, stdouts, stderrs, timed_out, deadline_s):
    self.returncodes, self.stdouts, self.stderrs = (
        returncodes, stdouts, stderrs)
    self.timed_out = timed_out
    self.deadline_s = deadline_s

  def describe(self) -> str:
    return '\n'.join(
        f'--- process {i}: exit code {code}\nstdout (end):\n{out[-2000:]}\n'
        f'stderr (end):\n{err[-6000:]}'
        for i, (code, out, err) in enumerate(
            zip(self.returncodes, self.stdouts, self.stderrs))
    )

  def reports(self) -> list[dict[str, tp.Any] | None]:
    """Each process's report (``None`` if it printed none)."""
    return [_report(stdout) for stdout in self.stdouts]


def _run_once(worker: str, port: int, args: tp.Sequence[str],
              deadline_s: float) -> Run:
  """Runs the workers until all exit, one fails, or the deadline."""
  env = _worker_env()
  with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as files:
    # Files, not pipes: a worker blocked on a full pipe would stall both.
    outs, errs = (
        [files.enter_context(open(os.path.join(tmp, f'{i}.{kind}'), 'w+'))
         for i in range(PROCESSES)]
        for kind in ('out', 'err')
    )
    procs = [
        subprocess.Popen(
            [sys.executable, worker, str(port), str(i), *args],
            env=env, cwd=sow_layout.ROOT, stdout=outs[i], stderr=errs[i],
            stdin=subprocess.DEVNULL,
        )
        for i in range(PROCESSES)
    ]
    timed_out = False
    try:
      deadline = time.monotonic() + deadline_s
      while any(p.poll() is None for p in procs):
        # One failed: its peer would wait for it until its own timeouts.
        if any(p.poll() not in (None, 0) for p in procs):
          break
        if time.monotonic() > deadline:
          timed_out = True
          break
        time.sleep(0.2)
    finally:
      for p in procs:
        if p.poll() is None:
          p.kill()
        p.wait()
    texts = []
    for f in (*outs, *errs):
      f.seek(0)
      texts.append(f.read())
  return Run([p.returncode for p in procs], texts[:PROCESSES],
             texts[PROCESSES:], timed_out, deadline_s)


def run_workers(worker: str, *args: str, deadline_s: float) -> Run:
  """Runs ``python worker PORT PROCESS_ID *args`` in each process, on a free
  port (again on another if one was taken before the coordinator bound it).

  Args:
    worker: the worker script's path.
    *args: more arguments, the same for every process.
    deadline_s: how long the run may take; longer fails as a hang.
  """
  for _ in range(_ATTEMPTS):
    run = _run_once(worker, _free_port(), args, deadline_s)
    if not any(_PORT_TAKEN in err for err in run.stderrs):
      break
  return run


def _report(stdout: str) -> dict[str, tp.Any] | None:
  for line in stdout.splitlines():
    if line.startswith(RESULT_PREFIX):
      return json.loads(line[len(RESULT_PREFIX):])
  return None


def assert_workers_passed(test, run: Run,
                          expected: tp.AbstractSet[str]) -> list[tp.Any]:
  """Fails ``test`` unless every worker exited cleanly and ran exactly the
  checks ``expected``, each passing; returns each process's ``data``."""
  test.assertFalse(
      run.timed_out,
      f'the workers did not finish within {run.deadline_s} s:\n'
      + run.describe())
  test.assertEqual(run.returncodes, [0] * PROCESSES, run.describe())
  failures, data = [], []
  for i, report in enumerate(run.reports()):
    test.assertIsNotNone(report, f'process {i} reported nothing:\n'
                         + run.describe())
    test.assertEqual(set(report['checks']), set(expected), f'process {i}')
    failures.extend(
        f'process {i}, {check}:\n{error}'
        for check, error in sorted(report['checks'].items())
        if error is not None
    )
    data.append(report['data'])
  if failures:
    test.fail(f'{len(failures)} checks failed:\n' + '\n'.join(failures))
  return data


# The worker's side.

_COLLECTIVE = re.compile(
    r'\b(all-gather|all-reduce|all-to-all|reduce-scatter|collective-permute)'
    r'(?:-start)?\('
)


def collectives(compiled_text: str) -> collections.Counter:
  """The collective operations of an optimized HLO module, by kind."""
  return collections.Counter(_COLLECTIVE.findall(compiled_text))


def worker_main(
    argv: tp.Sequence[str],
    run: tp.Callable[[tp.Sequence[str]], tuple[dict[str, str | None],
                                               tp.Any]],
) -> None:
  """Joins the cluster (``argv``: script, port, process id, args), calls
  ``run(args)`` for ``(checks, data)`` and prints them as the report."""
  import jax  # pylint: disable=g-import-not-at-top

  port, process_id = int(argv[1]), int(argv[2])
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  jax.distributed.initialize(
      f'localhost:{port}', num_processes=PROCESSES,
      process_id=process_id, initialization_timeout=120,
  )
  try:
    assert (jax.device_count(), jax.local_device_count()) == (
        PROCESSES * DEVICES_PER_PROCESS, DEVICES_PER_PROCESS), jax.devices()
    checks, data = run(argv[3:])
  finally:
    jax.distributed.shutdown()
  print(RESULT_PREFIX + json.dumps({'checks': checks, 'data': data}),
        flush=True)
