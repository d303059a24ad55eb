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
"""The decisions: for every site of a project, rewrite, leave, or flag.

``decide.decide`` on the facts of several files at once (phase 2 of the
codemod): a sow is rewritten only with every reader that may reach it, a
reader only if what it reads maps to the functional API; with
``--target=capture`` a pop becomes a capture only where that collects
the same values, with Flax 0.12.8's ``nnx.capture`` (``hazards``) or
``capture_compat``'s. A flag says why, as ``flags.Flag`` prints it.
"""

import textwrap

import codemod_testing
from absl.testing import absltest

codemod_testing.require_libcst()

# pylint: disable=g-import-not-at-top,wrong-import-position
analysis = codemod_testing.codemod_module('analysis')
decide = codemod_testing.codemod_module('decide')
flags = codemod_testing.codemod_module('flags')
hazards = codemod_testing.codemod_module('hazards')
# pylint: enable=g-import-not-at-top,wrong-import-position


def _project(files):
  """The project of ``files`` (path: source) under the root ``/r``."""
  sites, classes, others, state_names = [], [], [], {}
  for path, source in files.items():
    result = analysis.analyse(path, textwrap.dedent(source).encode('utf-8'),
                              '/r', '/r/' + path)
    assert result.error is None, result.error
    for unit in result.units:
      sites += unit.facts.sites
      classes += unit.facts.classes
      others += unit.facts.others
      state_names.setdefault(path, set()).update(unit.facts.state_names)
  return decide.Project(sites, classes, others, state_names)


def _decide(files, target='functional', nnx_capture=hazards.LEGACY):
  """(path, line, kind, action, code) of every NNX site."""
  project = _project(files)
  decisions = decide.decide(project, target, nnx_capture)
  return [(s.path, s.line, s.kind, decisions[id(s)].action,
           decisions[id(s)].code) for s in project.sites]


MODEL = '''\
    from flax import nnx


    class Model(nnx.Module):

      def __call__(self, x):
        self.sow(nnx.Intermediate, 'h', x)
        return x
    '''


def _reader(body):
  return '''\
    from flax import nnx
    from pkg.m import Model


    def run(x):
      model = Model()
    '''.rstrip(' ') + textwrap.indent(textwrap.dedent(body), '      ')


class FunctionalTest(absltest.TestCase):

  def test_a_sow_and_its_capture_migrate_together(self):
    self.assertEqual(_decide({
        'pkg/m.py': MODEL,
        'pkg/t.py': _reader('''\
            y, s = nnx.capture(model, nnx.Intermediate)(x)
            return s['h'][0]
            '''),
    }), [('pkg/m.py', 7, 'sow', 'rewrite', ''),
         ('pkg/t.py', 7, 'capture', 'rewrite', '')])

  def test_a_reader_that_stays_keeps_the_sows_it_reaches(self):
    self.assertEqual(_decide({
        'pkg/m.py': MODEL,
        'pkg/t.py': _reader('''\
            y, s = nnx.capture(model, nnx.Intermediate)(x)
            return s.to_pure_dict()
            '''),
    }), [('pkg/m.py', 7, 'sow', 'flag', 'legacy-reader'),
         ('pkg/t.py', 7, 'capture', 'flag', 'to-pure-dict')])

  def test_a_reader_of_another_class_does_not_reach_the_sow(self):
    other = MODEL.replace('Model', 'Other').replace("'h'", "'g'")
    self.assertEqual(_decide({
        'pkg/m.py': MODEL,
        'pkg/o.py': other,
        'pkg/u.py': _reader('''\
            y, s = nnx.capture(model, nnx.Intermediate)(x)
            return s.to_pure_dict()
            '''),
    }), [('pkg/m.py', 7, 'sow', 'flag', 'legacy-reader'),
         # Only Model's sows are kept for the reader of a Model.
         ('pkg/o.py', 7, 'sow', 'rewrite', ''),
         ('pkg/u.py', 7, 'capture', 'flag', 'to-pure-dict')])

  def test_a_reader_of_a_name_no_sow_has_says_so(self):
    self.assertEqual(_decide({
        'pkg/m.py': MODEL,
        'pkg/t.py': _reader('''\
            y, s = nnx.capture(model, nnx.Intermediate)(x)
            return s['other'][0]
            '''),
    }), [('pkg/m.py', 7, 'sow', 'flag', 'legacy-reader'),
         ('pkg/t.py', 7, 'capture', 'flag', 'no-sow-found')])

  def test_a_sow_without_a_reader_migrates_and_a_custom_reducer_does_not(
      self):
    project = _project({'pkg/m.py': '''\
        from flax import nnx
        import flax.linen as nn


        class Model(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'h', x)
            self.sow(nnx.Intermediate, 's', x, reduce_fn=lambda a, b: a + b,
                     init_fn=lambda: 0)
            return x


        class Linen(nn.Module):

          def __call__(self, x):
            self.sow('intermediates', 'h', x)
            return x
        '''})
    decisions = decide.decide(project, 'functional')
    self.assertEqual([(s.line, decisions[id(s)].action, decisions[id(s)].code)
                      for s in project.sites],
                     [(8, 'rewrite', ''), (9, 'flag', 'custom-reducer')])
    # Linen code is not an NNX site: no decision, counted apart.
    self.assertEqual([s.line for s in project.linen], [17])
    self.assertNotIn(id(project.linen[0]), decisions)


