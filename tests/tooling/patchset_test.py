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
"""The upstream patch series' edits of Flax's files, and the series itself.

The edits (``scripts/upstream/flax_integration.py``) run on small
hand-written files shaped as Flax's, whose expected results are written out
here; the series' definition (``series.py``) and the ``__init__.py`` files it
grows commit by commit are checked here; the whole series
(``make_patchset.py``) runs on ``$FLAX_CHECKOUT`` if it is set (a clean git
clone of google/flax), else that test skips. Of
``check_patchset.py``, the reading of Sphinx's output is tested here on
text shaped as Sphinx 6.2 writes it.
"""

import ast
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
from unittest import mock

from absl.testing import absltest
import sow_layout

_SYS_PATH = list(sys.path)
_UPSTREAM = os.path.join(sow_layout.ROOT, 'scripts', 'upstream')
sys.path.insert(0, _UPSTREAM)
import check_patchset  # pylint: disable=g-import-not-at-top,wrong-import-position
import flax_integration as fi  # pylint: disable=g-import-not-at-top,wrong-import-position
import make_patchset  # pylint: disable=g-import-not-at-top,wrong-import-position

sys.path[:] = _SYS_PATH

MODULE = textwrap.dedent('''\
    from __future__ import annotations

    import inspect

    import jax

    from flax.nnx import (
      graphlib,
      pytreelib,
    )
    from flax.nnx.statelib import split_state, State
    import functools as ft
    from collections.abc import MutableMapping

    tuple_reduce = lambda xs, x: xs + (x,)


    class Module:

      def sow(self, variable_type, name, value, reduce_fn=tuple_reduce,
              init_fn=None):
        """Sows."""
        if hasattr(self, '__captures__'):
          return jax.tree.map(lambda x: x, value)
        return True

      def perturb(self, name, value, variable_type=None):
        """Perturbs."""
        return value

      def other(self):
        return inspect.signature(self.other), graphlib

    def capture(fn, *var_types, init: State | None = None,
                method_outputs=None):
        """Captures."""
        _add_capturing(type(fn))
        return split_state(_extract_captures(fn), *var_types)

    # Collects.
    def _extract_captures(module):
      return pytreelib.data(module)


    def _collect_state_by_path(state):
      return isinstance(state, MutableMapping)

    def _navigate_to_path(state, path):
      return _collect_state_by_path(state)

    def _add_capturing(cls):
      return ft.wraps(cls)

    def _remove_capturing(cls):
      return _navigate_to_path(cls, ())
''')


class DelegateModuleTest(absltest.TestCase):

  def test_bodies_delegate_dead_code_and_imports_go(self):
    out = fi.delegate_module(MODULE)
    self.assertEqual(out, textwrap.dedent('''\
        from __future__ import annotations

        import inspect

        from flax.nnx import (
          graphlib,
        )
        from flax.nnx.statelib import State

        tuple_reduce = lambda xs, x: xs + (x,)


        class Module:

          def sow(self, variable_type, name, value, reduce_fn=tuple_reduce,
                  init_fn=None):
            """Sows."""
            # Implemented on the sow transform (flax.nnx.sow), by the package that
            # implements `capture`; imported here because it imports this module.
            from flax.nnx.capture_compat import module_methods

            return module_methods.sow(
                self, variable_type, name, value, reduce_fn, init_fn
            )

          def perturb(self, name, value, variable_type=None):
            """Perturbs."""
            # Implemented on the sow transform, as `sow` is.
            from flax.nnx.capture_compat import module_methods

            return module_methods.perturb(self, name, value, variable_type)

          def other(self):
            return inspect.signature(self.other), graphlib

        def capture(fn, *var_types, init: State | None = None,
                    method_outputs=None):
            """Captures."""
            # The call is staged on copies of the modules, as `nnx.jit` does, and
            # interpreted by the sow transform (flax.nnx.sow); imported here because
            # that package imports this module.
            from flax.nnx import capture_compat

            return capture_compat.capture(
                fn, *var_types, init=init, method_outputs=method_outputs
            )


        # These hand their calls to the sow transform (flax.nnx.sow), which tells
        # them from the functions of a Flax release without it by this declaration.
        Module.sow.__sow_transform__ = True  # type: ignore[attr-defined]
        Module.perturb.__sow_transform__ = True  # type: ignore[attr-defined]
        capture.__sow_transform__ = True  # type: ignore[attr-defined]
    '''))

  def test_refuses_what_it_does_not_expect(self):
    cases = {
        'no sow': MODULE.replace('def sow(', 'def sow_(', 1),
        'other signature': MODULE.replace('init_fn=None)', 'init=None)'),
        'no docstring': MODULE.replace('"""Perturbs."""\n', ''),
        'two captures': MODULE + '\ndef capture(fn):\n  """Again."""\n  pass\n',
        'helper still used': MODULE.replace(
            'return inspect.signature', 'return _add_capturing, inspect'),
        'missing helper': MODULE.replace('_remove_capturing', '_remove_it'),
        'already delegating': fi.delegate_module(MODULE),
    }
    for case, text in cases.items():
      with self.subTest(case):
        with self.assertRaises(fi.EditError):
          fi.delegate_module(text)


