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
"""Pytest plugin: installs ``flax.nnx.capture_compat`` before any test loads.

Used by ``run_flax_nnx_tests.py`` to run Flax's own tests with
``nnx.capture``, ``Module.sow`` and ``Module.perturb`` routed through this
working tree's sow transform::

  PYTHONPATH=scripts/upstream pytest -p compat_plugin FLAX/tests/nnx

It makes ``flax.nnx.sow`` and ``flax.nnx.capture_compat`` resolve to this
working tree (``_worktree``), then calls ``capture_compat.install()`` in
``pytest_configure``, which runs before any test module is imported (also in
every pytest-xdist worker).
"""

import os
import sys

import pytest

_REPO = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)
_KEY = pytest.StashKey[object]()


def _install():
  """Imports this tree's ``capture_compat`` and installs it."""
  if _REPO not in sys.path:
    sys.path.insert(0, _REPO)
  import _worktree  # noqa: F401  pylint: disable=g-import-not-at-top
  from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top

  capture_compat.install()
  return capture_compat


def pytest_configure(config):
  config.stash[_KEY] = _install()


def pytest_report_header(config):
  capture_compat = config.stash[_KEY]
  return (
      f'flax.nnx.capture_compat installed={capture_compat.is_installed()}'
      f' from {capture_compat.__file__}'
  )
