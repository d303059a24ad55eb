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
"""The codemod's input and expected files: each input migrates to its pair.

Every ``testdata/TARGET/NAME.input.EXT`` is a case, migrated with
``--target=TARGET`` by ``sow_migrate.source.migrate_source`` (what
``migrate_sow.migrate_source`` re-exports): the result must be
``NAME.expected.EXT``, and migrating that again must change nothing. The
cases are the inputs found, so that each commit of the upstream series runs
the pairs it has; an input without its expected file fails, and so does an
expected file without its input.
"""

import glob
import importlib
import importlib.util
import os
import sys
import textwrap

import codemod_testing
import sow_layout
from absl.testing import absltest, parameterized

codemod_testing.require_libcst()

_SCRIPTS = os.path.join(sow_layout.ROOT, 'scripts', 'migrate')
# The codemod's input and expected files, beside this file.
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testdata')
TARGETS = ('functional', 'capture')
# Where the fixtures' libraries are found, as installed packages would be
# (testdata/library/nca_lib, shaped as CAX).
SEARCH_PATH = [os.path.join(DATA, 'library'), *sys.path]


def _source_module():
  # By name, as migrate_sow.py imports its package.
  if _SCRIPTS not in sys.path:
    sys.path.append(_SCRIPTS)
  return importlib.import_module('sow_migrate.source')


source_lib = _source_module()


def fixtures():
  """(case name, target, input path) for every input file present."""
  cases = []
  for target in TARGETS:
    for path in sorted(glob.glob(os.path.join(DATA, target, '*.input.*'))):
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
    # The functional capture would run a Module.perturb that stays.
    'flag_kept_module_sow.py': {'kept-module-sow', 'module-path',
                                'legacy-reader'},
    'flag_method_outputs.py': {'method-outputs', 'legacy-reader'},
    'flag_multi_instance.py': {'multi-instance'},
    # Transitive: one Attention per Block, the Blocks made in a loop.
    'flag_multi_instance_nested.py': {'multi-instance'},
    'flag_nested_consumer.py': {'no-sow-found', 'multi-instance'},
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
    'flag_transform.py': {'transform', 'module-path'},
    'flag_tree_leaves.py': {'tree-leaves', 'legacy-reader'},
    'flag_variable_use.py': {'state-use', 'legacy-reader'},
    'mixed_partial.py': {'nested-consumer', 'module-path', 'legacy-reader',
                          'legacy-sow'},
    # A free sow would lose the module path its values are named by.
    'passed_module.py': {'module-path'},
    'submodules_by_name.py': {'module-path', 'legacy-reader', 'legacy-sow'},
    'flag_unknown_result.py': {'unknown-result', 'legacy-reader'},
    'flag_capture_hazard.py': {'capture-hazard', 'legacy-reader'},
    # The nnx.List is in a library's class (nca_lib, shaped as CAX).
    'flag_library_hazard.py': {'capture-hazard'},
    'flag_pop.py': {'pop-not-adjacent', 'earlier-call', 'subclass',
                    'legacy-reader', 'later-pop'},
}


# Linen code is never touched and never flagged: it is not an NNX site (the
# summary counts it as 'Linen sites left alone').
UNTOUCHED = {'flag_linen.py', 'linen_perturb.py'}


def read(path):
  with open(path, encoding='utf-8') as f:
    return f.read()


