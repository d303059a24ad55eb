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
"""One source string migrated on its own, as a one-file project.

The three phases in a row (``analysis``, ``decide``, ``plan``) on a single
document, with nothing written: what ``migrate_sow.migrate_source`` gives
to tests, guides and other tools, without the runner that walks a project.
"""

from __future__ import annotations

import os
import sys

from . import analysis as _analysis
from . import decide as _decide
from . import holders as _holders
from . import libraries as _libraries
from . import plan as _plan
from .flags import Flag


def migrate_source(source: str, *, target: str = 'capture',
                   annotate: bool = False, path: str = '<string>',
                   nnx_capture: str = 'legacy',
                   search_path: list[str] | None = None,
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
    search_path: where the libraries the source imports are found, to read
      the classes its models are made of (``libraries.py``); by default
      ``sys.path``.

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
  analyses, aliases = {path: analysis}, {}
  search = sys.path if search_path is None else search_path
  installed = {}
  calls = _holders.library_calls(
      path, source.encode('utf-8'),
      lambda top: _libraries.installed(top, search, installed))
  _libraries.follow(analyses, aliases, search_path, calls)
  units = [u for a in analyses.values() for u in a.units]
  for unit in units:  # module-level aliases (ModuleList = nnx.List)
    aliases.update(unit.facts.aliases)
  sites = [s for u in units for s in u.facts.sites]
  classes = [c for u in units for c in u.facts.classes]
  others = [o for u in units for o in u.facts.others]
  state_names = {path: set().union(*(u.facts.state_names
                                     for u in analysis.units))}
  project = _decide.Project(sites, classes, others, state_names, aliases)
  decisions = _decide.decide(project, target, nnx_capture)
  modes = {s.name: s.mode for s in project.sows if s.name}
  readers = sorted({_plan.reader_flag(*found)
                    for found in _decide.reader_flags(project, target)
                    if found[0].path == path})
  result = _plan.rewrite_file(analysis, decisions, target, annotate, modes,
                              readers if annotate else ())
  flags = {_plan.site_flag(s, decisions[id(s)]) for s in project.sites
           if decisions[id(s)].action == 'flag' and not s.library}
  flags |= set(readers)
  flags = sorted(flags)
  new = source if result.new is None else result.new.decode('utf-8')
  return new, flags
