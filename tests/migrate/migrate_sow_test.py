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
"""Tests for scripts/migrate/migrate_sow.py, the sow/capture codemod."""

import glob
import importlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import textwrap
import warnings

import jax.numpy as jnp
import numpy as np
import sow_layout
import sow_testing
from absl.testing import absltest, parameterized
from flax.nnx import capture_compat

if importlib.util.find_spec('libcst') is None:
  # Not a Flax dependency: these tests run where it is installed.
  raise absltest.SkipTest('the codemod needs libcst (pip install libcst)')

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
reexports = importlib.import_module('sow_migrate.reexports')


def _fixtures():
  cases = []
  for target in ('functional', 'capture'):
    for path in sorted(glob.glob(os.path.join(_DATA, target, '*.input.*'))):
      name = os.path.basename(path).replace('.input', '')
      cases.append((f'{target}_{name}', target, path))
  return cases


# The reasons each flagged fixture must report (it may report more).
EXPECTED_FLAGS = {
    'flag_attribute_read.py': {'attribute-read'},
    'flag_custom_reducer.py': {'custom-reducer'},
    'flag_direct_intermediate.py': {'direct-intermediate', 'legacy-reader'},
    'flag_escaping_state.py': {'escaping-state', 'legacy-reader'},
    'flag_kwargs.py': {'kwargs'},
    'flag_method_outputs.py': {'method-outputs', 'legacy-reader'},
    'flag_multi_instance.py': {'multi-instance'},
    'flag_nested_consumer.py': {'no-sow-found', 'legacy-reader'},
    'flag_no_sow_found.py': {'no-sow-found'},
    'flag_nonliteral_name.py': {'nonliteral-name'},
    'flag_perturbation_workflow.py': {'perturbation'},
    'flag_pop_not_adjacent.py': {'pop-not-adjacent', 'legacy-reader'},
    'flag_sow_result_used.py': {'sow-result-used'},
    'flag_split_not.py': {'filter-use'},
    'flag_state_axes.py': {'filter-use'},
    'flag_subclass.py': {'subclass'},
    'flag_suffix_consumer.py': {'to-flat-state', 'legacy-reader'},
    'flag_to_flat_state.py': {'to-flat-state', 'legacy-reader'},
    'flag_to_pure_dict.py': {'to-pure-dict', 'legacy-reader'},
    'flag_transform.py': {'transform'},
    'flag_tree_leaves.py': {'tree-leaves', 'legacy-reader'},
    'flag_variable_use.py': {'state-use', 'legacy-reader'},
    'mixed_partial.py': {'nested-consumer', 'legacy-reader', 'legacy-sow'},
    'flag_unknown_result.py': {'unknown-result', 'legacy-reader'},
    'flag_capture_hazard.py': {'capture-hazard', 'legacy-reader'},
    'flag_pop.py': {'pop-not-adjacent', 'earlier-call', 'subclass',
                    'legacy-reader', 'later-pop'},
}


# Linen code is never touched and never flagged: it is not an NNX site (the
# summary counts it as 'Linen sites left alone').
UNTOUCHED = {'flag_linen.py', 'linen_perturb.py'}


def _write(directory, relative, text):
  path = os.path.join(directory, relative)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(textwrap.dedent(text))
  return path


def _read(path):
  with open(path, encoding='utf-8') as f:
    return f.read()


def _run(paths, **kwargs):
  out, err = io.StringIO(), io.StringIO()
  kwargs.setdefault('progress', False)
  code, summary = ms.run(paths, out=out, err=err, **kwargs)
  return code, summary, out.getvalue(), err.getvalue()


