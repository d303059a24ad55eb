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
"""Tests of scripts/migrate/migrate_sow.py, the codemod's command line.

``run`` over files and projects: the modes (diff, write, check), the
summary, the exit codes, consumers and readers in other files, re-exports,
read-only and unparsable files, line ends, ``--jobs``. The rewrite of each
construct is tested on the input and expected files
(``migrate_sow_fixtures_test.py``).
"""

import importlib
import importlib.util
import io
import os
import sys
import tempfile
import textwrap

import codemod_testing
import sow_layout
from absl.testing import absltest

codemod_testing.require_libcst()

_SCRIPT = os.path.join(sow_layout.ROOT, 'scripts', 'migrate', 'migrate_sow.py')
# The codemod's input and expected files, beside this file.
_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testdata')


def _load_codemod():
  # Imported by name, so that there is one module object however many
  # places load it (pickling the --jobs workers' function needs that), and
  # spawned worker processes can import it too.
  if os.path.dirname(_SCRIPT) not in sys.path:
    sys.path.append(os.path.dirname(_SCRIPT))
  module = importlib.import_module('migrate_sow')
  assert os.path.samefile(module.__file__, _SCRIPT), module.__file__
  return module


ms = _load_codemod()
reexports = codemod_testing.codemod_module('reexports')


def write(directory, relative, text):
  path = os.path.join(directory, relative)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(textwrap.dedent(text))
  return path


def read(path):
  with open(path, encoding='utf-8') as f:
    return f.read()


def run(paths, **kwargs):
  out, err = io.StringIO(), io.StringIO()
  kwargs.setdefault('progress', False)
  code, summary = ms.run(paths, out=out, err=err, **kwargs)
  return code, summary, out.getvalue(), err.getvalue()


class CommandLineTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = self.enter_context(tempfile.TemporaryDirectory())
    self.model = write(self.dir, 'pkg/model.py', '''\
        from flax import nnx


        class Model(nnx.Module):

          def __init__(self, rngs):
            self.linear = nnx.Linear(2, 2, rngs=rngs)

          def __call__(self, x):
            y = self.linear(x)
            self.sow(nnx.Intermediate, 'y', y)
            return y
        ''')
    self.train = write(self.dir, 'pkg/train.py', '''\
        from flax import nnx


        def step(model, x):
          y, state = nnx.capture(model, nnx.Intermediate)(x)
          return y, state['y'].value[0]
        ''')
    self.unrelated = write(self.dir, 'pkg/util.py', 'def f(:\n')

  def test_diff_is_the_default_and_writes_nothing(self):
    before = read(self.model)
    code, summary, out, _ = run([self.dir], target='functional')
    self.assertEqual(code, 0)
    self.assertEqual(read(self.model), before)
    self.assertIn("+    sow(y, name='y')", out)
    self.assertIn("+  return y, state['y'][0]", out)
    self.assertEqual((summary.files, summary.analysed, summary.changed),
                     (3, 2, 2))

  def test_write_then_check_is_clean(self):
    code, _, _, _ = run([self.dir], target='functional', mode='write')
    self.assertEqual(code, 0)
    self.assertIn("sow(y, name='y')", read(self.model))
    self.assertIn('capture(model)(x)', read(self.train))
    code, summary, out, _ = run([self.dir], target='functional', mode='check')
    self.assertEqual((code, summary.changed, out), (0, 0, ''))

  def test_check_exits_one_when_something_would_change(self):
    before = read(self.train)
    code, _, out, _ = run([self.dir], target='functional', mode='check')
    self.assertEqual(code, ms.EXIT_CHANGES)
    self.assertEqual(out, '')
    self.assertEqual(read(self.train), before)

  def test_consumer_in_another_file_blocks_the_sow(self):
    write(self.dir, 'pkg/report.py', '''\
        from flax import nnx


        def report(model, x):
          _, state = nnx.capture(model, nnx.Intermediate)(x)
          return state.to_pure_dict()
        ''')
    code, summary, out, err = run([self.dir], target='functional', mode='check')
    self.assertEqual((code, out, summary.changed), (0, '', 0))
    self.assertIn('model.py:11:5: legacy-reader', err)
    self.assertIn('report.py:5:14: to-pure-dict', err)
    self.assertIn('train.py:5:14: legacy-sow', err)

  def test_attribute_read_in_a_file_without_the_api(self):
    write(self.dir, 'pkg/eval.py', '''\
        def evaluate(model, x):
          model(x)
          return model.y.value
        ''')
    code, summary, _, err = run([self.dir], mode='check')
    self.assertEqual(code, 0)
    self.assertIn('model.py:11:5: attribute-read: read as an attribute, '
                  'model.y.value, at ', err)
    self.assertIn('eval.py:3', err)
    self.assertEqual(summary.changed, 0)

  def test_unparsable_files_are_reported_and_untouched(self):
    broken = write(self.dir, 'pkg/broken.py', '''\
        from flax import nnx
        def f(x:
          self.sow(nnx.Intermediate, 'x', x)
        ''')
    before = read(broken)
    code, summary, _, err = run([self.dir], target='functional', mode='write')
    self.assertEqual(code, ms.EXIT_UNREADABLE)
    self.assertEqual(read(broken), before)
    self.assertRegex(err, r'broken.py:\d: does not parse')
    self.assertEqual(summary.changed, 2)

  def test_summary_counts_rewrites_and_flags(self):
    _, summary, _, _ = run([self.dir], target='functional')
    self.assertEqual(summary.rewritten, {'sow': 1, 'capture': 1})
    lines = summary.lines()
    self.assertIn('3 files, 2 analysed, 2 changed', lines[0])
    self.assertIn('NNX sites: 2; rewritten: 2', lines[1])

  def test_annotate_writes_todo_comments_once(self):
    path = write(self.dir, 'flagged/m.py', '''\
        from flax import nnx


        class M(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, f'x{1}', x)
            return x
        ''')
    run([path], target='functional', mode='write', annotate=True)
    text = read(path)
    self.assertEqual(text.count('# TODO(migrate_sow): nonliteral-name'), 1)
    code, _, _, _ = run([path], target='functional',
                        mode='check', annotate=True)
    self.assertEqual(code, 0)

  def test_markdown_with_an_unparsable_block_is_untouched(self):
    path = write(self.dir, 'docs/bad.md', '''\
        ```python
        from flax import nnx
        class M(nnx.Module):
          def __call__(self, x):
            self.sow(nnx.Intermediate, 'x', x)
            return x
        ```

        ```python
        >>> doctest style
        ```
        ''')
    before = read(path)
    code, _, _, err = run([path], target='functional', mode='write')
    # The fence that parses is migrated; the other is reported with its line
    # in the .md file and left as it is.
    self.assertEqual(code, ms.EXIT_UNREADABLE)
    self.assertIn('bad.md:10: does not parse', err)
    self.assertIn('>>> doctest style', read(path))
    self.assertNotEqual(read(path), before)

  def test_main_usage_errors_exit_two(self):
    with self.assertRaises(SystemExit) as raised, open(os.devnull, 'w') as devnull:
      with absltest.mock.patch('sys.stderr', devnull):
        ms.main(['--target', 'other', self.dir])
    self.assertEqual(raised.exception.code, ms.EXIT_USAGE)
    with self.assertRaises(SystemExit) as raised, open(os.devnull, 'w') as devnull:
      with absltest.mock.patch('sys.stderr', devnull):
        ms.main([os.path.join(self.dir, 'missing.py')])
    self.assertEqual(raised.exception.code, ms.EXIT_USAGE)

  def test_main_check(self):
    with absltest.mock.patch('sys.stderr', io.StringIO()) as err:
      code = ms.main(['--check', '--no-progress', '--target=functional',
                     self.dir])
    self.assertEqual(code, ms.EXIT_CHANGES)
    self.assertIn('migrate_sow: 3 files, 2 analysed', err.getvalue())


