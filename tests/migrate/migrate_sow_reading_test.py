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
"""Reading a project (``reading.py``): which files, which are analysed, in
one process or several, and the library classes its classes are made of."""

import io
import os
import tempfile
import textwrap
import types

import codemod_testing
from absl.testing import absltest

reading = codemod_testing.codemod_module('reading')
parallel = codemod_testing.codemod_module('parallel')
progress = codemod_testing.codemod_module('progress')

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testdata')


def _summary():
  # What analyse_all tallies (the runner's Summary has these fields).
  return types.SimpleNamespace(errors=[], internal=[], analysed=0)


def _write(directory, relative, text):
  path = os.path.join(directory, relative)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(textwrap.dedent(text))
  return path


class ReadingTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = self.enter_context(tempfile.TemporaryDirectory())
    _write(self.root, 'pyproject.toml', '')
    self.model = _write(self.root, 'pkg/model.py', '''\
        from flax import nnx


        class Model(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'h', x)
            return x
        ''')
    self.plain = _write(self.root, 'pkg/plain.py', 'x = {}.pop("a", 1)\n')
    _write(self.root, 'build/skipped.py', 'nnx.pop(m, nnx.Intermediate)\n')
    _write(self.root, '.hidden/skipped.py', 'nnx.pop(m, nnx.Intermediate)\n')

  def _analyse(self, pool):
    analyses, unknown, skipped = {}, [], []
    files = reading.find_files([self.root])
    reading.analyse_all(files, files, self.root, self.root, False,
                        io.StringIO(), _summary(), analyses, unknown,
                        skipped, None, pool, {})
    return analyses, skipped

  def test_the_files_of_a_project(self):
    self.assertEqual(reading.find_files([self.root]),
                     [os.path.join(self.root, 'pkg', 'model.py'), self.plain])
    self.assertEqual(reading.project_root([self.model]), self.root)

  def test_only_files_naming_the_apis_are_analysed(self):
    # plain.py's dict.pop names no Flax: not worth parsing.
    analyses, skipped = self._analyse(parallel.Pool(1))
    self.assertEqual(list(analyses), [self.model])
    self.assertEqual(skipped, [self.plain])
    self.assertEqual(analyses[self.model].path, 'pkg/model.py')

  def test_several_processes_give_the_same_facts(self):
    serial, _ = self._analyse(parallel.Pool(1))
    pool = parallel.Pool(2)
    try:
      both, _ = self._analyse(pool)
    finally:
      pool.close()

    def facts(analyses):
      return {p: [(s.kind, s.line, s.col, s.name) for u in a.units
                  for s in u.facts.sites] for p, a in analyses.items()}

    self.assertEqual(facts(both), facts(serial))

  def test_a_pool_maps_in_order_whatever_the_sizes(self):
    pool = parallel.Pool(2)
    try:
      self.assertEqual(pool.map(abs, [-3, 1, -2, 4], sizes=[1, 9, 5, 2]),
                       [3, 1, 2, 4])
    finally:
      pool.close()

  def test_no_progress_bar_off_a_terminal(self):
    stream = io.StringIO()
    bar = progress.Progress(stream)
    self.assertFalse(bar.enabled)
    with bar, bar.phase('analysing', 3) as advance:
      advance()
    self.assertEqual(stream.getvalue(), '')

  def test_library_classes_are_read_from_the_search_path(self):
    user = _write(self.root, 'nca.py', '''\
        from flax import nnx
        from nca_lib import ComplexSystem, NCAUpdate


        class Growing(ComplexSystem):

          def __init__(self, rngs):
            self.update = NCAUpdate(3, (8,), rngs=rngs)


        def run(model: Growing, x):
          model(x)
          return nnx.pop(model, nnx.Intermediate)
        ''')
    analyses, unknown = {}, []
    reading.analyse_all([user], [user], self.root, self.root, False,
                        io.StringIO(), _summary(), analyses, unknown,
                        [], None, None, {})
    aliases = {}
    reading.analyse_bases([user], self.root, aliases, analyses, False,
                          io.StringIO(), _summary(), unknown, self.root,
                          None, {}, [os.path.join(DATA, 'library')])
    classes = {c.qualified for a in analyses.values() for u in a.units
               for c in u.facts.classes}
    self.assertContainsSubset({'nca_lib.core.system.ComplexSystem',
                               'nca_lib.core.update.NCAUpdate'}, classes)
    self.assertEqual(aliases['nca_lib.NCAUpdate'], 'nca_lib.core.NCAUpdate')
    # The library's sow is a site never rewritten; the project's pop is not.
    sites = {(a.path, s.kind, s.library, s.reasons[0][0] if s.reasons else '')
             for a in analyses.values() for u in a.units
             for s in u.facts.sites}
    self.assertEqual(sites, {('nca.py', 'pop', False, ''), (
        os.path.join('nca_lib', 'core', 'system.py'), 'sow', True,
        'library')})


if __name__ == '__main__':
  absltest.main()
