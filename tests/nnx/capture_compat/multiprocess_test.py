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

The workers are separate processes (``multiprocess_testing`` says why);
this test only starts them and asserts on their reports.
"""

import os

from absl.testing import absltest
import multiprocess_testing
import sow_layout

_WORKER = os.path.join(sow_layout.HERE, 'sow_multiprocess_worker.py')

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


class MultiprocessTest(absltest.TestCase):

  def test_two_processes(self):
    run = multiprocess_testing.run_workers(_WORKER, deadline_s=_DEADLINE_S)
    multiprocess_testing.assert_workers_passed(self, run, _EXPECTED)


if __name__ == '__main__':
  absltest.main()
