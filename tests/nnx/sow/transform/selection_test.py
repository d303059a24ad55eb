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
"""Which sows an interpretation handles: site filters and requests.

``Selection`` (by tag and by name), the filters rules narrow it with, and
the ``Request`` that says what an interpretation does with what it selects,
tested on sow parameters alone.
"""

from absl.testing import absltest
from absl.testing import parameterized

from flax.nnx.sow.transform import selection
from flax.nnx.sow.transform.request import Request


def params(name, tag=None, mode='append'):
  return {'sow_name': name, 'tag': tag, 'mode': mode}


class SelectionTest(parameterized.TestCase):

  def test_by_tag_and_by_names(self):
    everything = selection.Selection()
    tagged = selection.Selection.make(tag='t', names=None, where='test')
    named = selection.Selection.make(tag=None, names=['h', ('b', 0)],
                                     where='test')
    self.assertTrue(everything.matches(params('h', tag='other')))
    self.assertTrue(tagged.matches(params('h', tag='t')))
    self.assertFalse(tagged.matches(params('h', tag='other')))
    self.assertTrue(named.matches(params(('b', 0))))
    self.assertFalse(named.matches(params('g')))

  def test_a_string_is_one_name(self):
    named = selection.Selection.make(tag=None, names='hh', where='test')
    self.assertEqual(named.names, frozenset(['hh']))
    self.assertFalse(named.matches(params('h')))

  @parameterized.named_parameters(
      ('number', 3), ('dict', {'h': 1}), ('bad_name_in_list', [1.5]))
  def test_bad_names(self, names):
    with self.assertRaisesRegex(TypeError, r'^test: '):
      selection.Selection.make(tag=None, names=names, where='test')

  def test_an_unhashable_tag_is_refused(self):
    with self.assertRaisesRegex(TypeError, 'tag'):
      selection.Selection.make(tag=['t'], names=None, where='test')

  def test_a_predicate_resolves_to_the_names_it_selects(self):
    calls = []

    def wanted(name):
      calls.append(name)
      return name != 'b'

    by_predicate = selection.Selection.make(tag='t', names=wanted,
                                            where='test')
    self.assertTrue(by_predicate.by_predicate)
    keys = [('a', 't'), ('b', 't'), ('c', 'other')]
    resolved = by_predicate.resolve(lambda: keys)
    self.assertEqual(resolved, selection.Selection(tag='t',
                                                   names=frozenset(['a'])))
    self.assertCountEqual(calls, ['a', 'b'])  # only names of its tag
    # Another predicate selecting the same names resolves to an equal key.
    self.assertEqual(
        selection.Selection(tag='t', names=lambda n: n == 'a').resolve(
            lambda: keys),
        resolved)

  def test_resolve_walks_no_program_without_a_predicate(self):
    plain = selection.Selection(tag='t')

    def keys():
      raise AssertionError('walked the program')

    self.assertIs(plain.resolve(keys), plain)

  def test_excluding_and_appends(self):
    base = selection.Selection()
    excluding = selection.Excluding(base, frozenset(['h']))
    self.assertFalse(excluding.matches(params('h')))
    self.assertTrue(excluding.matches(params('g')))
    appends = selection.Appends(base)
    self.assertTrue(appends.matches(params('h')))
    self.assertFalse(appends.matches(params('h', mode='clobber')))
    # Hashable, as every site filter: they key the interpreter's caches.
    self.assertEqual(hash(excluding),
                     hash(selection.Excluding(base, frozenset(['h']))))


class RequestTest(absltest.TestCase):

  def test_a_capture_handles_what_it_selects(self):
    request = Request(selection.Selection(tag='t'))
    self.assertTrue(request.handles(params('h', tag='t')))
    self.assertFalse(request.handles(params('h')))
    self.assertFalse(request.plants(params('h', tag='t')))

  def test_a_plant_without_collecting_handles_what_it_plants(self):
    request = Request(selection.Selection(), collect=False,
                      planted=selection.Selection(names=frozenset(['p'])))
    self.assertTrue(request.handles(params('p')))
    self.assertTrue(request.plants(params('p')))
    self.assertFalse(request.handles(params('q')))

  def test_removing(self):
    request = Request(selection.Selection(tag='t'),
                      planted=selection.Selection(), rebind_unhandled=False)
    removing = request.removing()
    self.assertTrue(removing.remove)
    self.assertFalse(removing.collect)
    self.assertIsNone(removing.planted)
    self.assertFalse(removing.rebind_unhandled)
    self.assertTrue(removing.handles(params('h', tag='t')))
    self.assertFalse(removing.handles(params('h')))


if __name__ == '__main__':
  absltest.main()