class ProjectTest(absltest.TestCase):
  """Runs over small projects shaped like the real ones that broke before."""

  def setUp(self):
    super().setUp()
    self.dir = self.enter_context(tempfile.TemporaryDirectory())
    write(self.dir, 'pyproject.toml', '[project]\nname = "p"\n')

  def _model(self, relative, name='Model', sown='y'):
    return write(self.dir, relative, f'''\
        from flax import nnx


        class {name}(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, '{sown}', x)
            return x
        ''')

  def test_partial_run_leaves_a_sow_whose_reader_stays_legacy(self):
    model = self._model('pkg/model.py')
    train = write(self.dir, 'pkg/train.py', '''\
        from flax import nnx


        def step(model, x):
          model(x)
          state = nnx.pop(model, nnx.Intermediate)
          return state.to_pure_dict()
        ''')
    before = (read(model), read(train))
    code, summary, _, err = run([model], target='functional', mode='write')
    self.assertEqual(code, 0)
    self.assertEqual((read(model), read(train)), before)
    self.assertIn('model.py:7:5: legacy-reader', err)
    self.assertEqual(summary.changed, 0)

  def test_partial_run_leaves_a_sow_whose_rewritable_reader_is_not_given(
      self):
    # The reader in train.py could migrate with the sow, but the run is over
    # model.py only: rewriting the sow alone would leave the reader finding
    # nothing.
    model = self._model('pkg/model.py')
    train = write(self.dir, 'pkg/train.py', '''\
        from flax import nnx
        from pkg.model import Model


        def step(x):
          model = Model()
          y, s = nnx.capture(model, nnx.Intermediate)(x)
          return s['y'][0]


        def step2(x):
          model = Model()
          model(x)
          s = nnx.pop(model, nnx.Intermediate)
          return s['y'][0]
        ''')
    before = (read(model), read(train))
    for target, reader in (('functional', 'capture at pkg/train.py:7'),
                           ('capture', 'nnx.pop at pkg/train.py:14')):
      with self.subTest(target):
        code, summary, _, err = run([model], target=target, mode='write')
        self.assertEqual(code, 0)
        self.assertEqual((read(model), read(train)), before)
        self.assertIn('model.py:7:5: legacy-reader: ', err)
        self.assertIn(f'{reader}, which stays (outside-paths)', err)
        self.assertEqual(summary.sites, 1)  # train.py's are not counted
    # Over both files, both migrate.
    code, summary, _, err = run([model, train], target='functional',
                                mode='check')
    self.assertEqual((code, summary.flagged), (ms.EXIT_CHANGES, {}), err)

  def test_re_export_of_intermediate_is_not_a_filter(self):
    write(self.dir, 'pkg/__init__.py', '''\
        from flax.nnx import Intermediate as Intermediate
        ''')
    model = self._model('pkg/model.py')
    code, _, _, err = run([self.dir], target='functional', mode='write')
    self.assertEqual(code, 0, msg=err)
    self.assertIn("sow(x, name='y')", read(model))
    self.assertNotIn('filter-use', err)

  def test_discarded_pop_keeps_no_sow_legacy_and_the_surest_reader_is_named(
      self):
    self._model('pkg/model.py')
    write(self.dir, 'pkg/clear.py', '''\
        from flax import nnx


        def clear(model, x):
          model(x)
          nnx.pop(model, (nnx.RngState, nnx.Intermediate))
        ''')
    code, _, _, err = run([self.dir], target='capture', mode='check')
    self.assertEqual(code, 0, msg=err)
    self.assertIn('clear.py:6:3: pop-discarded', err)
    self.assertNotIn('legacy-reader', err)
    # Two readers that stay: the one known to pop a Model is named first.
    write(self.dir, 'pkg/a_any.py', '''\
        from flax import nnx


        def anything(m, x):
          m(x)
          print(x)
          return nnx.pop(m, nnx.Intermediate)
        ''')
    write(self.dir, 'pkg/b_model.py', '''\
        from flax import nnx
        from pkg.model import Model


        def known(x):
          model = Model()
          model(x)
          print(x)
          return nnx.pop(model, nnx.Intermediate)
        ''')
    _, _, _, err = run([self.dir], target='capture', mode='check')
    self.assertRegex(err, r'model.py:7:5: legacy-reader: may be read by '
                     r'nnx.pop at \S*pkg/b_model.py:9 and 1 more')

  def test_a_sow_of_an_unresolved_type_under_flax_nnx_keeps_the_pop(self):
    # Run on flax itself: module.py sows `variable_type`, a parameter. Its
    # name is under flax.nnx but it is no known Variable type.
    write(self.dir, 'flax/nnx/helpers.py', '''\
        def sow_output(module, variable_type, value):
          module.sow(variable_type, 'out', value)
        ''')
    self._model('use/model.py')
    write(self.dir, 'use/run.py', '''\
        from flax import nnx
        from use.model import Model


        def run(x):
          model = Model()
          y = model(x)
          s = nnx.pop(model, nnx.Intermediate)
          return y, s['y'][0]
        ''')
    code, _, _, err = run([self.dir], target='capture', mode='check')
    self.assertEqual(code, 0, msg=err)
    self.assertRegex(err, r'run.py:8:7: unknown-type: it may pop the values '
                     r'sown at \S*helpers.py:2')

  def test_a_filter_reaches_the_sows_of_what_it_filters(self):
    self._model('pkg/a.py', name='A', sown='a')
    b = self._model('pkg/b.py', name='B', sown='b')
    write(self.dir, 'pkg/use.py', '''\
        from flax import nnx
        from pkg.a import A


        def leftovers(x):
          a = A()
          a(x)
          return nnx.state(a, nnx.Intermediate)
        ''')
    code, _, _, err = run([self.dir], target='functional', mode='write')
    self.assertEqual(code, 0, msg=err)
    self.assertRegex(err, r'a.py:7:5: filter-use: nnx.Intermediate used in '
                     r'nnx.state at \S*use.py:8')
    self.assertNotIn('b.py', err)
    self.assertIn("sow(x, name='b')", read(b))

  def test_base_class_re_exported_by_a_package_init_is_followed(self):
    # CAX: `from cax.core import ComplexSystem`, defined in cax/core/cs.py
    # and re-exported by cax/core/__init__.py with a relative import.
    write(self.dir, 'src/pkg/__init__.py', '')
    write(self.dir, 'src/pkg/core/__init__.py', '''\
        from .base import System as System
        ''')
    write(self.dir, 'src/pkg/core/base.py', '''\
        from flax import nnx


        class System(nnx.Module):
          pass
        ''')
    life = write(self.dir, 'src/pkg/life.py', '''\
        from flax import nnx
        from pkg.core import System


        class Life(System):

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'state', x)
            return x
        ''')
    code, _, _, err = run([self.dir], target='functional', mode='write')
    self.assertEqual(code, 0, msg=err)
    self.assertNotIn('not-in-module', err)
    self.assertIn("sow(x, name='state')", read(life))

  def test_a_reader_of_another_type_does_not_keep_a_sow_legacy(self):
    # nnx.capture(f, nnx.Perturbation) collects exactly Perturbations (0.12.8)
    # and nnx.pop(m, Scores) Scores and its subclasses: neither reads the
    # Intermediate sown here, which migrates with its own capture.
    source = textwrap.dedent('''\
        from flax import nnx


        class Scores(nnx.Intermediate):
          pass


        class Model(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'h', x)
            self.sow(Scores, 's', x)
            return x


        def features(model, x):
          y, state = nnx.capture(model, nnx.Intermediate)(x)
          return y, state['h'][0]


        def grads(model, x):
          return nnx.capture(model, nnx.Perturbation)(x)


        def scores(model, x):
          model(x)
          return nnx.pop(model, Scores)
        ''')
    # Where Module.sow is a site of the transform (capture_compat
    # installed), the functional capture runs the Scores sow that stays.
    new, flags = ms.migrate_source(source, target='functional',
                                   path='model.py', nnx_capture='transform')
    self.assertIn("sow(x, name='h')", new)
    self.assertIn('y, state = capture(model)(x)', new)
    self.assertEqual(sorted(f.code for f in flags),
                     ['perturbation', 'subclass', 'subclass'])
    # On Flax 0.12.8's own Module.sow that sow raises inside it: the capture
    # stays, and so does the sow it reads.
    kept, flags = ms.migrate_source(source, target='functional',
                                    path='model.py', nnx_capture='legacy')
    self.assertEqual(kept, source)
    self.assertEqual(sorted(f.code for f in flags),
                     ['kept-module-sow', 'legacy-reader', 'perturbation',
                      'subclass', 'subclass'])
    (flag,) = [f for f in flags if f.code == 'kept-module-sow']
    self.assertEqual(flag.line, 17)
    self.assertIn('runs the Module.sow at model.py:12, which stays '
                  '(subclass)', flag.detail)

  def test_a_helper_class_sowing_on_a_module_passed_in_says_so(self):
    # Flax's examples/gemma/sow_lib.py: SowConfig.maybe_sow_*(x, module).
    source = textwrap.dedent('''\
        import dataclasses
        from flax import nnx


        @dataclasses.dataclass
        class SowConfig:
          on: bool = False

          def maybe_sow(self, x, module: nnx.Module):
            if self.on:
              module.sow(nnx.Intermediate, 'x', x)
        ''')
    new, flags = ms.migrate_source(source, target='functional', path='lib.py')
    self.assertEqual(new, source)
    self.assertEqual([(f.code, f.line) for f in flags],
                     [('not-in-module', 11)])
    self.assertIn('in SowConfig, not an NNX Module: it sows on module, a '
                  'module passed in', flags[0].message)

  def test_re_export_resolver_follows_chains_and_prefixes(self):
    resolve = reexports.resolver({
        'a.X': 'a.b.X', 'a.b.X': 'a.b.c.X', 'loop.Y': 'loop.Y2',
        'loop.Y2': 'loop.Y'})
    self.assertEqual(resolve('a.X'), 'a.b.c.X')
    self.assertEqual(resolve('a.X.Inner'), 'a.b.c.X.Inner')
    self.assertEqual(resolve('a.Z'), 'a.Z')
    self.assertIn(resolve('loop.Y'), ('loop.Y', 'loop.Y2'))  # no hang
    self.assertEqual(
        reexports.file_aliases('p.q', b'from ..r import A as B\n'
                                  b'from .s import C\nfrom t import D\n'),
        {'p.q.B': 'p.r.A', 'p.q.C': 'p.q.s.C', 'p.q.D': 't.D'})

  def test_subclass_overriding_the_sowing_method_is_one_instance(self):
    # CAX's CustomLife(Life) sows 'state' in its own _step: one instance,
    # not two instances merging one flat name.
    write(self.dir, 'pkg/life.py', '''\
        from flax import nnx


        class Life(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'state', x)
            return x


        class CustomLife(Life):

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'state', x + 1)
            return x


        class Twice(nnx.Module):

          def __init__(self):
            self.a = Life()
            self.b = CustomLife()
        ''')
    code, _, _, err = run([self.dir], target='functional', mode='check')
    # Twice holds a Life and a CustomLife: two instances, both flagged.
    self.assertIn("'state' is sown by several instances in Twice", err)
    self.assertNotIn('several instances in CustomLife', err)
    del code

  def test_same_named_classes_in_two_files_are_two_classes(self):
    for name, reader in (('a', "state.to_pure_dict()"),
                         ('b', "state['h'][0]")):
      self._model(f'pkg/{name}.py', name='Foo', sown='h')
      write(self.dir, f'pkg/use_{name}.py', f'''\
          from flax import nnx
          from pkg.{name} import Foo


          def run(x):
            foo = Foo()
            _, state = nnx.capture(foo, nnx.Intermediate)(x)
            return {reader}
          ''')
    code, _, _, err = run([self.dir], target='functional', mode='write')
    self.assertEqual(code, 0, msg=err)
    self.assertIn('self.sow(', read(os.path.join(self.dir, 'pkg/a.py')))
    self.assertIn("sow(x, name='h')", read(os.path.join(self.dir, 'pkg/b.py')))
    self.assertIn('capture(foo)(x)',
                  read(os.path.join(self.dir, 'pkg/use_b.py')))
    self.assertIn('pkg/a.py:7:5: legacy-reader', err)

  def test_read_only_file_stops_the_run_before_any_write(self):
    model = self._model('pkg/model.py')
    train = write(self.dir, 'pkg/train.py', '''\
        from flax import nnx


        def step(model, x):
          _, state = nnx.capture(model, nnx.Intermediate)(x)
          return state['y'][0]
        ''')
    os.chmod(train, 0o444)
    before = (read(model), read(train))
    code, _, _, err = run([self.dir], target='functional', mode='write')
    self.assertEqual(code, ms.EXIT_UNWRITABLE)
    self.assertEqual((read(model), read(train)), before)
    self.assertIn('train.py: cannot write', err)

  def test_crlf_line_ends_are_kept(self):
    model = self._model('pkg/model.py')
    with open(model, 'rb') as f:
      data = f.read().replace(b'\n', b'\r\n')
    with open(model, 'wb') as f:
      f.write(data)
    code, _, _, _ = run([model], target='functional', mode='write')
    self.assertEqual(code, 0)
    with open(model, 'rb') as f:
      new = f.read()
    self.assertIn(b"sow(x, name='y')\r\n", new)
    self.assertEqual(new.count(b'\n'), new.count(b'\r\n'))

  def test_internal_error_is_one_line_and_leaves_linked_files_alone(self):
    model = self._model('pkg/model.py')
    train = write(self.dir, 'pkg/train.py', '''\
        from flax import nnx


        def step(model, x):
          _, state = nnx.capture(model, nnx.Intermediate)(x)
          return state['y'][0]
        ''')
    before = (read(model), read(train))
    runner = sys.modules['sow_migrate.runner']
    original = runner.plan.rewrite_file

    def failing(analysis, *args):
      if analysis.path.endswith('model.py'):
        raise RuntimeError('boom')
      return original(analysis, *args)

    with absltest.mock.patch.object(runner.plan, 'rewrite_file', failing):
      code, _, _, err = run([self.dir], target='functional', mode='write')
    self.assertEqual(code, ms.EXIT_INTERNAL)
    self.assertEqual((read(model), read(train)), before)
    [line] = [l for l in err.splitlines() if 'internal error' in l]
    self.assertEqual(line, 'pkg/model.py: internal error: RuntimeError: boom'
                     if not line.startswith('/') else line)
    self.assertIn('model.py: internal error: RuntimeError: boom', line)
    self.assertNotIn('Traceback', err)

  def test_linen_perturb_is_never_rewritten(self):
    path = write(self.dir, 'tests/linen_test.py', read(os.path.join(
        _DATA, 'capture', 'linen_perturb.input.py')))
    before = read(path)
    for target in ('functional', 'capture'):
      code, summary, _, err = run([path], mode='write', target=target)
      self.assertEqual((code, err), (0, ''))
      self.assertEqual(summary.linen, 2)
    self.assertEqual(read(path), before)


