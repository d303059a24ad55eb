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
"""``capture_compat.install``/``uninstall``: Flax's names pointed at the
compat layer and back, and what stays reachable."""

import functools
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized

import flax
from flax import nnx
from flax.nnx import capture_compat
from flax.nnx import module as module_lib

from compat_testing import flat, Net, X  # pylint: disable=g-multiple-import
import sow_legacy
import sow_testing


class InstallTest(sow_testing.StateAssertions, parameterized.TestCase):
  """Each test starts with the layer off, whatever the process had, and
  leaves the process as it found it (also where the layer was installed at
  import, as a Flax tree with the integration does)."""

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.uninstall())
    # Flax 0.12.8's own, as the layer found them.
    self.flax_capture = module_lib.capture
    self.flax_sow = nnx.Module.sow
    self.flax_perturb = nnx.Module.perturb

  def test_install_uninstall(self):
    self.assertFalse(capture_compat.is_installed())
    self.assertIsNot(nnx.capture, capture_compat.capture)
    self.assertIs(nnx.capture, self.flax_capture)
    with capture_compat.install():
      capture_compat.install()  # idempotent
      self.assertTrue(capture_compat.is_installed())
      for namespace in (nnx, flax.nnx, module_lib):
        self.assertIs(namespace.capture, capture_compat.capture)
      self.assertIs(nnx.Module.sow, capture_compat.sow)
      self.assertIs(nnx.Module.perturb, capture_compat.perturb)
      with capture_compat.uninstall():
        capture_compat.uninstall()  # idempotent
        self.assertFalse(capture_compat.is_installed())
        self.assertIs(module_lib.capture, self.flax_capture)
        self.assertIs(nnx.Module.sow, self.flax_sow)
      self.assertTrue(capture_compat.is_installed())
    self.assertFalse(capture_compat.is_installed())
    self.assertIs(nnx.Module.perturb, self.flax_perturb)
    capture_compat.install()
    capture_compat.uninstall()
    self.assertFalse(capture_compat.is_installed())

  def test_delegates(self):
    self.assertTrue(capture_compat.delegates(capture_compat.capture))

    @functools.wraps(capture_compat.capture)
    def wrapped(f, *args, **kwargs):
      return capture_compat.capture(f, *args, **kwargs)

    def handing_over(f, *args, **kwargs):
      return capture_compat.capture(f, *args, **kwargs)

    # By identity: a functools.wraps wrapper is what it wraps; what another
    # function does with its arguments is not read from its code.
    self.assertTrue(capture_compat.delegates(wrapped))
    self.assertFalse(capture_compat.delegates(handing_over))
    self.assertFalse(capture_compat.delegates(lambda f: f))
    self.assertFalse(capture_compat.delegates(len))  # no code object
    # Flax's own capture hands over exactly where its source names us
    # (Flax with the patch series), not in a release such as 0.12.8.
    self.assertEqual(
        capture_compat.delegates(self.flax_capture),
        'capture_compat' in inspect.getsource(self.flax_capture),
    )

  def test_capture_collects_what_module_sow_routes_to_it(self):
    # No check of who installed whom: capture collects what reaches
    # capture_compat.sow, whether Module.sow is it (install), delegates to
    # it (Flax with this change), or is Flax 0.12.8's (nothing reaches it:
    # each sow takes the deprecated path on the call's copies, and warns).
    # A trace is reused only under the Module.sow it was traced with.
    net = Net(nnx.Rngs(0))
    with capture_compat.install():
      _, installed = capture_compat.capture(net, nnx.Intermediate)(X)
    self.assertEqual([p for p, _, _ in flat(installed)],
                     [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('out',)])
    if sow_legacy.is_available():
      with self.assertWarnsRegex(DeprecationWarning, 'outside of'):
        _, state = capture_compat.capture(net, nnx.Intermediate)(X)
      self.assertEmpty(flat(state))
    else:  # Flax's own Module.sow delegates
      _, state = capture_compat.capture(net, nnx.Intermediate)(X)
      self.assertStatesEqual(state, installed)

    def delegating_sow(self, *args, **kwargs):
      return capture_compat.sow(self, *args, **kwargs)

    with mock.patch.object(nnx.Module, 'sow', delegating_sow):
      _, state = capture_compat.capture(net, nnx.Intermediate)(X)
    self.assertStatesEqual(state, installed)
    with capture_compat.install():
      _, again = capture_compat.capture(net, nnx.Intermediate)(X)
    self.assertStatesEqual(again, installed)

  def test_importable_from_flax_nnx_init(self):
    # In Flax itself, flax/nnx/__init__.py imports the layer while flax.nnx
    # is being initialized: the import must not need flax.nnx to be done.
    # A copy of the installed Flax with this tree's files, imported in a
    # fresh interpreter.
    ours = os.path.dirname(os.path.dirname(capture_compat.__file__))
    with tempfile.TemporaryDirectory() as tmp:
      nnx_copy = os.path.join(tmp, 'flax', 'nnx')
      shutil.copytree(
          os.path.dirname(flax.__file__), os.path.join(tmp, 'flax'),
          ignore=shutil.ignore_patterns('__pycache__', 'sow',
                                        'capture_compat*'),
      )
      for package in ('sow', 'capture_compat'):
        shutil.copytree(
            os.path.join(ours, package), os.path.join(nnx_copy, package),
            ignore=shutil.ignore_patterns('__pycache__'),
        )
      init = os.path.join(nnx_copy, '__init__.py')
      with open(init) as f:
        text = f.read()
      anchor = 'from .module import capture as capture\n'
      self.assertIn(anchor, text)
      with open(init, 'w') as f:
        f.write(text.replace(
            anchor,
            anchor + 'from . import capture_compat as capture_compat\n',
        ))
      program = (
          'import jax.numpy as jnp\n'
          'from flax import nnx\n'
          'assert nnx.capture_compat.__file__.startswith(%r)\n'
          'class M(nnx.Module):\n'
          '  def __call__(self, x):\n'
          "    self.sow(nnx.Intermediate, 'y', 2 * x)\n"
          '    return x\n'
          'with nnx.capture_compat.install():\n'
          '  _, state = nnx.capture(M(), nnx.Intermediate)(jnp.ones(()))\n'
          "print(float(state['y'].get_value()[0]))\n"
      ) % tmp
      env = dict(os.environ, PYTHONPATH=tmp)
      result = subprocess.run(
          [sys.executable, '-P', '-c', program], cwd=tmp, env=env,
          capture_output=True, text=True, timeout=300, check=False,
      )
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertEqual(result.stdout.strip(), '2.0')

  def test_legacy_is_reachable_and_unchanged(self):
    net = Net(nnx.Rngs(0))
    _, before = sow_legacy.capture(net, nnx.Intermediate)(X)
    with capture_compat.install():
      _, during = sow_legacy.capture(net, nnx.Intermediate)(X)
    _, direct = self.flax_capture(net, nnx.Intermediate)(X)
    self.assertEqual(flat(before)[0][0], ('blocks', 0, 'h'))
    for state in (during, direct):
      self.assertEqual(
          [(p, t) for p, t, _ in flat(state)],
          [(p, t) for p, t, _ in flat(before)],
      )


if __name__ == '__main__':
  absltest.main()
