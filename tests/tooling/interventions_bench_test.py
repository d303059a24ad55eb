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
"""Tests that benchmarks/interventions_gemma.py keeps working; no timing.

Its smoke mode runs, in a child process, the interventions guide's
workflows on Flax's examples/gemma from the checkout named by
``FLAX_CHECKOUT`` (nothing of Flax is stored here); without it the run is
skipped. The script checks each workflow's result against another way of
computing it and exits 1 if one differs; here each workflow must also be
one compilation, and later calls on other inputs none.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
import sow_layout

ROOT = sow_layout.ROOT
SCRIPT = os.path.join(ROOT, 'benchmarks', 'interventions_gemma.py')
WORKFLOWS = ('cache', 'activation patching (layer x position)',
             'attribution patching', 'logit lens', 'head ablation',
             'steered generation')


def _run(*args, env=None):
  return subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=900,
                        check=False)


class InterventionsBenchTest(absltest.TestCase):

  def test_without_a_checkout_it_skips_and_exits_0(self):
    env = {k: v for k, v in os.environ.items() if k != 'FLAX_CHECKOUT'}
    empty = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, empty)
    for args in ((), ('--flax_checkout', empty)):
      done = _run('--smoke', *args, env=env)
      self.assertEqual(done.returncode, 0, done.stderr)
      self.assertIn('skipped: no google/flax checkout', done.stdout)

  def test_smoke_run_on_gemma(self):
    checkout = os.environ.get('FLAX_CHECKOUT')
    if not checkout:
      self.skipTest('needs a google/flax checkout: set FLAX_CHECKOUT')
    done = _run('--smoke', '--flax_checkout', checkout)
    self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
    rows = dict(re.findall(r'^\| ([^|]+?) \| \d+ \| (\d+ / \d+) \|',
                           done.stdout, re.MULTILINE))
    self.assertEqual(list(rows), list(WORKFLOWS), done.stdout)
    for workflow, compiles in rows.items():
      self.assertEqual(compiles, '1 / 0', workflow)
    self.assertEqual(done.stdout.count('| ok |'), len(WORKFLOWS))


if __name__ == '__main__':
  absltest.main()
