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
"""Checks ``scripts/upstream/check_static.py`` without running the checkers.

The checkers themselves take minutes (pytype most), so the suite only pins
how their outputs are read, which errors count as ours, and that the script
skips cleanly without a Flax checkout. The one end-to-end case (ruff and the
whitespace hook, a few seconds) runs only when ``$FLAX_CHECKOUT`` is set and
the tools venv already exists.
"""

import contextlib
import importlib.util
import io
import os
import pathlib
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
import sow_layout

ROOT = pathlib.Path(sow_layout.ROOT)
SCRIPT = ROOT / 'scripts' / 'upstream' / 'check_static.py'


def _load():
  spec = importlib.util.spec_from_file_location('check_static', SCRIPT)
  module = importlib.util.module_from_spec(spec)
  # dataclasses look their module up in sys.modules.
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  return module


class CheckStaticTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if not SCRIPT.exists():
      self.skipTest('scripts/upstream is not in this tree')
    self.cs = _load()

  def test_skips_without_checkout(self):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      code = self.cs.main(['--flax', '/nonexistent/flax', '--venv',
                           '/nonexistent/venv'])
    self.assertEqual(code, 0)
    self.assertIn('skipped', out.getvalue())

  def test_default_venv_is_under_the_ignored_build_directory(self):
    # Nothing machine-specific: the default follows the repository.
    default = pathlib.Path(self.cs.DEFAULT_VENV)
    self.assertEqual(default, ROOT / 'build' / 'static-venv')
    ignored = (ROOT / '.gitignore').read_text().split()
    self.assertIn('build/', ignored)
    with mock.patch.dict(os.environ):
      os.environ.pop('STATIC_VENV', None)
      args = self.cs.parse_args(['--flax', 'x'])
    self.assertEqual(args.venv, str(default))

  def test_venv_from_the_environment_or_the_command_line(self):
    with mock.patch.dict(os.environ, {'STATIC_VENV': '/elsewhere/venv'}):
      self.assertEqual(self.cs.parse_args([]).venv, '/elsewhere/venv')
    # Relative to where it is run, made absolute: the tools run from the
    # checkout's copy.
    args = self.cs.parse_args(['--venv', 'tools-venv'])
    self.assertEqual(args.venv, os.path.join(os.getcwd(), 'tools-venv'))

  def test_parses_mypy(self):
    out = ('flax/nnx/sow/transform/rules.py:230: error: Incompatible types in '
           'assignment (expression has type "X", variable has type "Y")  '
           '[assignment]\n'
           'flax/nnx/sow/transform/rules.py:234: note: Possible overload variants:\n'
           'Found 1 error in 1 file (checked 119 source files)\n')
    [error] = self.cs._parse(self.cs._MYPY, out, '/tmp/x')
    self.assertEqual(
        str(error), 'flax/nnx/sow/transform/rules.py:230: assignment: Incompatible '
        'types in assignment (expression has type "X", variable has type '
        '"Y")')

  def test_parses_pytype_absolute_paths(self):
    root = '/tmp/check-static-abc/flax'
    out = (f'FAILED: [code=1] {root}/.pytype/pyi/flax/nnx/'
           'capture_compat/call.pyi\n'
           f'{root}/flax/nnx/capture_compat/call.py:12:5: error: in f: '
           'No attribute \'x\' on None [attribute-error]\n'
           '  In Optional[Foo]\n'
           '    foo.x\n'
           '    ~~~~~\n')
    # Outside ninja, pytype colors 'error' and puts two spaces before the
    # code.
    out += (f'{root}/flax/nnx/sow/plant.py:3:1: \x1b[1m\x1b[31merror'
            '\x1b[39m\x1b[0m: in <module>: Invalid type annotation \'R\'  '
            '[invalid-annotation]\n')
    first, second = self.cs._parse(self.cs._PYTYPE, out, root)
    self.assertEqual(first.path, 'flax/nnx/capture_compat/call.py')
    self.assertEqual((first.line, first.code), (12, 'attribute-error'))
    self.assertTrue(self.cs.is_ours(first.path))
    self.assertEqual(
        str(second), 'flax/nnx/sow/plant.py:3: invalid-annotation: Invalid '
        'type annotation \'R\'')

  def test_parses_ruff(self):
    out = ('flax/nnx/sow/capture.py:27:26: F401 [*] `flax.nnx.sow.transform.primitive`'
           ' imported but unused\nFound 1 error.\n')
    [error] = self.cs._parse(self.cs._RUFF, out, '/tmp/x')
    self.assertEqual(
        str(error), 'flax/nnx/sow/capture.py:27: F401: '
        '`flax.nnx.sow.transform.primitive` imported but unused')

  def test_ours_and_not_ours(self):
    self.assertTrue(self.cs.is_ours('flax/nnx/sow/__init__.py'))
    self.assertTrue(self.cs.is_ours('flax/nnx/capture_compat/call.py'))
    self.assertFalse(self.cs.is_ours('flax/nnx/capture_compat.py'))
    self.assertFalse(self.cs.is_ours('flax/nnx/sowing.py'))
    self.assertFalse(self.cs.is_ours('flax/nnx/module.py'))

  def test_whitespace_hook(self):
    with tempfile.TemporaryDirectory() as root:
      with open(os.path.join(root, 'a.py'), 'w', encoding='utf-8') as f:
        f.write('x = 1 \ny = 2\n\tz = 3\t\r\n')
      run = self.cs.run_whitespace(root, '', None)
    self.assertEqual([e.line for e in run.errors], [1, 3])

  def test_ruff_end_to_end(self):
    checkout = os.environ.get('FLAX_CHECKOUT')
    venv = os.environ.get('STATIC_VENV', self.cs.DEFAULT_VENV)
    if not checkout or not os.path.isdir(checkout):
      self.skipTest('no $FLAX_CHECKOUT')
    if self.cs.tool_versions(venv) is None:
      self.skipTest(f'no tools venv at {venv}')
    with tempfile.TemporaryDirectory() as out_dir:
      with contextlib.redirect_stdout(io.StringIO()):
        code = self.cs.main(['--flax', checkout, '--venv', venv, '--tools',
                             'ruff,whitespace', '--out', out_dir])
      self.assertIn(code, (0, 1))
      self.assertTrue(os.path.exists(os.path.join(out_dir, 'summary.json')))


if __name__ == '__main__':
  absltest.main()