class OtherEditsTest(absltest.TestCase):

  def test_capture_returns_quoted(self):
    text = MODULE.replace('"""Captures."""', '"""Captures.\n\n    Returns:\n'
                          '      a tuple of (result, *intermediates) where\n'
                          '    """')
    out = fi.quote_capture_returns(text)
    self.assertEqual(out, text.replace('(result, *intermediates)',
                                       '``(result, *intermediates)``'))
    with self.assertRaisesRegex(fi.EditError, 'quoted already'):
      fi.quote_capture_returns(out)
    with self.assertRaisesRegex(fi.EditError, 'in the docstring of capture'):
      fi.quote_capture_returns(MODULE)

  def test_export_sow_after_capture(self):
    text = ('from .module import Module as Module\n'
            'from .module import capture as capture\n'
            'from .module import view as view\n')
    self.assertEqual(
        fi.export_sow(text),
        'from .module import Module as Module\n'
        'from .module import capture as capture\n'
        'from . import sow as sow\n'
        'from .module import view as view\n')
    with self.assertRaises(fi.EditError):
      fi.export_sow(fi.export_sow(text))
    with self.assertRaises(fi.EditError):
      fi.export_sow('from .module import Module as Module\n')

  def test_pyproject_lists(self):
    text = textwrap.dedent('''\
        [project.optional-dependencies]
        testing = [
            "clu",
            "pytest",
        ]
        docs = [
            "sphinx",
        ]

        [tool.ruff]
        # Exclude directories.
        exclude = [
          "__init__.py",
          "examples/",
        ]
    ''')
    out = fi.add_ruff_exclude(
        fi.add_testing_extra(text, 'hypothesis', 'why'), 'tests/x/', 'data')
    self.assertEqual(out, text.replace(
        '    "pytest",\n', '    "pytest",\n    "hypothesis",  # why\n'
    ).replace('  "examples/",\n', '  "examples/",\n  "tests/x/",  # data\n'))
    with self.assertRaises(fi.EditError):
      fi.add_testing_extra(out, 'Hypothesis>=6', 'again')
    with self.assertRaises(fi.EditError):
      fi.add_ruff_exclude(out, 'tests/x/', 'again')


AGGREGATOR = textwrap.dedent('''\
    """The package; its docstring stays whole."""

    import os as _os

    from flax.nnx.sow.capture import capture as capture
    from flax.nnx.sow.tap import tap as tap
    from flax.nnx.sow.transform import sites as _sites
    from flax.nnx.sow.transform.primitive import sow as sow

    # An equation's location names the user's code.
    _sites.skip_frames_in(_os.path.dirname(__file__))

    __all__ = ['capture', 'sow', 'tap']
''')
MODULES = {
    'flax.nnx.sow', 'flax.nnx.sow.capture', 'flax.nnx.sow.tap',
    'flax.nnx.sow.transform', 'flax.nnx.sow.transform.sites',
    'flax.nnx.sow.transform.primitive',
}