class FixtureTest(parameterized.TestCase):

  @parameterized.named_parameters(*fixtures())
  def test_fixture(self, target, path):
    name = os.path.basename(path).replace('.input', '')
    expected_path = path.replace('.input.', '.expected.')
    source = read(path)
    new, flags = source_lib.migrate_source(
        source, target=target, annotate=True, path=name,
        search_path=SEARCH_PATH)
    self.assertEqual(new, read(expected_path))
    codes = {flag.code for flag in flags}
    if name in UNTOUCHED:
      self.assertEqual((new, flags), (source, []))
    elif name in EXPECTED_FLAGS:
      self.assertContainsSubset(EXPECTED_FLAGS[name], codes)
    else:
      self.assertEmpty(flags, msg=f'{name} should rewrite without flags')
      self.assertNotEqual(new, source)

  @parameterized.named_parameters(*fixtures())
  def test_idempotent(self, target, path):
    name = os.path.basename(path).replace('.input', '')
    expected = read(path.replace('.input.', '.expected.'))
    again, _ = source_lib.migrate_source(
        expected, target=target, annotate=True, path=name,
        search_path=SEARCH_PATH)
    self.assertEqual(again, expected)

  def test_every_expected_file_has_its_input(self):
    for target in TARGETS:
      for path in glob.glob(os.path.join(DATA, target, '*.expected.*')):
        with self.subTest(path):
          self.assertTrue(
              os.path.exists(path.replace('.expected.', '.input.')))

  def test_the_cases_are_the_inputs_present(self):
    names = [case for case, _, _ in fixtures()]
    self.assertNotEmpty(names)
    self.assertLen(set(names), len(names))
    self.assertIn('functional_sow_basic.py', names)
    self.assertIn('capture_pop_to_capture.py', names)


class RewriteDetailsTest(absltest.TestCase):

  def test_flags_are_path_line_col_reason(self):
    source = textwrap.dedent('''\
        from flax import nnx

        class M(nnx.Module):
          def __call__(self, x):
            self.sow(nnx.Intermediate, 'x', x, reduce_fn=max)
            return x
        ''')
    new, flags = source_lib.migrate_source(source, target='functional',
                                           path='model.py')
    self.assertEqual(new, source)
    self.assertEqual(
        [str(flag) for flag in flags],
        ['model.py:5:5: custom-reducer: custom reduce_fn/init_fn: sow every '
         'value and reduce after capturing'])

  def test_capture_target_leaves_sows_alone(self):
    path = os.path.join(DATA, 'functional', 'sow_basic.input.py')
    source = read(path)
    new, flags = source_lib.migrate_source(source, target='capture',
                                           path='m.py')
    self.assertEqual(new, source)
    self.assertEmpty(flags)

  def test_an_unparsable_source_raises(self):
    with self.assertRaisesRegex(ValueError, 'does not parse'):
      source_lib.migrate_source('def f(:\n', path='broken.py')

  def test_the_suffix_of_the_path_picks_the_format(self):
    fence = textwrap.dedent('''\
        Some text.

        ```python
        from flax import nnx


        class M(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'x', x)
            return x
        ```
        ''')
    new, flags = source_lib.migrate_source(fence, target='functional',
                                           path='page.md')
    self.assertEmpty(flags)
    self.assertIn("    sow(x, name='x')\n", new)
    self.assertTrue(new.startswith('Some text.\n'))
    # As Python, the same text does not parse.
    with self.assertRaises(ValueError):
      source_lib.migrate_source(fence, path='page')

  def test_pandoc_fences_are_read(self):
    # ```{.python .input}: pandoc's attribute form (d2l-style books).
    page = textwrap.dedent('''\
        ```{.python .input}
        from flax import nnx


        class M(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'x', x)
            return x


        def run(m: M, x):
          y = m(x)
          s = nnx.pop(m, nnx.Intermediate)
          return y, s
        ```

        ```{.json}
        {"nnx.pop": 1}
        ```
        ''')
    new, flags = source_lib.migrate_source(page, path='book.md')
    self.assertEmpty(flags)
    self.assertIn('  y, s = nnx.capture(m, nnx.Intermediate)(x)\n', new)
    self.assertEqual(new.replace(
        '  y, s = nnx.capture(m, nnx.Intermediate)(x)\n', '  y = m(x)\n'
        '  s = nnx.pop(m, nnx.Intermediate)\n'), page)


if __name__ == '__main__':
  absltest.main()