class CaptureTargetTest(absltest.TestCase):

  def test_sows_stay_and_an_adjacent_pop_becomes_a_capture(self):
    self.assertEqual(_decide({
        'pkg/m.py': MODEL,
        'pkg/t.py': _reader('''\
            y = model(x)
            s = nnx.pop(model, nnx.Intermediate)
            z = 1
            y = model(x)
            t = nnx.pop(model, nnx.Intermediate)
            return s['h'][0], t['h'][0]
            '''),
    }, target='capture'), [('pkg/m.py', 7, 'sow', 'ok', ''),
                           ('pkg/t.py', 8, 'pop', 'rewrite', ''),
                           ('pkg/t.py', 11, 'pop', 'rewrite', '')])

  def test_a_pop_far_from_its_call_or_after_an_earlier_call_stays(self):
    self.assertEqual(_decide({
        'pkg/m.py': MODEL,
        'pkg/t.py': _reader('''\
            y = model(x)
            z = 1
            s = nnx.pop(model, nnx.Intermediate)
            model(x)
            y = model(x)
            t = nnx.pop(model, nnx.Intermediate)
            return s['h'][0], t['h'][0]
            '''),
    }, target='capture'), [
        # The legacy reader that stays needs the legacy sow.
        ('pkg/m.py', 7, 'sow', 'flag', 'legacy-reader'),
        ('pkg/t.py', 9, 'pop', 'flag', 'pop-not-adjacent'),
        ('pkg/t.py', 12, 'pop', 'flag', 'earlier-call')])

  def test_a_list_under_vmap_is_a_hazard_only_for_the_legacy_capture(self):
    files = {'pkg/m.py': '''\
        from flax import nnx


        class Block(nnx.Module):

          def __init__(self, rngs: nnx.Rngs):
            self.layers = nnx.List([nnx.Linear(2, 2, rngs=rngs)])

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'x', x)
            return x


        def run(model: Block, x):
          y = nnx.vmap(lambda m, v: m(v))(model, x)
          s = nnx.pop(model, nnx.Intermediate)
          return y, s['x'][0]
        '''}
    legacy = _decide(files, target='capture')
    self.assertEqual(legacy[1][2:], ('pop', 'flag', 'capture-hazard'))
    transform = _decide(files, target='capture',
                        nnx_capture=hazards.TRANSFORM)
    self.assertEqual(transform[1][2:], ('pop', 'rewrite', ''))

  def test_the_installed_capture(self):
    # This tree's Flax is a released one (the legacy nnx.capture) unless the
    # overlay is installed, or Flax's tree holds this contribution.
    self.assertIn(hazards.installed_capture(),
                  (hazards.LEGACY, hazards.TRANSFORM))


class FlagTest(absltest.TestCase):

  def test_a_flag_is_path_line_col_reason(self):
    flag = flags.Flag('m.py', 3, 5, 'kwargs', 'the detail', 'cell 2')
    self.assertEqual(str(flag), 'm.py:3:5: kwargs: the detail [cell 2]')
    self.assertEqual(flags.Flag('m.py', 3, 5, 'kwargs').message,
                     flags.REASONS['kwargs'])
    # A reason is never cut: the line holds all of it (whitespace folded).
    long = flags.Flag('m.py', 1, 1, 'kwargs', ' '.join(['word'] * 100))
    self.assertEqual(str(long), 'm.py:1:1: kwargs: ' + long.detail)

  def test_shorten(self):
    self.assertEqual(flags.shorten(['a', 'b', 'a']), 'a, b')
    self.assertEqual(flags.shorten(list('abcdef')), 'a, b, c and 3 more')


if __name__ == '__main__':
  absltest.main()