class PartialAggregatorTest(absltest.TestCase):
  """An __init__.py as a commit that has only some of its modules has it."""

  def partial(self, *absent):
    return make_patchset.partial_aggregator(
        AGGREGATOR, MODULES - set(absent), MODULES)

  def test_all_present_is_the_file(self):
    self.assertEqual(self.partial(), AGGREGATOR)

  def test_absent_modules_and_what_reads_them_go(self):
    self.assertEqual(
        self.partial('flax.nnx.sow.capture', 'flax.nnx.sow.transform.sites'),
        textwrap.dedent('''\
            """The package; its docstring stays whole."""

            from flax.nnx.sow.tap import tap as tap
            from flax.nnx.sow.transform.primitive import sow as sow

            __all__ = ['sow', 'tap']
        '''))

  def test_only_the_docstring_left(self):
    text = make_patchset.partial_aggregator(
        '"""Rules."""\n\nfrom flax.nnx.sow.transform.rules import loops as'
        ' loops\n', set(), {'flax.nnx.sow.transform.rules.loops'})
    self.assertEqual(text, '"""Rules."""\n')

  def test_an_import_of_present_and_absent_modules_is_refused(self):
    with self.assertRaisesRegex(make_patchset.PatchsetError, 'present and'):
      make_patchset.partial_aggregator(
          'from flax.nnx.sow import capture, tap\n',
          MODULES - {'flax.nnx.sow.tap'}, MODULES)


def _module_level(tree: ast.AST):
  """The nodes of ``tree`` that run when the module is imported: not those
  of function bodies (an import there, which breaks a cycle, runs when the
  function is called)."""
  stack = [tree]
  while stack:
    node = stack.pop()
    yield node
    stack.extend(
        child for child in ast.iter_child_nodes(node)
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                  ast.Lambda)))


