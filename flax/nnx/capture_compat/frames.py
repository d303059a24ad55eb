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

A compat capture runs its function on copies of the captured module (see
:func:`flax.nnx.sow.tracing.staged`). ``Module.sow`` on a copy, or on a copy
of it that an NNX or JAX transform made inside the call, must find the
module's path from the captured module: this module keeps, per thread, a
stack of active captures (frames) and resolves a module to its frame and
path.
"""

from __future__ import annotations

import dataclasses
import threading
import typing as tp


from flax.nnx import graphlib
from flax.nnx import module as module_lib
from flax.nnx import statelib
from flax.nnx import variablelib
from flax.nnx.sow import primitive

Module = module_lib.Module
Variable = variablelib.Variable
PathParts = tuple[tp.Hashable, ...]


# ---------------------------------------------------------------------------
# Frames: one per active capture, on a thread-local stack




@dataclasses.dataclass(frozen=True)
class SiteInfo:
  """What one sow site of a frame needs to become a State entry.

  Carried by the site's marker (``meta``), so a capture finds it in the
  program itself, also in the body of an ``nnx.jit`` whose trace JAX reused
  from an earlier capture with the same :attr:`Frame.key`.
  """

  frame: tp.Hashable  # the key of the frame that collects it
  path: PathParts
  name: str
  var_type: type[Variable]
  kind: str  # 'sow' or 'perturb'
  reduce_fn: tp.Callable[[tp.Any, tp.Any], tp.Any]
  init_fn: tp.Callable[[], tp.Any]


class Frame:
  """One active compat ``capture``: its module paths and its sow sites.

  Everything in it is static and outlives the trace: the module copies know
  their paths themselves (see :class:`PathMark`).
  """

  def __init__(
      self,
      var_types: tuple[type[Variable], ...],
      init_types: dict[PathParts, set[type[Variable]]],
      method_outputs: type[Variable] | None,
  ):
    self.var_types = var_types
    self.init_types = init_types
    self.method_outputs = method_outputs
    self.module_paths: list[PathParts] = []
    # What decides which sows the traced program holds, and nothing that
    # differs between two calls of the same capture: the key is part of the
    # module copies' graph definitions (see `PathMark`), so a per-call value
    # would make every `nnx.jit` inside trace and compile again on every
    # call that is traced again (one closing over arrays, say).
    self.config = (
        var_types,
        frozenset(
            (path, frozenset(types)) for path, types in init_types.items()
        ),
        method_outputs,
    )
    self.depth: int | None = None  # set when pushed

  @property
  def key(self) -> tp.Hashable:
    """Tells this frame apart from the others on the stack, and from
    frames of another configuration."""
    assert self.depth is not None, 'the frame is not pushed'
    return (self.depth, self.config)

  def accepts(self, path: PathParts, var_type: type[Variable]) -> bool:
    """Whether legacy ``__captures__`` of the module at ``path`` has a slot
    for ``var_type``: the captured types, plus the types ``init`` has there.
    """
    return var_type in self.var_types or var_type in self.init_types.get(
        path, ()
    )

  def path_of(self, obj: tp.Any) -> PathParts | None:
    """``obj``'s path from this frame's root, or ``None``."""
    mark = _mark_of(obj)
    return None if mark is None else mark.path_in(self.key)

  def sites_in(
      self, jaxpr
  ) -> dict[tuple[primitive.Name, type], SiteInfo]:
    """The sites of ``jaxpr`` (at any depth) this frame collects, by
    ``(sow name, Variable type)``, the first of each in program order."""
    sites: dict[tuple[primitive.Name, type], SiteInfo] = {}
    for eqn in primitive.sow_equations(jaxpr):
      info = eqn.params.get('meta')
      if isinstance(info, SiteInfo) and info.frame == self.key:
        sites.setdefault((eqn.params['sow_name'], info.var_type), info)
    return sites


class _FrameStack(threading.local):

  def __init__(self):
    self.stack: list[Frame] = []

  def push(self, frame: Frame) -> None:
    frame.depth = len(self.stack)
    self.stack.append(frame)

  def pop(self) -> Frame:
    return self.stack.pop()


FRAMES = _FrameStack()


# ---------------------------------------------------------------------------
# Path marks: how a module copy knows its path, through every transform
# ---------------------------------------------------------------------------

# The attribute of a module copy that holds its mark.
_MARK_ATTRIBUTE = '_nnx_capture_paths'


@dataclasses.dataclass(frozen=True)
class PathMark:
  """A static attribute of the module copies a capture runs on.

  For each enclosing capture (innermost last): its frame key and the module's
  path from its captured module. Being static, it is part of the module's
  graph definition and pytree structure, so every copy that an NNX transform
  (graph or tree mode) or a JAX transform of modules as pytrees makes inside
  the call carries it, and the caches of JAX and NNX tell apart modules at
  different paths (an ``nnx.jit`` traced for ``blocks[0]`` is not reused,
  with its sow names, for ``blocks[1]``) and captures (a trace made for
  another capture, which registered its sows there, is not reused). It is
  only ever set on a capture's private copies, and removed from them (and
  from graph nodes the call returns) when the call ends.
  """

  paths: tuple[tuple[tp.Hashable, PathParts], ...]

  def path_in(self, frame_key: tp.Hashable) -> PathParts | None:
    for entry_key, path in self.paths:
      if entry_key == frame_key:
        return path
    return None


def _mark_of(obj: tp.Any) -> PathMark | None:
  attributes = getattr(obj, '__dict__', None)
  if attributes is None:
    return None
  mark = attributes.get(_MARK_ATTRIBUTE)
  return mark if isinstance(mark, PathMark) else None


def mark(module: tp.Any, frame: Frame, path: PathParts) -> None:
  """Marks ``module`` (a private copy) with its ``path`` in ``frame``."""
  if getattr(module, '__dict__', None) is None:
    return  # a module without attributes cannot sow by path
  previous = _mark_of(module)
  entries = () if previous is None else previous.paths
  # Written into the instance dictionary: the mark is neither data nor a
  # user attribute, and must not go through the module's __setattr__.
  vars(module)[_MARK_ATTRIBUTE] = PathMark((*entries, (frame.key, path)))


def unmark(nodes: tp.Iterable[tp.Any], frame: Frame) -> None:
  """Removes ``frame``'s entry from the marks of ``nodes`` and the graph
  nodes they reach."""
  for _, node in graphlib.iter_graph(list(nodes), graph=True):
    mark_ = _mark_of(node)
    if mark_ is None or mark_.path_in(frame.key) is None:
      continue
    rest = tuple(entry for entry in mark_.paths if entry[0] != frame.key)
    if rest:
      vars(node)[_MARK_ATTRIBUTE] = PathMark(rest)
    else:
      del vars(node)[_MARK_ATTRIBUTE]


def resolve(
    obj: tp.Any, var_type: type[Variable]
) -> tuple[Frame, PathParts, bool] | None:
  """The frame a sow on ``obj`` goes to, its path there, and whether the
  frame collects ``var_type``.

  The innermost frame that holds ``obj`` and collects ``var_type`` wins;
  failing that, the innermost frame that holds ``obj`` (the sow then only
  reaches an enclosing ``flax.nnx.sow.capture``); ``None`` if no frame holds
  ``obj``.
  """
  fallback = None
  for frame in reversed(FRAMES.stack):
    path = frame.path_of(obj)
    if path is None:
      continue
    if frame.accepts(path, var_type):
      return frame, path, True
    if fallback is None:
      fallback = (frame, path, False)
  return fallback


def sow_name(path: PathParts, name: str) -> primitive.Name:
  parts = []
  for part in (*path, name):
    if isinstance(part, str) or (
        isinstance(part, int) and not isinstance(part, bool)
    ):
      parts.append(part)
    else:
      parts.append(repr(part))
  return tuple(parts)



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


def module_paths(root: tp.Any) -> list[tuple[PathParts, tp.Any]]:
  """``(path, module)`` for every module of ``root``.

  A module held at several paths is yielded once, at its first path, by
  :func:`nnx.iter_modules` itself.
  """
  try:
    return [
        (tuple(path), module)
        for path, module in module_lib.iter_modules(root)
    ]
  except Exception:  # pylint: disable=broad-except
    # Not a graph node: like legacy, nothing is captured by path.
    return []
