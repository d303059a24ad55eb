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

The mutation run itself is not part of the suite (it takes most of an
hour); this only checks, in a second, that every mutant still applies to
exactly one place and yields a module that compiles, so that a refactoring
cannot quietly turn the table into mutants of nothing.
"""

import importlib.util
import pathlib
import sys

from absl.testing import absltest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TABLE = ROOT / 'scripts' / 'mutation' / 'mutants.py'


def _load_table():
  spec = importlib.util.spec_from_file_location('sow_mutants', TABLE)
  module = importlib.util.module_from_spec(spec)
  # dataclasses look their module up in sys.modules.
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module


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
    modules = {
        str(p.relative_to(ROOT))
        for p in (ROOT / 'flax' / 'nnx' / 'sow').glob('*.py')
        if p.name != '__init__.py'
    } | {'flax/nnx/capture_compat.py'}
    self.assertEqual(modules - mutated, set())

  def test_equivalent_mutants_say_why(self):
    for mutant in self.table.MUTANTS:
      if mutant.equivalent is not None:
        self.assertGreater(len(mutant.equivalent), 40, mutant.id)


if __name__ == '__main__':
  absltest.main()