class MakePatchsetTest(absltest.TestCase):

  def test_every_file_of_ours_goes_with_one_commit_or_is_not_shipped(self):
    make_patchset.check_files_classified()

  def test_each_commits_tests_import_only_what_it_has(self):
    # What check_patchset's commits part finds after minutes, read from the
    # sources: a test file that imports from flax.nnx.sow (or
    # capture_compat) a module, or a name of an aggregator, that the series
    # adds only in a later commit fails at collection at its own commit.
    every = make_patchset.present_modules(make_patchset.REPO)
    steps = make_patchset.commits()
    # The tests' helper modules (sow_testing, transform_stacks, ...): by
    # their import name, the commit that adds each.
    helpers = {
        pathlib.PurePath(f).stem: step.key
        for step in steps for f in make_patchset.commit_files(step)
        if f.startswith('tests/') and f.endswith('.py')
        and not make_patchset.is_test(f)}
    # The codemod's package, imported by its name (as migrate_sow.py does),
    # its modules among themselves relatively.
    codemod = 'scripts/migrate/'
    codemod_modules = {
        f[len(codemod):-len('.py')].replace('/', '.')
        for step in steps for f in make_patchset.commit_files(step)
        if f.startswith(codemod + 'sow_migrate/') and f.endswith('.py')}
    present: set[str] = set()
    added: set[str] = set()
    for step in steps:
      files = make_patchset.commit_files(step)
      added |= {pathlib.PurePath(f).stem for f in files}
      present |= {f[len(codemod):-len('.py')].replace('/', '.')
                  for f in files if f.startswith(codemod + 'sow_migrate/')
                  and f.endswith('.py')}
      for f in files:
        if not (f.startswith(codemod + 'sow_migrate/') and f.endswith('.py')):
          continue
        package = f[len(codemod):].rsplit('/', 1)[0].replace('/', '.')
        source = (make_patchset.REPO / f).read_text(encoding='utf-8')
        for node in _module_level(ast.parse(source)):
          if not (isinstance(node, ast.ImportFrom) and node.level == 1):
            continue
          base = package + (f'.{node.module}' if node.module else '')
          for alias in node.names:
            target = (f'{base}.{alias.name}'
                      if f'{base}.{alias.name}' in codemod_modules else base)
            if target in codemod_modules:
              with self.subTest(step=step.key, file=f, name=target):
                self.assertIn(target, present)
      for f in files:
        parts = pathlib.PurePath(f).with_suffix('').parts
        if f.endswith('.py') and '.'.join(parts[:-1]) in every | {'flax.nnx'}:
          present.add('.'.join(parts[:-1] if parts[-1] == '__init__'
                               else parts))
      exported = {}
      for relative in make_patchset.AGGREGATORS:
        package = relative[:-len('/__init__.py')].replace('/', '.')
        text = (make_patchset.REPO / relative).read_text(encoding='utf-8')
        tree = ast.parse(make_patchset.partial_aggregator(
            text, present, every, relative))
        exported[package] = {
            name for node in tree.body
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for name in (a.asname or a.name for a in node.names)
        } | {node.name for node in tree.body
             if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
      for f in files:
        if not (make_patchset.is_test(f) and f.endswith('.py')):
          continue
        source = (make_patchset.REPO / f).read_text(encoding='utf-8')
        for node in ast.walk(ast.parse(source)):
          names = ([a.name for a in node.names]
                   if isinstance(node, ast.Import) else
                   [node.module] if isinstance(node, ast.ImportFrom)
                   and node.module and not node.level else [])
          for name in names:
            if name in helpers:
              with self.subTest(step=step.key, file=f, helper=name):
                self.assertIn(name, added, f'added by {helpers[name]}')
          if not (isinstance(node, ast.ImportFrom) and node.module
                  and node.module in every):
            continue
          for alias in node.names:
            target = f'{node.module}.{alias.name}'
            with self.subTest(step=step.key, file=f, name=target):
              if target in every:
                self.assertIn(target, present)
              else:
                self.assertIn(node.module, present)
                if node.module in exported:
                  self.assertIn(alias.name, exported[node.module])

  def test_every_commit_carries_tests(self):
    for step in make_patchset.commits():
      with self.subTest(step.key):
        tests = [f for f in make_patchset.commit_files(step)
                 if make_patchset.is_test(f)]
        self.assertNotEmpty(tests)

  def test_the_series_goes_in_order(self):
    # A module comes no later than the first test file that imports it, a
    # guide after the code it runs: what every commit's tests need is there.
    keys = [c.key for c in make_patchset.commits()]
    self.assertLen(set(keys), len(keys))
    self.assertLess(keys.index('capture'), keys.index('calls'))
    self.assertLess(keys.index('codemod'), keys.index('docs-migrate'))
    self.assertTrue(all(k.startswith('docs-')
                        for k in keys[keys.index('docs-sow-transform'):]))

  def test_a_commit_without_a_reason_keeps_to_the_budget(self):
    for step in make_patchset.commits():
      if step.oversize is not None:
        self.assertGreater(len(step.oversize), 40, step.key)

  def test_flax_paths(self):
    self.assertEqual(make_patchset.flax_path('tests/nnx/sow/api/a_test.py'),
                     'tests/nnx/sow/api/a_test.py')
    self.assertEqual(make_patchset.flax_path('tests/migrate/testdata/x.py'),
                     'tests/nnx/sow/migrate/testdata/x.py')
    self.assertEqual(
        make_patchset.flax_path('tests/nnx/capture_compat/b_test.py'),
        'tests/nnx/sow/capture_compat/b_test.py')
    self.assertEqual(make_patchset.flax_path('flax/nnx/sow/capture.py'),
                     'flax/nnx/sow/capture.py')
    with self.assertRaises(make_patchset.PatchsetError):
      make_patchset.flax_path('tests/tooling/readme_test.py')

  def test_refuses_a_plain_copy(self):
    with tempfile.TemporaryDirectory() as tmp:
      with self.assertRaisesRegex(make_patchset.PatchsetError,
                                  'not the root of a git work tree'):
        make_patchset.check_checkout(pathlib.Path(tmp))

  def test_series_applies_with_git_am(self):
    checkout = os.environ.get('FLAX_CHECKOUT')
    if not checkout:
      self.skipTest('no Flax checkout: set FLAX_CHECKOUT to a clean clone')
    checkout = pathlib.Path(checkout)
    base = make_patchset.check_checkout(checkout)
    with tempfile.TemporaryDirectory() as tmp:
      out = pathlib.Path(tmp) / 'series'
      # The docs commits import their makers (flax_docs, ...) when made, as
      # check_patchset.py runs them: from scripts/upstream.
      with mock.patch.object(sys, 'path', [_UPSTREAM, *sys.path]):
        patches = make_patchset.make_patchset(checkout, out)
      self.assertLen(patches, len(make_patchset.commits()))
      manifest = json.loads((out / 'series.json').read_text())
      self.assertEqual([e['key'] for e in manifest],
                       [c.key for c in make_patchset.commits()])
      tree = pathlib.Path(tmp) / 'flax'
      make_patchset.clone(checkout, base, tree)
      subprocess.run(
          ['git', '-c', 'user.name=t', '-c', 'user.email=t@t', 'am', '-q',
           *map(str, patches)], cwd=tree, check=True)
      module = (tree / 'flax/nnx/module.py').read_text()
      self.assertIn('capture_compat.capture(', module)
      self.assertNotIn('__captures__', module)
      self.assertTrue((tree / 'tests/nnx/sow/api/capture_test.py').exists())
      self.assertTrue((tree / 'scripts/migrate/migrate_sow.py').exists())
      self.assertEqual((tree / 'flax/nnx/sow/__init__.py').read_text(),
                       (pathlib.Path(sow_layout.ROOT) / 'flax/nnx/sow'
                        / '__init__.py').read_text())


class CommitChecksTest(absltest.TestCase):

  def test_first_test_of_each_earlier_file(self):
    listing = textwrap.dedent('''\
        tests/nnx/sow/a_test.py::A::test_1
        tests/nnx/sow/a_test.py::A::test_2
        tests/nnx/sow/b_test.py::B::test_1
        tests/nnx/sow/c_test.py::C::test_1

        4 tests collected in 0.1s
    ''')
    self.assertEqual(
        check_patchset._first_tests(  # pylint: disable=protected-access
            listing, {'tests/nnx/sow/a_test.py', 'tests/nnx/sow/c_test.py'}),
        ['tests/nnx/sow/a_test.py::A::test_1',
         'tests/nnx/sow/c_test.py::C::test_1'])

  def test_a_commit_is_green_if_its_tests_ran_and_passed(self):
    record = {'import': 0, 'collect': 0, 'failing': {}, 'own': ['a'],
              'smoke': 0, 'tests': {'passed': 3}}
    green = check_patchset._commit_green  # pylint: disable=protected-access
    self.assertTrue(green(record))
    self.assertFalse(green(dict(record, failing={'x': '[failed] E'})))
    self.assertFalse(green(dict(record, tests={'skipped': 3})))
    self.assertFalse(green(dict(record, collect=2)))
    # A doctest of our modules failing at the commit fails it too.
    self.assertFalse(green(dict(
        record, doctests_failing=['flax/nnx/sow/capture.py::capture'])))
    self.assertTrue(green(dict(record, doctests_failing=[])))


class SphinxOutputTest(absltest.TestCase):

  TREE = pathlib.Path('/w/patched')

  def test_warnings_relative_without_line_numbers(self):
    text = ''.join([
        '/w/patched/docs_nnx/guides/a.ipynb:50094: WARNING: duplicate label'
        ' examples, other instance in /w/patched/docs_nnx/examples/index.rst\n',
        '/w/patched/flax/nnx/sow/capture.py:docstring of'
        ' flax.nnx.sow.capture.capture:3: WARNING: Unexpected indentation.\n',
        'WARNING: multiple files found for the document "guides/a": [\'x\']\n',
        "Use '/w/patched/docs_nnx/guides/a.ipynb' for the build.\n",
        "[':module: m']:2: CRITICAL: Unexpected section title.\n",
    ])
    self.assertEqual(check_patchset.sphinx_warnings(text, self.TREE), [
        {'where': 'docs_nnx/guides/a.ipynb',
         'message': 'duplicate label examples, other instance in'
                    ' docs_nnx/examples/index.rst'},
        {'where': 'flax/nnx/sow/capture.py:docstring of'
                  ' flax.nnx.sow.capture.capture',
         'message': 'Unexpected indentation.'},
        {'where': '', 'message': 'multiple files found for the document'
                                 ' "guides/a": [\'x\']'},
        {'where': "[':module: m']", 'message': 'Unexpected section title.'},
    ])

  def test_doctest_summary(self):
    text = textwrap.dedent('''\
        Doctest summary
        ===============
          169 tests
            0 failures in tests
            1 failure in setup code
            0 failures in cleanup code
        build finished with problems, 275 warnings.
    ''')
    self.assertEqual(check_patchset.doctest_summary(text), {
        'tests': 169, 'failures in tests': 0, 'failures in setup code': 1,
        'failures in cleanup code': 0})

  def test_located_in_the_series(self):
    changed = ['docs_nnx/guides/a.ipynb', 'docs_nnx/guides/a.md',
               'flax/nnx/sow/capture.py']
    for where, expected in (
        ('docs_nnx/guides/a.ipynb', True), ('guides/a', True),
        ('flax/nnx/sow/capture.py:docstring of x', True),
        ('docs_nnx/guides/b.ipynb', False), ('', False),
        ('flax/nnx/module.py:docstring of y', False)):
      with self.subTest(where):
        self.assertEqual(check_patchset.located_in(where, changed),
                         expected)

  def test_summary_rows(self):
    multiple = 'multiple files found for the document "guides/a"'
    docs = {
        'doctest': {t: {'tests': 169, 'failures in tests': 0,
                        'failures in setup code': 1}
                    for t in ('pristine', 'patched')},
        'missing': {'pristine': ['torch'], 'patched': ['torch']},
        'warnings': {'pristine': {'html': 270, 'doctest': 300},
                     'patched': {'html': 272, 'doctest': 302}},
        'new': [{'builder': b, 'where': '', 'message': multiple}
                for b in ('doctest', 'html')]
               + [{'builder': 'html', 'where': 'x', 'message': 'bad'}],
        'findings': [{'builder': 'html', 'where': 'x', 'message': 'bad'}],
        'pages': {'guides/a': 3, 'api_reference/flax.nnx/sow': -1},
        'green': False,
    }
    table = check_patchset.summary_table({'docs': docs})
    self.assertIn(
        '| `docs_nnx`: Sphinx `-M doctest` | 169 tests, 0 failures, 1'
        ' failing setup | 169 tests, 0 failures, 1 failing setup | same'
        ' results; not installed: torch; 1 new warnings, 1 of them as every'
        ' Flax guide gets (an .ipynb and an .md) |', table)
    self.assertIn(
        '| `docs_nnx`: Sphinx `-M html` (stored outputs) | 270 warnings |'
        ' 272 warnings | 2 new warnings, 1 of them as every Flax guide gets'
        " (an .ipynb and an .md), others: {'bad': 1}; pages: a (3 outputs),"
        ' api_reference/flax.nnx/sow: NOT BUILT |', table)
    self.assertTrue(table.endswith('docs: NOT green\n'))

if __name__ == '__main__':
  absltest.main()
