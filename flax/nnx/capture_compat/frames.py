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
"""Frames of ``capture_compat.capture``: which module copy has which path.

The path machinery (frames on a thread-local stack, each with the module
paths of its call, resolving a module to its frame) is the sow transform's own
(:mod:`flax.nnx.sow.lift.module_paths`); a compat frame collects only its
Variable types (and ``init``'s), whose sites become the States ``capture``
returns.
"""

from __future__ import annotations

import dataclasses
import threading
import typing as tp

from flax.nnx import statelib
from flax.nnx import variablelib
from flax.nnx.sow.lift import module_paths as paths_lib

Variable = variablelib.Variable
PathParts = paths_lib.PathParts

FRAMES = paths_lib.FRAMES
resolve = paths_lib.resolve
sow_name = paths_lib.sow_name


@dataclasses.dataclass(frozen=True)
class SiteInfo:
  """What one sow site of a frame needs to become a State entry.

  Carried by the site's marker (``meta``), so a capture finds it in the
  program itself, also in the body of an ``nnx.jit`` whose trace JAX reused
  from an earlier capture with the same frame id.
  """

  frame: tp.Hashable  # the id of the frame that collects it
  path: PathParts
  name: str
  var_type: type[Variable]
  kind: str  # 'sow' or 'perturb'
  reduce_fn: tp.Callable[[tp.Any, tp.Any], tp.Any]
  init_fn: tp.Callable[[], tp.Any]


class Frame(paths_lib.Frame):
  """One active compat ``capture``: the types it collects.

  Its id is static and outlives the trace: the sow markers say what each
  site is and which frame collects it (:class:`SiteInfo`).
  """

  functional = False

  def __init__(
      self,
      var_types: tuple[type[Variable], ...],
      init_types: dict[PathParts, set[type[Variable]]],
      method_outputs: type[Variable] | None,
  ):
    # The id is in the markers of the sites the frame collects (`SiteInfo`),
    # so it holds what decides which sows the program has, and nothing that
    # differs between two calls of the same capture: a per-call id would
    # make every `nnx.jit` inside compile again on every call. Its depth
    # among the compat frames tells nested captures apart, and its thread
    # the captures of other threads.
    depth = sum(not f.functional for f in FRAMES.stack)
    super().__init__((
        'nnx.capture',
        threading.get_ident(),
        depth,
        var_types,
        frozenset(
            (path, frozenset(types)) for path, types in init_types.items()
        ),
        method_outputs,
    ))
    self.var_types = var_types
    self.init_types = init_types
    self.method_outputs = method_outputs

  def accepts_type(self, var_type: type[Variable]) -> bool:
    return var_type in self.var_types or any(
        var_type in types for types in self.init_types.values())

  def accepts(self, path: PathParts, var_type: type[Variable]) -> bool:
    """Whether legacy ``__captures__`` of the module at ``path`` has a slot
    for ``var_type``: the captured types, plus the types ``init`` has there.
    """
    return var_type in self.var_types or var_type in self.init_types.get(
        path, ()
    )


def flat_init(init) -> list[tuple[PathParts, tp.Hashable, type, tp.Any]]:
  """``init``'s entries as ``(module path, name, type, value)``."""
  if init is None:
    return []
  entries: list[tuple[PathParts, tp.Hashable, type, tp.Any]] = []
  for path, variable in statelib.to_flat_state(init):
    if not isinstance(variable, (Variable, variablelib.HijaxVariable)):
      continue
    entries.append(
        (tuple(path[:-1]), path[-1], variable.var_type, variable.get_value())
    )
  return entries