def _generated_tree(directory, count):
  """Writes ``count`` files: models, consumers, flagged code and others."""
  expected = {'sow': 0, 'capture': 0, 'flagged_files': 0}
  for i in range(count):
    kind = i % 4
    if kind == 0:
      write(directory, f'pkg{i % 7}/model_{i}.py', f'''\
          from flax import nnx


          class Model{i}(nnx.Module):

            def __init__(self, rngs):
              self.linear = nnx.Linear(2, 2, rngs=rngs)

            def __call__(self, x, *, debug=False):
              y = self.linear(x)
              if debug:
                self.sow(nnx.Intermediate, 'features_{i}', y)
              return nnx.relu(y)


          def features_{i}(model: Model{i}, x):
            y, state = nnx.capture(model, nnx.Intermediate)(x, debug=True)
            return y, state['features_{i}'].value[0]
          ''')
      expected['sow'] += 1
      expected['capture'] += 1
    elif kind == 1:
      write(directory, f'pkg{i % 7}/flagged_{i}.py', f'''\
          from flax import nnx


          class Summed{i}(nnx.Module):

            def __call__(self, x):
              self.sow(nnx.Intermediate, 'sum_{i}', x,
                       reduce_fn=lambda a, b: a + b, init_fn=lambda: 0)
              return x
          ''')
      expected['flagged_files'] += 1
    else:
      write(directory, f'pkg{i % 7}/util_{i}.py', f'''\
          """Helpers {i} that use none of the APIs."""

          import subprocess


          def run_{i}(cmd):
            return subprocess.run(cmd, capture_output=True, check=False)
          ''')
  return expected


