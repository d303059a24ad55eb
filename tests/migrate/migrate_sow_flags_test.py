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
"""Every reason a site is left alone has a case, annotated where it is.

The flagged input files (``flag_*``, ``mixed_partial``, the Linen ones that
are never touched) run with the other pairs in
``migrate_sow_fixtures_test.py``, which checks that each reports its
reasons (``EXPECTED_FLAGS``); here, that together they cover every reason
of ``flags.REASONS`` a person must act on, that the expected files carry
the TODO note of each, and that without ``annotate`` flagged code stays
as it is.
"""

import glob
import os

import codemod_testing
import sow_layout
from absl.testing import absltest

codemod_testing.require_libcst()

fixtures = sow_layout.test_module('migrate_sow_fixtures_test')
ms = sow_layout.test_module('migrate_sow_test').ms


class FlagFixturesTest(absltest.TestCase):

  def test_every_reason_has_a_fixture(self):
    required = {
        'nested-consumer', 'to-pure-dict', 'to-flat-state', 'tree-leaves',
        'multi-instance', 'transform', 'filter-use', 'subclass',
        'custom-reducer', 'kwargs', 'method-outputs', 'perturbation',
        'direct-intermediate', 'attribute-read', 'pop-not-adjacent',
        'earlier-call', 'later-pop', 'escaping-state', 'state-use',
        'nonliteral-name', 'sow-result-used', 'no-sow-found',
        'legacy-reader', 'legacy-sow', 'unknown-result', 'kept-module-sow',
    }
    covered = set().union(*fixtures.EXPECTED_FLAGS.values())
    self.assertContainsSubset(required, covered)
    self.assertContainsSubset(covered, set(ms.REASONS))

  def test_every_flagged_fixture_is_present(self):
    cases = {os.path.basename(path).replace('.input', '')
             for _, _, path in fixtures.fixtures()}
    self.assertContainsSubset(
        set(fixtures.EXPECTED_FLAGS) | fixtures.UNTOUCHED, cases)

  def test_fixture_flags_are_annotated_in_expected_output(self):
    for name, codes in fixtures.EXPECTED_FLAGS.items():
      matches = glob.glob(os.path.join(
          fixtures.DATA, '*', name.replace('.', '.expected.')))
      self.assertLen(matches, 1, msg=name)
      text = fixtures.read(matches[0])
      for code in codes:
        self.assertIn(f'# TODO(migrate_sow): {code}:', text, msg=name)

  def test_without_annotate_flagged_code_is_untouched(self):
    path = os.path.join(fixtures.DATA, 'functional',
                        'flag_nested_consumer.input.py')
    source = fixtures.read(path)
    new, flags = ms.migrate_source(source, target='functional',
                                   path='nested.py')
    self.assertEqual(new, source)
    self.assertNotEmpty(flags)


if __name__ == '__main__':
  absltest.main()
