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
"""Dotted spellings and patterns of names (``transform/names.py``)."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from flax.nnx.sow.transform import names

TAP = ('layers', 1, 'mlp', '__call__', 'output')


class SpellingTest(parameterized.TestCase):

  @parameterized.parameters(
      ('h', 'h'),
      (('h',), 'h'),
      (TAP, 'layers.1.mlp.__call__.output'),
      (('blocks', 0), 'blocks.0'),
  )
  def test_spell(self, name, spelled):
    self.assertEqual(names.spell(name), spelled)

  def test_a_spelling_reads_back_as_its_name(self):
    spelled = names.key(names.spell(TAP))
    self.assertEqual(names.resolve(spelled, [TAP, 'h'], where='t'), [TAP])

  @parameterized.parameters(('h',), (('h', 1),), (('layers', np.int64(3)),))
  def test_a_name_stays_a_name(self, name):
    key = names.key(name)
    self.assertNotIsInstance(key, names.Pattern)
    self.assertEqual(key, names.key(key))


class PatternTest(parameterized.TestCase):

  @parameterized.parameters(
      ('layers.*.mlp.__call__.output', True),
      ('layers.*.mlp.*.output', True),
      ('layers.*', False),  # '*' is exactly one component
      ('layers.**', True),
      ('**.output', True),
      ('**', True),
      ('layers.1.**.output', True),
      ('layers.2.**', False),
      ('*.*.m*.__call__.out*', True),
      ('layers.1.mlp.__call__.output.**', True),  # '**' takes none too
      (('layers', '*', 'mlp', '__call__', 'output'), True),
      (('layers', 1, '**'), True),
      (('layers', 2, '**'), False),
  )
  def test_matches(self, pattern, matches):
    key = names.key(pattern)
    self.assertIsInstance(key, names.Pattern)
    self.assertEqual(key.matches(TAP), matches)

  def test_a_str_name_matches_by_its_spelling(self):
    self.assertTrue(names.key('a*').matches('abc'))
    self.assertFalse(names.key('a*').matches(('a', 'b')))
    self.assertTrue(names.key('a.*').matches(('a', 'b')))

  def test_an_empty_component_is_refused(self):
    with self.assertRaisesRegex(ValueError, r"'layers\.\.1' has an empty"):
      names.key('layers..1')

  def test_two_names_of_one_spelling_are_ambiguous(self):
    key = names.key('a.b')
    with self.assertRaisesRegex(ValueError, r"'a\.b' spells 2 names"):
      names.resolve(key, ['a.b', ('a', 'b')], where='t')
    with self.assertRaisesRegex(ValueError, r"'l\.1' spells 2 names"):
      names.resolve(names.key('l.1'), [('l', 1), ('l', '1')], where='t')
    # A wildcard pattern selects both, as it says.
    self.assertLen(
        names.resolve(names.key('l.*'), [('l', 1), ('l', '1')], where='t'), 2
    )

  def test_closest(self):
    sown = [('layers', 0, 'h'), ('layers', 1, 'h'), 'loss']
    self.assertIn(('layers', 1, 'h'), names.closest('layers.1.g', sown))
    self.assertEqual(names.closest('zzzzzz', sown), [])


if __name__ == '__main__':
  absltest.main()
