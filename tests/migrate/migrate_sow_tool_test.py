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
"""The codemod as a command users know: diffs that apply, notes with paths
relative to the project, a progress bar only on a terminal, help for every
option, the console command and its message without libcst."""

import io
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib

import codemod_testing
import sow_layout
from absl.testing import absltest

codemod_testing.require_libcst()

cli = sow_layout.test_module('migrate_sow_test')
ms = cli.ms
cli_lib = codemod_testing.codemod_module('cli')

MODEL = '''\
from flax import nnx


class Model(nnx.Module):

  def __call__(self, x):
    self.sow(nnx.Intermediate, 'y', x)
    return x
'''
TRAIN = '''\
from flax import nnx
from pkg.model import Model


def other(model, x):
  model(x)
  print(model.y.value)


def step(x):
  model = Model()
  model(x)
  s = nnx.pop(model, nnx.Intermediate)
  return s['y'][0]
'''


def _git(directory, *args):
  return subprocess.run(['git', '-C', directory, *args], capture_output=True,
                        text=True, check=False)


class ToolTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = self.enter_context(tempfile.TemporaryDirectory())
    cli.write(self.root, 'pyproject.toml', '[project]\nname = "p"\n')
    self.model = cli.write(self.root, 'pkg/model.py', MODEL)
    # CRLF line ends and no newline at the end: the diff must say so.
    self.train = os.path.join(self.root, 'pkg', 'train.py')
    with open(self.train, 'wb') as f:
      f.write(TRAIN.rstrip('\n').replace('\n', '\r\n').encode())

  def _main(self, argv, cwd):
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
      with absltest.mock.patch('sys.stdout', out), absltest.mock.patch(
          'sys.stderr', err):
        code = ms.main(argv)
    finally:
      os.chdir(here)
    return code, out.getvalue(), err.getvalue()

  def test_diffs_apply_with_git_apply_and_patch(self):
    if shutil.which('git') is None or shutil.which('patch') is None:
      self.skipTest('needs git and patch')
    self.assertEqual(_git(self.root, 'init', '-q').returncode, 0)
    elsewhere = self.enter_context(tempfile.TemporaryDirectory())
    for name, paths, cwd in (
        ('relative', ['pkg'], self.root),
        ('absolute', [os.path.join(self.root, 'pkg')], elsewhere)):
      with self.subTest(name):
        code, diff, err = self._main(['--no-progress', *paths], cwd)
        self.assertEqual(code, ms.EXIT_OK, msg=err)
        self.assertIn('--- a/pkg/train.py\n+++ b/pkg/train.py\n', diff)
        self.assertIn('\\ No newline at end of file\n', diff)
        checked = subprocess.run(['git', 'apply', '--check', '-'],
                                 input=diff, cwd=self.root, text=True,
                                 capture_output=True, check=False)
        self.assertEqual(checked.returncode, 0, msg=checked.stderr)
        patched = subprocess.run(['patch', '-p1', '--dry-run'], input=diff,
                                 cwd=self.root, text=True,
                                 capture_output=True, check=False)
        self.assertEqual(patched.returncode, 0, msg=patched.stdout)
    # Applied, it is what --write writes.
    code, diff, _ = self._main(['--no-progress', 'pkg'], self.root)
    applied = subprocess.run(['git', 'apply', '-'], input=diff, cwd=self.root,
                             text=True, capture_output=True, check=False)
    self.assertEqual(applied.returncode, 0, msg=applied.stderr)
    with open(self.train, 'rb') as f:
      by_patch = f.read()
    with open(self.train, 'wb') as f:
      f.write(TRAIN.rstrip('\n').replace('\n', '\r\n').encode())
    self._main(['--no-progress', '--write', 'pkg'], self.root)
    with open(self.train, 'rb') as f:
      self.assertEqual(f.read(), by_patch)
    self.assertIn(b'_, s = nnx.capture(model, nnx.Intermediate)(x)\r\n',
                  by_patch)

  def test_notes_and_flags_name_paths_relative_to_the_project_root(self):
    elsewhere = self.enter_context(tempfile.TemporaryDirectory())
    code, _, err = self._main(
        ['--no-progress', '--write', '--annotate',
         os.path.join(self.root, 'pkg')], elsewhere)
    self.assertEqual(code, ms.EXIT_OK, msg=err)
    # The reader itself, and the sow it reads.
    self.assertIn("pkg/train.py:7:9: attribute-read: read as an attribute, "
                  "model.y.value reads 'y' (sown at pkg/model.py:7)", err)
    self.assertIn('pkg/model.py:7:5: attribute-read: ', err)
    self.assertNotIn(self.root, err)
    with open(self.model, encoding='utf-8') as f:
      model = f.read()
    # The whole reason, wrapped into comment lines.
    self.assertIn('# TODO(migrate_sow): attribute-read: read as an attribute, '
                  'model.y.value, at\n    #     pkg/train.py: the model runs '
                  'outside nnx.capture there; capture it\n    #     instead\n',
                  model)
    self.assertNotIn(self.root, model)

  def test_a_progress_bar_only_on_a_terminal(self):

    class Terminal(io.StringIO):

      def isatty(self):
        return True

    outputs = {}
    for name, stream, progress in (('terminal', Terminal(), True),
                                   ('pipe', io.StringIO(), True),
                                   ('--no-progress', Terminal(), False)):
      code, _ = ms.run([self.root], err=stream, out=io.StringIO(),
                       progress=progress)
      self.assertEqual(code, ms.EXIT_OK)
      outputs[name] = stream.getvalue()
    self.assertEqual(outputs['pipe'], outputs['--no-progress'])
    self.assertIn('analysing', outputs['terminal'])
    # The bar is erased: the flags are the same lines.
    self.assertIn(outputs['pipe'].splitlines()[0], outputs['terminal'])

  def test_a_reason_is_wrapped_on_a_terminal_never_cut(self):
    runner = codemod_testing.codemod_module('runner')
    flags = codemod_testing.codemod_module('flags')
    detail = ' '.join(f'word{i}' for i in range(60))
    flag = flags.Flag('pkg/train.py', 7, 9, 'capture-hazard', detail)
    lines = {}
    for width in (0, 60):
      stream = io.StringIO()
      runner.write_flag(stream, flag, width)
      lines[width] = stream.getvalue().splitlines()
    self.assertEqual(lines[0], [f'pkg/train.py:7:9: capture-hazard: {detail}'])
    self.assertGreater(len(lines[60]), 1)
    self.assertTrue(all(len(line) <= 60 for line in lines[60]))
    self.assertEqual(' '.join(line.strip() for line in lines[60]),
                     lines[0][0])

  def test_quiet_prints_nothing_on_stderr(self):
    code, diff, err = self._main(['--quiet', 'pkg'], self.root)
    self.assertEqual((code, err), (ms.EXIT_OK, ''))
    self.assertIn('+++ b/pkg/train.py', diff)

  def test_every_option_has_help(self):
    parser = cli_lib.build_parser()
    for action in parser._actions:  # pylint: disable=protected-access
      with self.subTest(action.dest):
        self.assertTrue(action.help and action.help.strip())
    text = parser.format_help()
    for option in ('--no-progress', '--quiet', '--jobs', '--target'):
      self.assertIn(option, text)


