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
"""A run of ``export`` killed at any point leaves its complete batches.

A child process exports many batches and is killed (SIGKILL: no cleanup,
no ``finally``) once it has committed a few, at a point chosen by the
operating system's scheduler, mostly while it writes. The store it leaves
must read back as exactly its complete batches, each equal to the values
computed directly, and a rerun must continue it to the end, equal to a run
never killed.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

from absl.testing import absltest
import numpy as np

from flax.nnx.sow import activations
from flax.nnx.sow import sow
from flax.nnx.sow.activations import store as store_lib

import sow_layout

BATCHES, EXAMPLES, WIDTH = 400, 64, 1024
_DEADLINE_S = 120


def batch(i: int) -> np.ndarray:
  rows = np.arange(i * EXAMPLES, (i + 1) * EXAMPLES, dtype=np.float32)
  return rows[:, None] + np.arange(WIDTH, dtype=np.float32) / WIDTH


def f(x):
  return sow(x * 2, name='h')


_CHILD = textwrap.dedent('''
    import sys
    import sow_layout
    if not sow_layout.IN_FLAX:
      import _worktree
    import export_kill_test as t
    from flax.nnx.sow import activations
    activations.export(t.f, (t.batch(i) for i in range(t.BATCHES)),
                       sys.argv[1], progress=False)
''')


class KilledExportTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    folder = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
    self.path = os.path.join(folder, 'store')

  def kill_after(self, committed: int) -> int:
    """Starts an export, kills it once it committed ``committed`` batches;
    returns the batches it had committed when it died."""
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__)),
         sow_layout.child_pythonpath(env)])
    env['JAX_PLATFORMS'] = 'cpu'
    child = subprocess.Popen(
        [sys.executable, '-c', _CHILD, self.path], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + _DEADLINE_S
    progress = os.path.join(self.path, 'progress', 'process-0.json')
    try:
      while True:
        if child.poll() is not None:
          self.fail('the export ended before it was killed:\n'
                    + child.stderr.read().decode()[-3000:])
        if time.monotonic() > deadline:
          self.fail('the export committed too few batches in time')
        if os.path.exists(progress) and store_lib.Store.open(
            self.path).committed(0) >= committed:
          break
        time.sleep(0.005)
      child.send_signal(signal.SIGKILL)
      child.wait()
    finally:
      if child.poll() is None:
        child.kill()
        child.wait()
      child.stderr.close()
    return store_lib.Store.open(self.path).committed(0)

  def assert_complete(self, data):
    self.assertGreater(data.complete_batches, 0)
    expected = np.concatenate(
        [batch(i) for i in range(data.complete_batches)]) * 2
    np.testing.assert_array_equal(data.read('h'), expected)

  def test_killed_twice_then_finished(self):
    done = self.kill_after(3)
    self.assertLess(done, BATCHES)
    data = activations.Dataset(self.path)
    self.assertEqual(data.complete_batches, done)
    self.assert_complete(data)
    # Killed again, after the rerun continued it.
    again = self.kill_after(done + 3)
    self.assertGreaterEqual(again, done + 3)
    self.assert_complete(activations.Dataset(self.path))
    data = activations.export(f, (batch(i) for i in range(BATCHES)),
                              self.path, progress=False)
    self.assertEqual(data.complete_batches, BATCHES)
    self.assert_complete(data)
    self.assertEqual(data.array('h').shape, (BATCHES * EXAMPLES, WIDTH))


if __name__ == '__main__':
  absltest.main()