class FixtureTest(parameterized.TestCase):

  @parameterized.named_parameters(*_fixtures())
  def test_fixture(self, target, path):
    name = os.path.basename(path).replace('.input', '')
    expected_path = path.replace('.input.', '.expected.')
    source = _read(path)
    new, flags = ms.migrate_source(
        source, target=target, annotate=True, path=name)
    self.assertEqual(new, _read(expected_path))
    codes = {flag.code for flag in flags}
    if name in UNTOUCHED:
      self.assertEqual((new, flags), (source, []))
    elif name in EXPECTED_FLAGS:
      self.assertContainsSubset(EXPECTED_FLAGS[name], codes)
    else:
      self.assertEmpty(flags, msg=f'{name} should rewrite without flags')
      self.assertNotEqual(new, source)

  @parameterized.named_parameters(*_fixtures())
  def test_idempotent(self, target, path):
    name = os.path.basename(path).replace('.input', '')
    expected = _read(path.replace('.input.', '.expected.'))
    again, _ = ms.migrate_source(
        expected, target=target, annotate=True, path=name)
    self.assertEqual(again, expected)

  def test_every_reason_has_a_fixture(self):
    required = {
        'nested-consumer', 'to-pure-dict', 'to-flat-state', 'tree-leaves',
        'multi-instance', 'transform', 'filter-use', 'subclass',
        'custom-reducer', 'kwargs', 'method-outputs', 'perturbation',
        'direct-intermediate', 'attribute-read', 'pop-not-adjacent',
        'earlier-call', 'later-pop', 'escaping-state', 'state-use', 'nonliteral-name',
        'sow-result-used', 'no-sow-found', 'legacy-reader', 'legacy-sow',
        'unknown-result',
    }
    covered = set().union(*EXPECTED_FLAGS.values())
    self.assertContainsSubset(required, covered)
    self.assertContainsSubset(covered, set(ms.REASONS))

  def test_fixture_flags_are_annotated_in_expected_output(self):
    for name, codes in EXPECTED_FLAGS.items():
      matches = glob.glob(os.path.join(
          _DATA, '*', name.replace('.', '.expected.')))
      self.assertLen(matches, 1, msg=name)
      text = _read(matches[0])
      for code in codes:
        self.assertIn(f'# TODO(migrate_sow): {code}:', text, msg=name)


class RewriteDetailsTest(absltest.TestCase):

  def test_flags_are_path_line_col_reason(self):
    source = textwrap.dedent('''\
        from flax import nnx

        class M(nnx.Module):
          def __call__(self, x):
            self.sow(nnx.Intermediate, 'x', x, reduce_fn=max)
            return x
        ''')
    new, flags = ms.migrate_source(source, path='model.py')
    self.assertEqual(new, source)
    self.assertEqual(
        [str(flag) for flag in flags],
        ['model.py:5:5: custom-reducer: custom reduce_fn/init_fn: sow every '
         'value and reduce after capturing'])

  def test_without_annotate_flagged_code_is_untouched(self):
    path = os.path.join(_DATA, 'functional', 'flag_nested_consumer.input.py')
    source = _read(path)
    new, flags = ms.migrate_source(source, path='nested.py')
    self.assertEqual(new, source)
    self.assertNotEmpty(flags)

  def test_capture_target_leaves_sows_alone(self):
    path = os.path.join(_DATA, 'functional', 'sow_basic.input.py')
    source = _read(path)
    new, flags = ms.migrate_source(source, target='capture', path='m.py')
    self.assertEqual(new, source)
    self.assertEmpty(flags)


class CommandLineTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.dir = self.enter_context(tempfile.TemporaryDirectory())
    self.model = _write(self.dir, 'pkg/model.py', '''\
        from flax import nnx


        class Model(nnx.Module):

          def __init__(self, rngs):
            self.linear = nnx.Linear(2, 2, rngs=rngs)

          def __call__(self, x):
            y = self.linear(x)
            self.sow(nnx.Intermediate, 'y', y)
            return y
        ''')
    self.train = _write(self.dir, 'pkg/train.py', '''\
        from flax import nnx


        def step(model, x):
          y, state = nnx.capture(model, nnx.Intermediate)(x)
          return y, state['y'].value[0]
        ''')
    self.unrelated = _write(self.dir, 'pkg/util.py', 'def f(:\n')

  def test_diff_is_the_default_and_writes_nothing(self):
    before = _read(self.model)
    code, summary, out, _ = _run([self.dir])
    self.assertEqual(code, 0)
    self.assertEqual(_read(self.model), before)
    self.assertIn("+    sow(y, name='y')", out)
    self.assertIn("+  return y, state['y'][0]", out)
    self.assertEqual((summary.files, summary.analysed, summary.changed),
                     (3, 2, 2))

  def test_write_then_check_is_clean(self):
    code, _, _, _ = _run([self.dir], mode='write')
    self.assertEqual(code, 0)
    self.assertIn("sow(y, name='y')", _read(self.model))
    self.assertIn('capture(model)(x)', _read(self.train))
    code, summary, out, _ = _run([self.dir], mode='check')
    self.assertEqual((code, summary.changed, out), (0, 0, ''))

  def test_check_exits_one_when_something_would_change(self):
    before = _read(self.train)
    code, _, out, _ = _run([self.dir], mode='check')
    self.assertEqual(code, ms.EXIT_CHANGES)
    self.assertEqual(out, '')
    self.assertEqual(_read(self.train), before)

  def test_consumer_in_another_file_blocks_the_sow(self):
    _write(self.dir, 'pkg/report.py', '''\
        from flax import nnx


        def report(model, x):
          _, state = nnx.capture(model, nnx.Intermediate)(x)
          return state.to_pure_dict()
        ''')
    code, summary, out, err = _run([self.dir], mode='check')
    self.assertEqual((code, out, summary.changed), (0, '', 0))
    self.assertIn('model.py:11:5: legacy-reader', err)
    self.assertIn('report.py:5:14: to-pure-dict', err)
    self.assertIn('train.py:5:14: legacy-sow', err)

  def test_attribute_read_in_a_file_without_the_api(self):
    _write(self.dir, 'pkg/eval.py', '''\
        def evaluate(model, x):
          model(x)
          return model.y.value
        ''')
    code, summary, _, err = _run([self.dir], mode='check')
    self.assertEqual(code, 0)
    self.assertIn('model.py:11:5: attribute-read: read as an attribute, '
                  'model.y.value, at ', err)
    self.assertIn('eval.py:3', err)
    self.assertEqual(summary.changed, 0)

  def test_unparsable_files_are_reported_and_untouched(self):
    broken = _write(self.dir, 'pkg/broken.py', '''\
        from flax import nnx
        def f(x:
          self.sow(nnx.Intermediate, 'x', x)
        ''')
    before = _read(broken)
    code, summary, _, err = _run([self.dir], mode='write')
    self.assertEqual(code, ms.EXIT_UNREADABLE)
    self.assertEqual(_read(broken), before)
    self.assertRegex(err, r'broken.py:\d: does not parse')
    self.assertEqual(summary.changed, 2)

  def test_summary_counts_rewrites_and_flags(self):
    _, summary, _, _ = _run([self.dir])
    self.assertEqual(summary.rewritten, {'sow': 1, 'capture': 1})
    lines = summary.lines()
    self.assertIn('3 files, 2 analysed, 2 changed', lines[0])
    self.assertIn('NNX sites: 2; rewritten: 2', lines[1])

  def test_annotate_writes_todo_comments_once(self):
    path = _write(self.dir, 'flagged/m.py', '''\
        from flax import nnx


        class M(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, f'x{1}', x)
            return x
        ''')
    _run([path], mode='write', annotate=True)
    text = _read(path)
    self.assertEqual(text.count('# TODO(migrate_sow): nonliteral-name'), 1)
    code, _, _, _ = _run([path], mode='check', annotate=True)
    self.assertEqual(code, 0)

  def test_markdown_and_notebook_through_the_cli(self):
    for name in ('guide.input.md', 'notebook.input.ipynb'):
      source = os.path.join(_DATA, 'functional', name)
      target = _write(self.dir, 'docs/' + name.replace('.input', ''),
                      _read(source))
      _run([target], mode='write')
      self.assertEqual(_read(target),
                       _read(source.replace('.input.', '.expected.')))

  def test_notebook_keeps_outputs_metadata_and_magics(self):
    path = os.path.join(_DATA, 'functional', 'notebook.expected.ipynb')
    before = json.loads(_read(path.replace('.expected.', '.input.')))
    after = json.loads(_read(path))
    for old, new in zip(before['cells'], after['cells']):
      self.assertEqual(old['cell_type'], new['cell_type'])
      self.assertEqual(old.get('outputs'), new.get('outputs'))
      self.assertEqual(old['metadata'], new['metadata'])
    self.assertEqual(before['cells'][0], after['cells'][0])
    self.assertEqual(before['cells'][4], after['cells'][4])
    self.assertEqual(after['cells'][1]['source'][0], '%matplotlib inline\n')
    self.assertEqual(before['metadata'], after['metadata'])

  def test_markdown_with_an_unparsable_block_is_untouched(self):
    path = _write(self.dir, 'docs/bad.md', '''\
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
    before = _read(path)
    code, _, _, err = _run([path], mode='write')
    # The fence that parses is migrated; the other is reported with its line
    # in the .md file and left as it is.
    self.assertEqual(code, ms.EXIT_UNREADABLE)
    self.assertIn('bad.md:10: does not parse', err)
    self.assertIn('>>> doctest style', _read(path))
    self.assertNotEqual(_read(path), before)

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
      code = ms.main(['--check', '--no-progress', self.dir])
    self.assertEqual(code, ms.EXIT_CHANGES)
    self.assertIn('migrate_sow: 3 files, 2 analysed', err.getvalue())



class ProjectTest(absltest.TestCase):
  """Runs over small projects shaped like the real ones that broke before."""

  def setUp(self):
    super().setUp()
    self.dir = self.enter_context(tempfile.TemporaryDirectory())
    _write(self.dir, 'pyproject.toml', '[project]\nname = "p"\n')

  def _model(self, relative, name='Model', sown='y'):
    return _write(self.dir, relative, f'''\
        from flax import nnx


        class {name}(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, '{sown}', x)
            return x
        ''')

  def test_partial_run_leaves_a_sow_whose_reader_stays_legacy(self):
    model = self._model('pkg/model.py')
    train = _write(self.dir, 'pkg/train.py', '''\
        from flax import nnx


        def step(model, x):
          model(x)
          state = nnx.pop(model, nnx.Intermediate)
          return state.to_pure_dict()
        ''')
    before = (_read(model), _read(train))
    code, summary, _, err = _run([model], mode='write')
    self.assertEqual(code, 0)
    self.assertEqual((_read(model), _read(train)), before)
    self.assertIn('model.py:7:5: legacy-reader', err)
    self.assertEqual(summary.changed, 0)

  def test_re_export_of_intermediate_is_not_a_filter(self):
    _write(self.dir, 'pkg/__init__.py', '''\
        from flax.nnx import Intermediate as Intermediate
        ''')
    model = self._model('pkg/model.py')
    code, _, _, err = _run([self.dir], mode='write')
    self.assertEqual(code, 0, msg=err)
    self.assertIn("sow(x, name='y')", _read(model))
    self.assertNotIn('filter-use', err)

  def test_discarded_pop_keeps_no_sow_legacy_and_the_surest_reader_is_named(
      self):
    self._model('pkg/model.py')
    _write(self.dir, 'pkg/clear.py', '''\
        from flax import nnx


        def clear(model, x):
          model(x)
          nnx.pop(model, (nnx.RngState, nnx.Intermediate))
        ''')
    code, _, _, err = _run([self.dir], target='capture', mode='check')
    self.assertEqual(code, 0, msg=err)
    self.assertIn('clear.py:6:3: pop-discarded', err)
    self.assertNotIn('legacy-reader', err)
    # Two readers that stay: the one known to pop a Model is named first.
    _write(self.dir, 'pkg/a_any.py', '''\
        from flax import nnx


        def anything(m, x):
          m(x)
          print(x)
          return nnx.pop(m, nnx.Intermediate)
        ''')
    _write(self.dir, 'pkg/b_model.py', '''\
        from flax import nnx
        from pkg.model import Model


        def known(x):
          model = Model()
          model(x)
          print(x)
          return nnx.pop(model, nnx.Intermediate)
        ''')
    _, _, _, err = _run([self.dir], target='capture', mode='check')
    self.assertRegex(err, r'model.py:7:5: legacy-reader: may be read by '
                     r'nnx.pop at \S*pkg/b_model.py:9 and 1 more')

  def test_a_sow_of_an_unresolved_type_under_flax_nnx_keeps_the_pop(self):
    # Run on flax itself: module.py sows `variable_type`, a parameter. Its
    # name is under flax.nnx but it is no known Variable type.
    _write(self.dir, 'flax/nnx/helpers.py', '''\
        def sow_output(module, variable_type, value):
          module.sow(variable_type, 'out', value)
        ''')
    self._model('use/model.py')
    _write(self.dir, 'use/run.py', '''\
        from flax import nnx
        from use.model import Model


        def run(x):
          model = Model()
          y = model(x)
          s = nnx.pop(model, nnx.Intermediate)
          return y, s['y'][0]
        ''')
    code, _, _, err = _run([self.dir], target='capture', mode='check')
    self.assertEqual(code, 0, msg=err)
    self.assertRegex(err, r'run.py:8:7: unknown-type: it may pop the values '
                     r'sown at \S*helpers.py:2')

  def test_a_filter_reaches_the_sows_of_what_it_filters(self):
    self._model('pkg/a.py', name='A', sown='a')
    b = self._model('pkg/b.py', name='B', sown='b')
    _write(self.dir, 'pkg/use.py', '''\
        from flax import nnx
        from pkg.a import A


        def leftovers(x):
          a = A()
          a(x)
          return nnx.state(a, nnx.Intermediate)
        ''')
    code, _, _, err = _run([self.dir], target='functional', mode='write')
    self.assertEqual(code, 0, msg=err)
    self.assertRegex(err, r'a.py:7:5: filter-use: nnx.Intermediate used in '
                     r'nnx.state at \S*use.py:8')
    self.assertNotIn('b.py', err)
    self.assertIn("sow(x, name='b')", _read(b))

  def test_base_class_re_exported_by_a_package_init_is_followed(self):
    # CAX: `from cax.core import ComplexSystem`, defined in cax/core/cs.py
    # and re-exported by cax/core/__init__.py with a relative import.
    _write(self.dir, 'src/pkg/__init__.py', '')
    _write(self.dir, 'src/pkg/core/__init__.py', '''\
        from .base import System as System
        ''')
    _write(self.dir, 'src/pkg/core/base.py', '''\
        from flax import nnx


        class System(nnx.Module):
          pass
        ''')
    life = _write(self.dir, 'src/pkg/life.py', '''\
        from flax import nnx
        from pkg.core import System


        class Life(System):

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'state', x)
            return x
        ''')
    code, _, _, err = _run([self.dir], target='functional', mode='write')
    self.assertEqual(code, 0, msg=err)
    self.assertNotIn('not-in-module', err)
    self.assertIn("sow(x, name='state')", _read(life))

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
    new, flags = ms.migrate_source(source, target='functional',
                                   path='model.py')
    self.assertIn("sow(x, name='h')", new)
    self.assertIn('y, state = capture(model)(x)', new)
    self.assertEqual(sorted(f.code for f in flags),
                     ['perturbation', 'subclass', 'subclass'])

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
    _write(self.dir, 'pkg/life.py', '''\
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
    code, _, _, err = _run([self.dir], target='functional', mode='check')
    # Twice holds a Life and a CustomLife: two instances, both flagged.
    self.assertIn("'state' is sown by several instances in Twice", err)
    self.assertNotIn('several instances in CustomLife', err)
    del code

  def test_same_named_classes_in_two_files_are_two_classes(self):
    for name, read in (('a', "state.to_pure_dict()"), ('b', "state['h'][0]")):
      self._model(f'pkg/{name}.py', name='Foo', sown='h')
      _write(self.dir, f'pkg/use_{name}.py', f'''\
          from flax import nnx
          from pkg.{name} import Foo


          def run(x):
            foo = Foo()
            _, state = nnx.capture(foo, nnx.Intermediate)(x)
            return {read}
          ''')
    code, _, _, err = _run([self.dir], mode='write')
    self.assertEqual(code, 0, msg=err)
    self.assertIn('self.sow(', _read(os.path.join(self.dir, 'pkg/a.py')))
    self.assertIn("sow(x, name='h')", _read(os.path.join(self.dir, 'pkg/b.py')))
    self.assertIn('capture(foo)(x)',
                  _read(os.path.join(self.dir, 'pkg/use_b.py')))
    self.assertIn('pkg/a.py:7:5: legacy-reader', err)

  def test_read_only_file_stops_the_run_before_any_write(self):
    model = self._model('pkg/model.py')
    train = _write(self.dir, 'pkg/train.py', '''\
        from flax import nnx


        def step(model, x):
          _, state = nnx.capture(model, nnx.Intermediate)(x)
          return state['y'][0]
        ''')
    os.chmod(train, 0o444)
    before = (_read(model), _read(train))
    code, _, _, err = _run([self.dir], mode='write')
    self.assertEqual(code, ms.EXIT_UNWRITABLE)
    self.assertEqual((_read(model), _read(train)), before)
    self.assertIn('train.py: cannot write', err)

  def test_crlf_line_ends_are_kept(self):
    model = self._model('pkg/model.py')
    with open(model, 'rb') as f:
      data = f.read().replace(b'\n', b'\r\n')
    with open(model, 'wb') as f:
      f.write(data)
    code, _, _, _ = _run([model], mode='write')
    self.assertEqual(code, 0)
    with open(model, 'rb') as f:
      new = f.read()
    self.assertIn(b"sow(x, name='y')\r\n", new)
    self.assertEqual(new.count(b'\n'), new.count(b'\r\n'))

  def test_internal_error_is_one_line_and_leaves_linked_files_alone(self):
    model = self._model('pkg/model.py')
    train = _write(self.dir, 'pkg/train.py', '''\
        from flax import nnx


        def step(model, x):
          _, state = nnx.capture(model, nnx.Intermediate)(x)
          return state['y'][0]
        ''')
    before = (_read(model), _read(train))
    runner = sys.modules['sow_migrate.runner']
    original = runner.plan.rewrite_file

    def failing(analysis, *args):
      if analysis.path.endswith('model.py'):
        raise RuntimeError('boom')
      return original(analysis, *args)

    with absltest.mock.patch.object(runner.plan, 'rewrite_file', failing):
      code, _, _, err = _run([self.dir], mode='write')
    self.assertEqual(code, ms.EXIT_INTERNAL)
    self.assertEqual((_read(model), _read(train)), before)
    [line] = [l for l in err.splitlines() if 'internal error' in l]
    self.assertEqual(line, 'pkg/model.py: internal error: RuntimeError: boom'
                     if not line.startswith('/') else line)
    self.assertIn('model.py: internal error: RuntimeError: boom', line)
    self.assertNotIn('Traceback', err)

  def test_linen_perturb_is_never_rewritten(self):
    path = _write(self.dir, 'tests/linen_test.py', _read(os.path.join(
        _DATA, 'capture', 'linen_perturb.input.py')))
    before = _read(path)
    for target in ('functional', 'capture'):
      code, summary, _, err = _run([path], mode='write', target=target)
      self.assertEqual((code, err), (0, ''))
      self.assertEqual(summary.linen, 2)
    self.assertEqual(_read(path), before)



