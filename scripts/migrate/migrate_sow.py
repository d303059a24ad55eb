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

Usage::

  python scripts/migrate/migrate_sow.py [--target=functional|capture]
      [--diff | --write | --check] [--annotate] [--project-root DIR]
      [--jobs N] [--verbose] PATH...

``--target=capture`` replaces ``y = m(x)`` + ``s = nnx.pop(m, T)`` with
``y, s = nnx.capture(m, T)(x)`` (semantics-preserving); ``--target=functional``
moves to ``flax.nnx.sow``'s ``sow``/``perturb``/``capture``. Consumers are
searched in the whole project, also when only some files are given; whatever
cannot be rewritten safely is left as it is and reported as
``path:line:col: code: reason``. The code lives in ``sow_migrate/``; the
migration guide is ``docs_nnx/guides/migrate_sow.md``.

Exit codes: 0 ok; 1 ``--check`` found changes; 2 usage error; 3 some file
could not be read or parsed; 4 internal error on some file (that file left
untouched); 5 a file to write is not writable (nothing written).
"""

from __future__ import annotations

import os
import sys

if __package__ in (None, ''):
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# pylint: disable=g-import-not-at-top,wrong-import-position
from sow_migrate import analysis as _analysis
from sow_migrate import decide as _decide
from sow_migrate import plan as _plan
from sow_migrate.flags import REASONS, Flag  # noqa: F401 (re-exported)
from sow_migrate.runner import (  # noqa: F401 (re-exported)
  EXIT_CHANGES,
  EXIT_INTERNAL,
  EXIT_OK,
  EXIT_UNREADABLE,
  EXIT_UNWRITABLE,
  EXIT_USAGE,
  Summary,
  main,
  parse_args,
  run,
)


def migrate_source(source: str, *, target: str = 'functional',
                   annotate: bool = False, path: str = '<string>',
                   nnx_capture: str = 'legacy',
                   ) -> tuple[str, list[Flag]]:
  """Migrates one source string on its own, as a one-file project.

  Example::

    new, flags = migrate_source(old)

  Args:
    source: Python code (or a notebook's JSON, or Markdown).
    target: ``'functional'`` or ``'capture'``.
    annotate: add TODO comments above flagged sites.
    path: the name used in flags; its suffix picks the format
      (``.py``, ``.md`` or ``.ipynb``).
    nnx_capture: with ``target='capture'``, the ``nnx.capture`` the code
      will run on: ``'legacy'`` (Flax 0.12.8's; the pops it would break are
      kept) or ``'transform'`` (``flax.nnx.capture_compat``'s).

  Returns:
    The new source and the flagged sites.

  Raises:
    ValueError: if ``source`` does not parse.
  """
  if not path.endswith(('.py', '.md', '.ipynb')):
    path += '.py'
  analysis = _analysis.analyse(path, source.encode('utf-8'), os.getcwd())
  if analysis.error:
    raise ValueError(analysis.error)
  sites = [s for u in analysis.units for s in u.facts.sites]
  classes = [c for u in analysis.units for c in u.facts.classes]
  others = [o for u in analysis.units for o in u.facts.others]
  state_names = {path: set().union(*(u.facts.state_names
                                     for u in analysis.units))}
  project = _decide.Project(sites, classes, others, state_names)
  decisions = _decide.decide(project, target, nnx_capture)
  modes = {s.name: s.mode for s in project.sows if s.name}
  result = _plan.rewrite_file(analysis, decisions, target, annotate, modes)
  flags = sorted({_plan.site_flag(s, decisions[id(s)]) for s in project.sites
                  if decisions[id(s)].action == 'flag'})
  new = source if result.new is None else result.new.decode('utf-8')
  return new, flags


if __name__ == '__main__':
  sys.exit(main())
