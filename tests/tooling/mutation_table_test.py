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
"""Keeps ``scripts/mutation/mutants.py`` in step with the code it mutates.

The mutation run itself is not part of the suite (it takes half an hour or
more on two cores); this only checks, in a second, that every mutant still
applies to exactly one place and yields a module that compiles, that every
module of the package, at any depth, has mutants, so that a refactoring
cannot quietly turn the table into mutants of nothing, and the runner's
bookkeeping (score, published section).
"""

import dataclasses
import importlib.util
import pathlib
import sys
import tempfile

from absl.testing import absltest
import sow_layout

ROOT = pathlib.Path(sow_layout.ROOT)
TABLE = ROOT / 'scripts' / 'mutation' / 'mutants.py'


def _load(path, name):
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  # dataclasses look their module up in sys.modules.
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module


def _load_table():
  # The runner imports the table as `mutants`, from its own folder.
  sys.path.insert(0, str(TABLE.parent))
  try:
    return _load(TABLE, 'mutants')
  finally:
    sys.path.remove(str(TABLE.parent))


class MutationTableTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if not TABLE.exists():
      self.skipTest('scripts/mutation is not in this tree')
    self.table = _load_table()

  def test_every_mutant_applies_once_and_compiles(self):
    for mutant in self.table.MUTANTS:
      with self.subTest(mutant.id):
        text = (ROOT / mutant.path).read_text()
        self.assertEqual(text.count(mutant.old), 1)
        self.assertNotEqual(mutant.old, mutant.new)
        compile(text.replace(mutant.old, mutant.new), mutant.path, 'exec')

  def test_ids_are_unique_and_tests_exist(self):
    ids = [m.id for m in self.table.MUTANTS]
    self.assertLen(set(ids), len(ids))
    for mutant in self.table.MUTANTS:
      for test in mutant.tests:
        self.assertTrue((ROOT / test).exists(), test)

  def test_every_module_is_mutated(self):
    mutated = {m.path for m in self.table.MUTANTS}
    # Every module of flax/nnx/sow and capture_compat at any depth (their
    # packages' __init__.py only import).
    modules = {
        str(p.relative_to(ROOT))
        for package in ('sow', 'capture_compat')
        for p in (ROOT / 'flax' / 'nnx' / package).rglob('*.py')
        if p.name != '__init__.py'
    }
    self.assertEqual(modules - mutated, set())

  def test_equivalent_mutants_say_why(self):
    for mutant in self.table.MUTANTS:
      if mutant.equivalent is not None:
        self.assertGreater(len(mutant.equivalent), 40, mutant.id)


class RunnerBookkeepingTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if not TABLE.exists():
      self.skipTest('scripts/mutation is not in this tree')
    _load_table()
    self.runner = _load(TABLE.parent / 'run_mutants.py', 'sow_run_mutants')

  def outcomes(self):
    outcome = self.runner.Outcome
    return [
        outcome('a', 'flax/x.py', 'killed', 1.0, 'breaks a'),
        outcome('b', 'flax/x.py', 'timeout', 9.0, 'breaks b'),
        outcome('c', 'flax/y.py', 'survived', 3.0, 'breaks c'),
        outcome('d', 'flax/y.py', 'equivalent', 0.0, 'none', 'because d'),
    ]

  def test_summary_scores_killed_and_timeouts_over_non_equivalent(self):
    text = self.runner.summary(self.outcomes(), 600.0, jobs=2)
    self.assertIn('**2 of 3 killed (66.7%)** in 10.0 minutes', text)
    self.assertIn('| `flax/x.py` | 2 | 2 |', text)
    self.assertIn('| `flax/y.py` | 1 | 0 |', text)
    self.assertIn('- `c`: breaks c', text)
    self.assertIn('- `d`: because d', text)

  def test_publish_replaces_only_its_own_section(self):
    with tempfile.TemporaryDirectory() as tmp:
      results = pathlib.Path(tmp) / 'RESULTS.md'
      results.write_text('# bench\n\n| 1 | row |\n')
      previous = self.runner.RESULTS
      self.runner.RESULTS = results
      try:
        self.runner.publish('## Mutation testing\n\nfirst')
        with_other = results.read_text() + '\n## Another section\n'
        results.write_text(with_other)
        self.runner.publish('## Mutation testing\n\nsecond')
      finally:
        self.runner.RESULTS = previous
      content = results.read_text()
    self.assertTrue(content.startswith('# bench\n\n| 1 | row |\n'))
    self.assertEqual(content.count(self.runner.OTHERS_MARKER), 1)
    self.assertIn('second', content)
    self.assertNotIn('first', content)
    self.assertTrue(content.endswith('## Another section\n'))

  def test_only_a_failing_test_kills(self):
    cases = {
        'survived': ('', 'def test_ok():\n  pass\n'),
        'killed': ('', 'def test_broken():\n  assert False\n'),
        # The tests never ran: an import error in a conftest (what a shell
        # without the project's environment gives) kills nothing.
        'error': ('raise ImportError("no jax here")\n',
                  'def test_ok():\n  pass\n'),
    }
    for expected, (conftest, test) in cases.items():
      with self.subTest(expected), tempfile.TemporaryDirectory() as tmp:
        copy = pathlib.Path(tmp)
        (copy / 'conftest.py').write_text(conftest)
        (copy / 'probe_test.py').write_text(test)
        status, detail = self.runner._pytest(copy, ['probe_test.py'], 120)
        self.assertEqual(status, expected, detail)

  def test_a_stale_mutant_is_reported(self):
    stale = self.table_mutant(old='text that is nowhere in the file')
    with self.assertRaisesRegex(ValueError, 'occurs 0 times'):
      self.runner.check_applies(stale, ROOT)

  def table_mutant(self, **changes):
    return dataclasses.replace(sys.modules['mutants'].MUTANTS[0], **changes)


if __name__ == '__main__':
  absltest.main()
