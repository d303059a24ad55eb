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
"""Migrates Flax NNX ``Module.sow``/``nnx.capture`` code (a libcst codemod).

Usage (``migrate-sow`` once the project is installed with its ``migrate``
extra)::

  python scripts/migrate/migrate_sow.py [--target=capture|functional]
      [--diff | --write | --check] [--annotate] [--project-root DIR]
      [--jobs N] [--no-progress] [--quiet] [--verbose] PATH...

The default target keeps ``Module.sow``/``Module.perturb`` (sites of the sow
transform, named by module path) and replaces ``y = m(x)`` + ``s =
nnx.pop(m, T)`` with ``y, s = nnx.capture(m, T)(x)``; every other reader of
sown values is reported. ``--target=functional`` also moves a sow to
``flax.nnx.sow``'s ``sow`` where that keeps every name. Readers are searched
in the whole project, also when only some files are given; whatever cannot
be rewritten safely is left as it is and reported as
``path:line:col: code: reason``. The code lives in ``sow_migrate/``; the
migration guide is ``docs_nnx/guides/migrate_sow.md``.

Exit codes: 0 ok; 1 ``--check`` found changes; 2 usage error (or libcst
missing); 3 some file could not be read or parsed; 4 internal error on some
file (that file left untouched); 5 a file to write is not writable (nothing
written).
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# pylint: disable=g-import-not-at-top,wrong-import-position
from sow_migrate import cli

if __name__ == '__main__':
  sys.exit(cli.main())

# As a module (tests, guides): the codemod's API, which needs libcst.
from sow_migrate.flags import REASONS, Flag  # noqa: F401,E402 (re-exported)
from sow_migrate.cli import main, parse_args  # noqa: F401,E402
from sow_migrate.runner import (  # noqa: F401,E402 (re-exported)
  EXIT_CHANGES,
  EXIT_INTERNAL,
  EXIT_OK,
  EXIT_UNREADABLE,
  EXIT_UNWRITABLE,
  EXIT_USAGE,
  Summary,
  run,
)
from sow_migrate.source import migrate_source  # noqa: F401,E402 (re-exported)