def _notebook(cells):
  return json.dumps({
      'cells': [{'cell_type': 'code', 'execution_count': None,
                 'metadata': {}, 'outputs': [],
                 'source': textwrap.dedent(c).splitlines(keepends=True)}
                for c in cells],
      'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}, indent=1) + '\n'


class NotebookTest(parameterized.TestCase):

  CELLS = ("""\
      from flax import nnx
      import jax.numpy as jnp


      class Model(nnx.Module):

        def __call__(self, x):
          self.sow(nnx.Intermediate, 'h', 2 * x)
          return x + 1


      model = Model()
      x = jnp.arange(3.0)
      """, """\
      y = model(x)
      """, """\
      intermediates = nnx.pop(model, nnx.Intermediate)
      h = intermediates['h'].value[0]
      """, """\
      nnx.pop(model, nnx.Intermediate)
      """)

  def _run_cells(self, path):
    with open(path, encoding='utf-8') as f:
      cells = json.load(f)['cells']
    namespace = {}
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', DeprecationWarning)
      for cell in cells:
        exec(''.join(cell['source']), namespace)  # noqa: S102  pylint: disable=exec-used
    return namespace['y'], namespace['h']

  def test_pop_opening_a_cell_pairs_with_the_call_ending_the_previous(self):
    directory = self.enter_context(tempfile.TemporaryDirectory())
    path = _write(directory, 'nb.ipynb', _notebook(self.CELLS))
    expected = self._run_cells(path)
    code, summary, _, err = _run([path], mode='write', target='capture',
                                 annotate=True)
    self.assertEqual(code, 0, msg=err)
    self.assertEqual(summary.rewritten['pop'], 1)
    with open(path, encoding='utf-8') as f:
      cells = [''.join(c['source']) for c in json.load(f)['cells']]
    self.assertEqual(
        cells[1], 'y, intermediates = nnx.capture(model, nnx.Intermediate)(x)\n')
    self.assertEqual(cells[2], "h = intermediates['h'].value[0]\n")
    # The pop that only clears the module is flagged, in its cell, once.
    self.assertTrue(cells[3].startswith('# TODO(migrate_sow): pop-discarded:'))
    migrated = self._run_cells(path)
    for a, b in zip(expected, migrated):
      np.testing.assert_array_equal(a, b)
    before = _read(path)
    code, _, _, _ = _run([path], mode='write', target='capture',
                         annotate=True)
    self.assertEqual((code, _read(path)), (0, before))

  def test_a_call_in_an_earlier_cell_keeps_the_pop(self):
    # The pop collects what both calls sowed; a capture of the second call
    # alone would not.
    cells = list(self.CELLS)
    cells.insert(1, 'warmup = model(x)\n')
    directory = self.enter_context(tempfile.TemporaryDirectory())
    path = _write(directory, 'nb.ipynb', _notebook(cells))
    before = _read(path)
    code, summary, _, err = _run([path], mode='write', target='capture')
    self.assertEqual((code, _read(path)), (0, before))
    self.assertIn('earlier-call: model(...) in an earlier cell may sow', err)
    self.assertEqual(summary.rewritten['pop'], 0)

  RENDER = {
      # render cannot sow: what the pop collects is what the capture does.
      'plain': ('return x * 0', None),
      'calls_self': ('return self(x)', 'it calls .render()'),
      'calls_sowing_submodule': ('return self.sub(x)', 'it calls .render()'),
      'passed_on': ('return x * 0', 'model passed to show()'),
  }

  @parameterized.named_parameters(*[(k, *v) for k, v in RENDER.items()])
  def test_an_earlier_call_of_a_method_that_cannot_sow(self, body, flag):
    head = textwrap.dedent(self.CELLS[0]).replace(
        '    return x + 1\n', '    return x + 1\n\n'
        '  def render(self, x):\n    ' + body + '\n', 1)
    head = head.replace('class Model(nnx.Module):', '''\
class Sub(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 's', x)
    return x


class Model(nnx.Module):

  def __init__(self):
    self.sub = Sub()
''')
    earlier = ('show = print\nshow(model)\n' if 'passed' in (flag or '')
               else 'frames = model.render(x)\n')
    cells = [head, earlier] + list(self.CELLS[1:3])
    directory = self.enter_context(tempfile.TemporaryDirectory())
    path = _write(directory, 'nb.ipynb', _notebook(cells))
    expected = self._run_cells(path)
    code, summary, _, err = _run([path], mode='write', target='capture')
    self.assertEqual(code, 0, msg=err)
    if flag is None:
      self.assertEqual(summary.rewritten['pop'], 1, msg=err)
      migrated = self._run_cells(path)
      for a, b in zip(expected, migrated):
        np.testing.assert_array_equal(a, b)
    else:
      self.assertEqual(summary.rewritten['pop'], 0)
      self.assertIn(flag, err)
      self.assertIn('earlier-call', err)


def _generated_tree(directory, count):
  """Writes ``count`` files: models, consumers, flagged code and others."""
  expected = {'sow': 0, 'capture': 0, 'flagged_files': 0}
  for i in range(count):
    kind = i % 4
    if kind == 0:
      _write(directory, f'pkg{i % 7}/model_{i}.py', f'''\
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
      _write(directory, f'pkg{i % 7}/flagged_{i}.py', f'''\
          from flax import nnx


          class Summed{i}(nnx.Module):

            def __call__(self, x):
              self.sow(nnx.Intermediate, 'sum_{i}', x,
                       reduce_fn=lambda a, b: a + b, init_fn=lambda: 0)
              return x
          ''')
      expected['flagged_files'] += 1
    else:
      _write(directory, f'pkg{i % 7}/util_{i}.py', f'''\
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
    code, summary, _, _ = _run([directory], mode='write', jobs=2)
    self.assertEqual(code, 0)
    self.assertEqual(summary.files, 160)
    self.assertEqual(summary.analysed, 80)
    self.assertEqual(summary.changed, expected['sow'])
    self.assertEqual(summary.rewritten['sow'], expected['sow'])
    self.assertEqual(summary.rewritten['capture'], expected['capture'])
    self.assertEqual(summary.flagged['custom-reducer'],
                     expected['flagged_files'])
    code, summary, out, _ = _run([directory], mode='check', jobs=2)
    self.assertEqual((code, summary.changed, out), (0, 0, ''))

  def test_two_jobs_give_the_output_of_one(self):
    # The files are analysed and rewritten in worker processes: the diff,
    # the flags, the errors and the tallies are those of a serial run.
    directory = self.enter_context(tempfile.TemporaryDirectory())
    _generated_tree(directory, 40)
    _write(directory, 'broken.py', 'def f(:\n  self.sow(nnx.Intermediate)\n')
    _write(directory, 'pkg0/pop.py', POP_SOURCE)
    runs = []
    for jobs in (1, 2):
      code, summary, out, err = _run([directory], mode='diff', jobs=jobs,
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


MODEL_SOURCE = '''\
from flax import nnx
import jax.numpy as jnp


class Block(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)

  def __call__(self, x):
    h = self.linear(x)
    self.sow(nnx.Intermediate, 'block_pre', h)
    return nnx.relu(h)


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs, *, record: bool = True):
    self.block = Block(rngs)
    self.head = nnx.Linear(3, 2, rngs=rngs)
    self.record = record

  def __call__(self, x):
    h = self.block(x)
    if self.record:
      self.sow(nnx.Intermediate, 'hidden', h)
    self.sow(nnx.Intermediate, 'last', 2 * h, reduce_fn=lambda a, b: b)
    out = self.head(h)
    self.sow(nnx.Intermediate, 'logits', out)
    return out


def run_capture(model, x):
  y, state = nnx.capture(model, nnx.Intermediate)(x)
  return y, state['hidden'][0], state['logits'].value[0], state['last'].value


@nnx.capture(nnx.Intermediate)
def forward(model, x):
  return model(x)


def run_decorated(model, x):
  y, state = forward(model, x)
  return y, state.hidden.value[0], state['last'][1]


def run_pop(model, x):
  y = model(x)
  state = nnx.pop(model, nnx.Intermediate)
  return y, state['logits'][0], state['hidden'].value[-1]
'''


class ExecutionTest(absltest.TestCase):
  """Rewritten code captures the same values as the original."""

  def _execute(self, source):
    namespace = {}
    code = compile(source, '<migrated>', 'exec')
    results = {}
    with warnings.catch_warnings():
      # The legacy nnx.pop pattern sows outside nnx.capture, deprecated.
      warnings.simplefilter('ignore', DeprecationWarning)
      exec(code, namespace)  # pylint: disable=exec-used
      model = namespace['Model'](namespace['nnx'].Rngs(0))
      x = jnp.arange(6.0).reshape(2, 3) / 6
      for name in ('run_capture', 'run_decorated', 'run_pop'):
        results[name] = [np.asarray(v) for v in namespace[name](model, x)]
    return results

  def test_migrated_model_captures_the_same_values(self):
    migrated, flags = ms.migrate_source(MODEL_SOURCE, path='model.py')
    self.assertEmpty(flags)
    self.assertNotIn('.sow(', migrated)
    self.assertNotIn('nnx.capture', migrated)
    self.assertNotIn('nnx.pop', migrated)
    self.assertIn("mode='clobber'", migrated)
    legacy = self._execute(MODEL_SOURCE)
    functional = self._execute(migrated)
    self.assertEqual(legacy.keys(), functional.keys())
    for name, values in legacy.items():
      self.assertLen(functional[name], len(values), msg=name)
      for old, new in zip(values, functional[name]):
        sow_testing.assert_close(new, old, err_msg=name)

  def test_capture_target_is_executable_and_equivalent(self):
    source = MODEL_SOURCE
    migrated, _ = ms.migrate_source(source, target='capture', path='m.py')
    self.assertIn('y, state = nnx.capture(model, nnx.Intermediate)(x)',
                  migrated)
    legacy = self._execute(source)
    captured = self._execute(migrated)
    for name, values in legacy.items():
      for old, new in zip(values, captured[name]):
        sow_testing.assert_close(new, old, err_msg=name)

  def test_capture_through_vmap_collects_what_pop_collected(self):
    # CAX's pattern: nnx.split_rngs(...)(nnx.vmap(...))(cs, x), then nnx.pop
    # of the stacked values. Oracle: the original code; the rewrite runs
    # with Flax 0.12.8's nnx.capture and with capture_compat's.
    path = os.path.join(_DATA, 'capture', 'pop_through_vmap.input.py')
    source = _read(path)
    migrated, flags = ms.migrate_source(source, target='capture', path='m.py')
    self.assertEmpty([f for f in flags if f.code != 'legacy-reader'])
    self.assertNotIn('nnx.pop', migrated)

    def execute(code):
      namespace = {}
      with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        exec(compile(code, '<m>', 'exec'), namespace)  # pylint: disable=exec-used
        nnx = namespace['nnx']
        x = jnp.arange(8.0).reshape(2, 2, 2) / 8
        model = namespace['Model'](nnx.Rngs(0))
        y, sown = namespace['run'](model, x)
        total = namespace['loss'](model, x)
        left = nnx.state(model, nnx.Intermediate)
      return [np.asarray(y), np.asarray(sown), np.asarray(total)], left

    legacy, left = execute(source)
    self.assertEmpty(dict(left))
    self.assertEqual(legacy[1].shape, (2, 2, 2))  # stacked on the vmap axis
    for install in (False, True):
      if install:
        with capture_compat.install():
          captured, left = execute(migrated)
      else:
        captured, left = execute(migrated)
      self.assertEmpty(dict(left))
      for old, new in zip(legacy, captured):
        np.testing.assert_array_equal(new, old, err_msg=f'install={install}')


if __name__ == '__main__':
  absltest.main()