class CommandTest(absltest.TestCase):
  """``migrate-sow``, as ``pip install`` makes it."""

  def test_the_project_installs_the_command_with_its_extra(self):
    with open(os.path.join(sow_layout.ROOT, 'pyproject.toml'), 'rb') as f:
      project = tomllib.load(f)
    if project['project']['name'] != 'flax-nnx-sow':
      # In Flax's tree the codemod is a script: no command to install.
      self.skipTest("the command is flax-nnx-sow's; this is "
                    f"{project['project']['name']}'s pyproject.toml")
    self.assertEqual(project['project']['scripts']['migrate-sow'],
                     'flax_nnx_sow_migrate.cli:main')
    self.assertTrue(any(r.startswith('libcst') for r in
                        project['project']['optional-dependencies'][
                            'migrate']))
    tool = project['tool']['setuptools']
    folder = tool['package-dir']['flax_nnx_sow_migrate']
    self.assertEqual(folder, 'scripts/migrate/sow_migrate')
    # Every package of the codemod ships; nothing under flax/ but ours.
    source = os.path.join(sow_layout.ROOT, folder)
    found = sorted(
        '.'.join(['flax_nnx_sow_migrate', *filter(None, os.path.relpath(
            d, source).replace('.', '').split(os.sep))])
        for d, _, files in os.walk(source) if '__init__.py' in files)
    self.assertEqual(sorted(p for p in tool['packages']
                            if p.startswith('flax_nnx_sow_migrate')), found)
    self.assertEqual(
        [p for p in tool['packages'] if p.startswith('flax')
         and not p.startswith(('flax.nnx.sow', 'flax.nnx.capture_compat',
                               'flax_nnx_sow_migrate'))], [])

  def test_without_libcst_the_command_says_what_to_install(self):
    scripts = os.path.join(sow_layout.ROOT, 'scripts', 'migrate')
    code = ('import sys; sys.modules["libcst"] = None; '
            f'sys.path.insert(0, {scripts!r}); sys.argv[0] = "migrate-sow"; '
            'from sow_migrate import cli; sys.exit(cli.main(["."]))')
    result = subprocess.run([sys.executable, '-c', code], capture_output=True,
                            text=True, check=False)
    self.assertEqual(result.returncode, 2, msg=result.stderr)
    self.assertEqual(result.stderr, (
        'migrate-sow: the codemod needs libcst, which is not installed here; '
        "install it with: pip install 'flax-nnx-sow[migrate]' (or pip "
        "install 'libcst>=1.9')\n"))


if __name__ == '__main__':
  absltest.main()
