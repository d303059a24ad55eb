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
"""``scripts/fuzz/run_fuzzers.py``: a short budget runs, reports, and a
fuzzer whose process dies is a failure, not a hang."""

import json
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
import sow_layout

RUNNER = os.path.join(sow_layout.ROOT, 'scripts', 'fuzz', 'run_fuzzers.py')


def _run(*args, env=None):
  return subprocess.run(
      [sys.executable, RUNNER, *args], capture_output=True, text=True,
      timeout=600, env=env, check=False)


class RunFuzzersTest(absltest.TestCase):

  def test_both_fuzzers_run_for_the_budget_and_report(self):
    with tempfile.TemporaryDirectory() as tmp:
      out = os.path.join(tmp, 'reports.json')
      done = _run('--minutes', '0.05', '--round', '3', '--seed', '7',
                  '--json', out)
      self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
      with open(out, encoding='utf-8') as f:
        reports = json.load(f)
    self.assertEqual(reports['seed'], 7)
    by_name = {r['fuzzer']: r for r in reports['reports']}
    self.assertCountEqual(by_name, ['programs', 'nnx'])
    for report in by_name.values():
      self.assertGreater(report['examples'], 0)
      self.assertIsNone(report['failure'])
      self.assertIn(f"{report['fuzzer']}: {report['examples']} examples",
                    done.stdout)

  def test_the_codemod_fuzzer_runs_and_reports_its_counts(self):
    with tempfile.TemporaryDirectory() as tmp:
      out = os.path.join(tmp, 'reports.json')
      done = _run('--minutes', '0.01', '--round', '1', '--seed', '3',
                  '--fuzzers', 'codemod', '--json', out)
      self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
      with open(out, encoding='utf-8') as f:
        (report,) = json.load(f)['reports']
    self.assertEqual(report['fuzzer'], 'codemod')
    self.assertEqual(report['rounds'], 1)
    self.assertIsNone(report['failure'])
    counts = report['counts']
    self.assertEqual(counts['mismatches'], 0)
    # Each example is a project migrated and run, or one Flax 0.12.8 cannot
    # run (not a project to migrate, and hypothesis draws another).
    self.assertGreaterEqual(counts['projects'], 1)
    self.assertEqual(counts['projects'] + counts.get(
        'projects not run by Flax 0.12.8', 0), report['examples'])
    self.assertGreater(counts['sites'], 0)
    self.assertIn(f"codemod: {report['examples']} examples", done.stdout)
    self.assertIn(f"projects {counts['projects']}", done.stdout)

  def test_a_fuzzer_that_cannot_start_is_a_failure(self):
    # The runner imports the helpers from --tests: a folder without them.
    with tempfile.TemporaryDirectory() as tmp:
      done = _run('--minutes', '0.05', '--fuzzers', 'programs', '--tests',
                  tmp)
    self.assertEqual(done.returncode, 1, done.stdout + done.stderr)
    self.assertIn('exited with code', done.stdout)


if __name__ == '__main__':
  absltest.main()
