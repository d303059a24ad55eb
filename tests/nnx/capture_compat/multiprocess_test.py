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
"""capture across two JAX processes (multi-controller), as on a cluster.

Two workers (``sow_multiprocess_worker.py``) join one JAX cluster on
localhost, 2 CPU devices each, gloo collectives, and share a 4-device mesh,
once with Auto and once with Explicit axes. On global arrays that no process
holds whole, they check that ``jax.jit(capture(f))``, an eager
``capture(jax.jit(f))``, an eager ``capture(f)``, ``perturb`` under
``jax.grad``, a ``lax.scan`` of sows and ``nnx.capture`` of a sharded NNX
model (the compat layer, eagerly, under ``nnx.jit`` and in a train step)
return sown values as global arrays laid out as the activations (and a
compiled capture has no collective a hand-written ``f`` returning them lacks)
holding the values of a single-process run. The worker's docstring has the
oracles.

A cluster cannot be set up or torn down inside a process that has already
started JAX, so the workers are separate processes; this test only starts
them, waits (with a deadline, so a hang fails), and asserts on their reports.
"""

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
import sow_layout

_WORKER = os.path.join(sow_layout.HERE, 'sow_multiprocess_worker.py')
_RESULT_PREFIX = 'SOW_MULTIPROCESS_RESULT '  # as the worker prints it

# What each worker must report: every check once per axis type. Listed here,
# not read from the worker, so that a check that stops running fails.
_CHECKS = ('jit_of_capture', 'eager_capture_of_jit', 'eager_capture', 'scan',
           'perturb', 'nnx_capture')
_EXPECTED = frozenset(
    f'{axis_type}/{check}'
    for axis_type in ('Auto', 'Explicit') for check in _CHECKS
)

# About 30 s on 2 busy cores; the deadline only turns a hang into a failure.
_DEADLINE_S = 300
# The coordinator (process 0) crashes with this when another program took
# the port between choosing it and binding it: then the pair is started again.
_PORT_TAKEN = 'Failed to add port to server'
_ATTEMPTS = 3


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def _worker_env() -> dict[str, str]:
  env = dict(os.environ)
  flags = re.sub(r'--xla_force_host_platform_device_count=\S*', '',
                 env.get('XLA_FLAGS', ''))
  env['XLA_FLAGS'] = f'{flags} --xla_force_host_platform_device_count=2'.strip()
  env['JAX_PLATFORMS'] = 'cpu'
  env['PYTHONPATH'] = sow_layout.child_pythonpath(env)
  return env


class _Run:
  """One run of the two workers: their exit codes and outputs."""

  def __init__(self, returncodes, stdouts, stderrs, timed_out):
    self.returncodes, self.stdouts, self.stderrs = (
        returncodes, stdouts, stderrs)
    self.timed_out = timed_out

  def describe(self) -> str:
    return '\n'.join(
        f'--- process {i}: exit code {code}\nstdout (end):\n{out[-2000:]}\n'
        f'stderr (end):\n{err[-6000:]}'
        for i, (code, out, err) in enumerate(
            zip(self.returncodes, self.stdouts, self.stderrs))
    )


def _run_workers(port: int) -> _Run:
  """Runs both workers until both exit, one fails, or the deadline."""
  env = _worker_env()
  with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as files:
    # Files, not pipes: a worker blocked on a full pipe would stall both.
    outs, errs = (
        [files.enter_context(open(os.path.join(tmp, f'{i}.{kind}'), 'w+'))
         for i in range(2)]
        for kind in ('out', 'err')
    )
    procs = [
        subprocess.Popen(
            [sys.executable, _WORKER, str(port), str(i)],
            env=env, cwd=sow_layout.ROOT, stdout=outs[i], stderr=errs[i],
            stdin=subprocess.DEVNULL,
        )
        for i in range(2)
    ]
    timed_out = False
    try:
      deadline = time.monotonic() + _DEADLINE_S
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
  return _Run([p.returncode for p in procs], texts[:2], texts[2:], timed_out)


def _report(stdout: str) -> dict[str, str | None] | None:
  for line in stdout.splitlines():
    if line.startswith(_RESULT_PREFIX):
      return json.loads(line[len(_RESULT_PREFIX):])
  return None


class MultiprocessTest(absltest.TestCase):

  def test_two_processes(self):
    for _ in range(_ATTEMPTS):
      run = _run_workers(_free_port())
      if not any(_PORT_TAKEN in err for err in run.stderrs):
        break
    self.assertFalse(
        run.timed_out,
        f'the workers did not finish within {_DEADLINE_S} s:\n'
        + run.describe())
    self.assertEqual(run.returncodes, [0, 0], run.describe())
    failures = []
    for i, stdout in enumerate(run.stdouts):
      report = _report(stdout)
      self.assertIsNotNone(report, f'process {i} reported nothing:\n'
                           + run.describe())
      self.assertEqual(set(report), _EXPECTED, f'process {i}')
      failures.extend(
          f'process {i}, {check}:\n{error}'
          for check, error in sorted(report.items()) if error is not None
      )
    if failures:
      self.fail(f'{len(failures)} checks failed:\n' + '\n'.join(failures))


if __name__ == '__main__':
  absltest.main()
