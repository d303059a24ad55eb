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
"""Tests that benchmarks/sow_bench.py keeps working; no timing is asserted.

The benchmark script is only run by hand, so these check its machinery (the
side-by-side timer, the table, publishing between markers) and run its
deterministic rows, peak memories whose figures come from XLA's memory
analysis rather than a clock.
"""

import os
import shutil
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import sow_layout
import numpy as np

ROOT = sow_layout.ROOT
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
import sow_bench  # noqa: E402  pylint: disable=g-import-not-at-top


class SowBenchTest(absltest.TestCase):

  def test_paired_runs_each_function_alternately(self):
    calls = []
    medians = sow_bench.paired(
        lambda: calls.append('a'), lambda: calls.append('b'),
        lambda: calls.append('c'), repeats=3, number=2, warmup=1,
    )
    self.assertLen(medians, 3)
    self.assertEqual(''.join(calls), 'abc' + 'aabbcc' * 3)

  def test_many_sows_processes_report_three_times_each(self):
    # Each fresh process measures jit(f), the hand-written f and capture.
    for collector in (True, False):
      # pylint: disable-next=protected-access
      measure = sow_bench._many_sows_in_processes
      (run,) = measure(n_layers=3, processes=1, repeats=1, collector=collector)
      self.assertLen(run.times, 3)
      for seconds in run.times:
        self.assertGreater(seconds, 0.0)
      if not collector:  # collections are counted, and none runs when off
        self.assertEqual(run.young + run.full, (0.0,) * 6)

  def test_memory_item_is_plain_plus_captured_bytes(self):
    (row,) = sow_bench.bench_memory(quick=True)
    self.assertEqual(row.item, '5')
    self.assertTrue(row.ok, row.detail)

  def test_compiled_capture_peaks_like_the_hand_written_function(self):
    row = sow_bench.compiled_peak_memory()
    self.assertEqual(row.item, '5')
    self.assertTrue(row.ok, row.detail)

  def test_eager_memory_functions_agree(self):
    # The two eager sides of item 5 compute the same values.
    x = sow_bench.jnp.linspace(0.0, 1.0, 8)
    out, kept = sow_bench.eager_by_hand(x)
    out_c, collected = sow_bench.capture(sow_bench.eager_sowing)(x)
    self.assertEqual(list(collected), [('step', 19), ('step', 39),
                                       ('step', 59)])
    for (value,), expected in zip(collected.values(), kept):
      np.testing.assert_array_equal(value, expected)  # the same operations
    np.testing.assert_array_equal(out_c, out)

  def test_render_and_publish_between_the_markers(self):
    rows = [
        sow_bench.Row('1', 'one thing / another', 1.5, '<= 1.15', False,
                      'why'),
        sow_bench.Row('3', 'reported only', 1.0, 'reported', None, ''),
    ]
    text = sow_bench.render(rows, quick=True)
    self.assertIn('| 1 | one thing / another | 1.50 | <= 1.15 | **no** |'
                  ' why |', text)
    self.assertIn('| 3 | reported only | 1.00 | reported | - |  |', text)
    root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, root)
    for name in sow_bench.PUBLISHED_IN:
      os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
      with open(os.path.join(root, name), 'w') as f:
        f.write(f'before\n{sow_bench._START}\nold table\n'
                f'{sow_bench._END}\nafter\n')
    # The README quotes no figure: publishing leaves it alone, markers or
    # not.
    self.assertNotIn('README.md', sow_bench.PUBLISHED_IN)
    readme = f'# title\n{sow_bench._START}\nold table\n{sow_bench._END}\n'
    with open(os.path.join(root, 'README.md'), 'w') as f:
      f.write(readme)
    self.enter_context_root(root)
    sow_bench.publish(text)
    with open(os.path.join(root, 'README.md')) as f:
      self.assertEqual(f.read(), readme)
    for name in sow_bench.PUBLISHED_IN:
      with open(os.path.join(root, name)) as f:
        content = f.read()
      self.assertTrue(content.startswith('before\n'))
      self.assertTrue(content.endswith(f'{sow_bench._END}\nafter\n'))
      self.assertNotIn('old table', content)
      self.assertIn('Machine:', content)
      self.assertIn('| 1 | one thing / another |', content)
      self.assertNotIn('# flax.nnx.sow benchmarks', content)

  def test_merge_replaces_only_the_rows_of_the_items_run(self):
    full = sow_bench.render([
        sow_bench.Row('1', 'first', 1.0, 't', True, 'a'),
        sow_bench.Row('7', 'old seven', 2.0, 't', False, 'b'),
        sow_bench.Row('3', 'third', 3.0, 't', None, 'c'),
    ], quick=False)
    merged = sow_bench.merge(full, [
        sow_bench.Row('7', 'new seven', 1.1, 't', True, 'd'),
        sow_bench.Row('7', 'another seven', 0.0, 't', True, 'e'),
    ], '7', quick=False)
    table = [line.split(' | ')[1] for line in merged.splitlines()
             if line.startswith('| ') and not line.startswith('| #')]
    self.assertEqual(table, ['first', 'third', 'new seven', 'another seven'])
    self.assertIn('Machine:', merged)  # the header of the full run stays
    self.assertIn('Rows of item 7: `python benchmarks/sow_bench.py --only 7`',
                  merged)
    # Re-running the item replaces its note and rows, not adds to them.
    again = sow_bench.merge(merged, [
        sow_bench.Row('7', 'newest seven', 1.0, 't', True, 'f')], '7',
                            quick=True)
    self.assertEqual(again.count('Rows of item 7:'), 1)
    self.assertIn('--only 7 --quick', again)
    self.assertNotIn('new seven', again)

  def test_sections_of_other_scripts_are_kept(self):
    own = sow_bench.render([
        sow_bench.Row('1', 'first', 1.0, 't', True, 'a')], quick=False)
    others = (f'\n{sow_bench.OTHERS_MARKER}\n\n## Mutation testing\n\n'
              '| mutant | status |\n|---|---|\n| x | killed |\n')
    mine, kept = sow_bench.split_others(own + others)
    self.assertEqual(mine, own)
    self.assertEqual(kept, others)
    # The other sections' tables are not taken for rows of this script's.
    merged = sow_bench.merge(mine, [
        sow_bench.Row('1', 'new first', 1.0, 't', True, 'b')], '1',
                             quick=False)
    self.assertNotIn('killed', merged)
    self.assertEqual(sow_bench.split_others(own), (own, ''))

  def test_gemma_item_is_skipped_without_a_checkout(self):
    with mock.patch.dict(os.environ):
      os.environ.pop(sow_bench.MODELS_FROM_ENV, None)
      self.assertEqual(sow_bench.bench_gemma(quick=True, models_from=None),
                       [])
      empty = tempfile.mkdtemp()
      self.addCleanup(shutil.rmtree, empty)
      self.assertEqual(sow_bench.bench_gemma(quick=True, models_from=empty),
                       [])

  def enter_context_root(self, root):
    previous = sow_bench.ROOT
    sow_bench.ROOT = root
    self.addCleanup(setattr, sow_bench, 'ROOT', previous)


if __name__ == '__main__':
  absltest.main()
