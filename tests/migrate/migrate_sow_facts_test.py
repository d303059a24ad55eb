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
"""The facts of one module: its sites, classes and other uses.

``facts.collect`` on one parsed module (phase 1 of the codemod, before any
decision): every ``Module.sow``/``perturb``, ``nnx.capture`` and
``nnx.pop`` call with what it names and how its State is read; for a pop,
why it has no call (``pops``; the call it belongs to and the calls of the
popped object before it, which need ``earlier``, are tested with the
analysis); the classes with their methods; the uses of ``nnx.Intermediate``
outside those calls (``other_uses``).
"""

import textwrap

import codemod_testing
from absl.testing import absltest

codemod_testing.require_libcst()

# pylint: disable=g-import-not-at-top,wrong-import-position
import libcst as cst
from libcst import metadata

facts = codemod_testing.codemod_module('facts')
# pylint: enable=g-import-not-at-top,wrong-import-position

INTERMEDIATE = ('flax.nnx.Intermediate',)


def _collect(source):
  module = cst.parse_module(textwrap.dedent(source))
  wrapper = metadata.MetadataWrapper(module)
  return facts.collect(wrapper, 'm.py', 0, '', 1, module=('pkg.m', 'pkg'))


def _codes(reasons):
  return [code for code, _ in reasons]


MODEL = '''\
    from flax import nnx
    NAME = 'h'

    class Block(nnx.Module):
      def __init__(self, rngs):
        self.linear = nnx.Linear(2, 2, rngs=rngs)

      def __call__(self, x, sow=False):
        y = self.linear(x)
        if sow:
          self.sow(nnx.Intermediate, NAME, y)
        self.sow(nnx.Intermediate, 'last', y, reduce_fn=lambda a, b: b)
        self.sow(nnx.Intermediate, 'sum', y, reduce_fn=lambda a, b: a + b)
        return self.perturb('out', y)
    '''


class SowsAndClassesTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.facts = _collect(MODEL)

  def test_each_sow_and_perturb_with_what_it_names(self):
    found = [(s.kind, s.line, s.col, s.owner, s.types, s.name, s.mode)
             for s in self.facts.sites]
    self.assertEqual(found, [
        # NAME is a module constant: its value is the name.
        ('sow', 11, 7, 'pkg.m.Block', INTERMEDIATE, 'h', 'append'),
        # A reducer keeping the last value is a clobber.
        ('sow', 12, 5, 'pkg.m.Block', INTERMEDIATE, 'last', 'clobber'),
        ('sow', 13, 5, 'pkg.m.Block', INTERMEDIATE, 'sum', 'append'),
        ('perturb', 14, 12, 'pkg.m.Block', ('flax.nnx.Perturbation',), 'out',
         'append'),
    ])
    self.assertEqual([_codes(s.reasons) for s in self.facts.sites],
                     [[], [], ['custom-reducer'], []])
    self.assertEqual({s.receiver for s in self.facts.sites}, {'self'})
    self.assertEqual(self.facts.constants, {'NAME': 'h'})

  def test_a_class_with_its_bases_calls_and_methods(self):
    (block,) = self.facts.classes
    self.assertEqual((block.qualified, block.bases, block.line),
                     ('pkg.m.Block', ('flax.nnx.Module',), 4))
    self.assertIn(('flax.nnx.Linear', False), block.calls)
    call = block.methods['__call__']
    # The first sow runs only if `sow` is truthy; it defaults to False.
    self.assertEqual(call.sow_guards, [frozenset({'sow'}), frozenset(),
                                       frozenset(), frozenset()])
    self.assertEqual((call.params, call.false_defaults),
                     (('x', 'sow'), frozenset({'sow'})))
    self.assertFalse(block.methods['__init__'].sows)

  def test_a_name_that_is_not_a_literal_is_not_guessed(self):
    (site,) = _collect('''\
        from flax import nnx
        class M(nnx.Module):
          def __call__(self, x, name):
            self.sow(nnx.Intermediate, name, x)
            return x
        ''').sites
    self.assertIsNone(site.name)
    self.assertIn('nonliteral-name', _codes(site.reasons))


class ReadersTest(absltest.TestCase):

  def test_a_capture_and_the_names_its_state_is_read_by(self):
    (site,) = _collect('''\
        from flax import nnx

        def run(model, x):
          y, s = nnx.capture(model, nnx.Intermediate)(x)
          return s['h'][0], s.g.value
        ''').sites
    self.assertEqual((site.kind, site.line, site.types),
                     ('capture', 4, INTERMEDIATE))
    self.assertEqual(site.consumer.names, {'g', 'h'})
    self.assertIsNone(site.consumer.reason)

  def test_why_a_pop_has_no_call(self):
    result = _collect('''\
        from flax import nnx

        def far(model, x):
          y = model(x)
          z = 1
          state = nnx.pop(model, nnx.Intermediate)
          nnx.pop(model, nnx.Intermediate)
          return state['h'][0]
        ''')
    far, discarded = result.sites
    self.assertEqual(_codes(far.pop_reasons), ['pop-not-adjacent'])
    self.assertIn('1 statement between', far.pop_reasons[0][1])
    self.assertIsNone(far.pop_call)
    self.assertEqual(_codes(discarded.pop_reasons), ['pop-discarded'])

class OtherUsesTest(absltest.TestCase):

  def test_filters_variables_and_attribute_reads(self):
    result = _collect('''\
        from flax import nnx

        def run(model, x):
          filtered = nnx.state(model, nnx.Intermediate)
          v = nnx.Intermediate(x)
          model(x)
          return model.last.value

        def never_called(cursor):
          return cursor.last.value
        ''')
    self.assertEqual(
        [(o.code, o.line, o.name, o.receiver) for o in result.others],
        [('filter-use', 4, None, None),
         ('direct-intermediate', 5, None, None),
         # Only an object that was called can hold a sown value.
         ('attribute-read', 7, 'last', 'model')])
    self.assertEqual(result.sites, [])


if __name__ == '__main__':
  absltest.main()