class GeneratedTreeTest(absltest.TestCase):

  def test_large_generated_tree(self):
    directory = self.enter_context(tempfile.TemporaryDirectory())
    expected = _generated_tree(directory, 160)
    code, summary, _, _ = run([directory], target='functional',
                              mode='write', jobs=2)
    self.assertEqual(code, 0)
    self.assertEqual(summary.files, 160)
    self.assertEqual(summary.analysed, 80)
    self.assertEqual(summary.changed, expected['sow'])
    self.assertEqual(summary.rewritten['sow'], expected['sow'])
    self.assertEqual(summary.rewritten['capture'], expected['capture'])
    self.assertEqual(summary.flagged['custom-reducer'],
                     expected['flagged_files'])
    code, summary, out, _ = run([directory], target='functional',
                                mode='check', jobs=2)
    self.assertEqual((code, summary.changed, out), (0, 0, ''))

  def test_two_jobs_give_the_output_of_one(self):
    # The files are analysed and rewritten in worker processes: the diff,
    # the flags, the errors and the tallies are those of a serial run.
    directory = self.enter_context(tempfile.TemporaryDirectory())
    _generated_tree(directory, 40)
    write(directory, 'broken.py', 'def f(:\n  self.sow(nnx.Intermediate)\n')
    write(directory, 'pkg0/pop.py', POP_SOURCE)
    runs = []
    for jobs in (1, 2):
      code, summary, out, err = run([directory], mode='diff', jobs=jobs,
                                     annotate=True, target='capture')
      summary.seconds = 0.0
      runs.append((code, summary, out, err))
    self.assertEqual(runs[0], runs[1])
    code, summary, out, err = runs[0]
    self.assertEqual(code, ms.EXIT_UNREADABLE)  # broken.py
    self.assertIn('broken.py', err)
    self.assertEqual(summary.rewritten['pop'], 1)
    self.assertIn('nnx.capture(model, nnx.Intermediate)(x)', out)


POP_SOURCE = '''\
    from flax import nnx


    class Model(nnx.Module):

      def __call__(self, x):
        self.sow(nnx.Intermediate, 'x', x)
        return x


    def run(x):
      model = Model()
      y = model(x)
      state = nnx.pop(model, nnx.Intermediate)
      return y, state
    '''


if __name__ == '__main__':
  absltest.main()
