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
"""Tests that benchmarks/activations_export.py keeps working; no timing.

Its smoke mode runs both cases at tiny sizes in a child process; each must
report its row, and the store each wrote must equal the values computed
directly ("check": ok). The ratios are the benchmark's, not asserted here.
"""

import os
import re
import subprocess
import sys

from absl.testing import absltest
import sow_layout

ROOT = sow_layout.ROOT
SCRIPT = os.path.join(ROOT, 'benchmarks', 'activations_export.py')


class ActivationsBenchTest(absltest.TestCase):

  def test_smoke_run(self):
    done = subprocess.run([sys.executable, SCRIPT, '--smoke'], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          check=False)
    self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
    rows = re.findall(r'^\| (compute-bound|IO-bound) \|.*\| (\w+) \|$',
                      done.stdout, re.MULTILINE)
    self.assertEqual(rows, [('compute-bound', 'ok'), ('IO-bound', 'ok')],
                     done.stdout)

  def test_publish_needs_a_full_run(self):
    done = subprocess.run([sys.executable, SCRIPT, '--smoke', '--publish'],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    self.assertEqual(done.returncode, 2)
    self.assertIn('--publish needs a full run', done.stderr)


if __name__ == '__main__':
  absltest.main()
