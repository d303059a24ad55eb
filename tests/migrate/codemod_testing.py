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
"""What the codemod's tests share: a skip without libcst, and the codemod's
modules (``scripts/migrate/sow_migrate``), imported by name."""

import importlib
import importlib.util
import os
import sys
import types

from absl.testing import absltest

import sow_layout

SCRIPTS = os.path.join(sow_layout.ROOT, 'scripts', 'migrate')


def require_libcst() -> None:
  """Skips the test module being imported where libcst is missing: it is
  not a Flax dependency, and the codemod's tests run where it is
  installed."""
  if importlib.util.find_spec('libcst') is None:
    raise absltest.SkipTest('the codemod needs libcst (pip install libcst)')


def codemod_module(name: str) -> types.ModuleType:
  """The codemod's module ``sow_migrate.<name>`` (skipping without
  libcst)."""
  require_libcst()
  if SCRIPTS not in sys.path:
    sys.path.append(SCRIPTS)
  return importlib.import_module(f'sow_migrate.{name}')
