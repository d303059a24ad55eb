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
:func:`flax.nnx.sow.tracing.stage`). ``Module.sow`` on a copy, or on a copy
of it that an NNX or JAX transform made inside the call, must find the
module's path from the captured module: this module keeps, per thread, a
stack of active captures (frames) and resolves a module to its frame and
path.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import typing as tp

from jax._src import config as jax_config

from flax.nnx import graphlib
from flax.nnx import module as module_lib
from flax.nnx import statelib
from flax.nnx import variablelib
from flax.nnx.sow import primitive

Module = module_lib.Module
Variable = variablelib.Variable
PathParts = tuple[tp.Hashable, ...]


# ---------------------------------------------------------------------------
# Trace-context scope: keeps JAX caches from reusing a trace across modules
# ---------------------------------------------------------------------------

# A sow's name holds its module's path, which JAX's tracing caches do not see:
# an `nnx.jit` function traced for `blocks[0]` would be reused, with
# `blocks[0]`'s names, for `blocks[1]`, whose graph definition is equal. So
# while a capture traces, this trace-context value is fresh, and it changes
# again after every sow that names a module path: a cached trace is reused
# only if no such sow was traced since it was cached.
scope = jax_config.string_or_object_state(
    name='flax_nnx_capture_compat_scope',
    default=None,
    help=(
        'Internal to flax.nnx.capture_compat: fresh while a capture traces'
        ' and after every path-named sow, so that JAX never reuses a trace'
        ' whose sow names depend on which module was passed.'
    ),
    include_in_trace_context=True,
)
_SCOPE_IDS = itertools.count(1)


def fresh_scope() -> tp.ContextManager[None]:
  """A fresh scope for one capture trace."""
  return scope(next(_SCOPE_IDS))


def renew_scope() -> None:
  """A fresh scope from here on in this trace (after a path-named sow)."""
  scope.set_local(next(_SCOPE_IDS))


# ---------------------------------------------------------------------------
# Frames: one per active capture, on a thread-local stack




@dataclasses.dataclass
class SiteInfo:
  """What one sow site of a frame needs to become a State entry."""

  path: PathParts
  name: str
  var_type: type[Variable]
  kind: str  # 'sow' or 'perturb'
  reduce_fn: tp.Callable[[tp.Any, tp.Any], tp.Any]
  init_fn: tp.Callable[[], tp.Any]


class Frame:
  """One active compat ``capture``: its module paths and its sow sites.

  ``objects`` maps ``id(module)`` to ``(module, path)`` for the *copies* the
  traced function works on; it only lives while the function is traced.
  Everything else is static and outlives the trace.
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
    self.objects: dict[int, tuple[tp.Any, PathParts]] = {}
    self.tokens: dict[int, tuple[tp.Any, PathParts]] = {}
    self.module_paths: list[PathParts] = []
    self.sites: dict[tuple[primitive.Name, type], SiteInfo] = {}

  def accepts(self, path: PathParts, var_type: type[Variable]) -> bool:
    """Whether legacy ``__captures__`` of the module at ``path`` has a slot
    for ``var_type``: the captured types, plus the types ``init`` has there.
    """
    return var_type in self.var_types or var_type in self.init_types.get(
        path, ()
    )

  def path_of(self, obj: tp.Any) -> PathParts | None:
    """``obj``'s path from this frame's root, through NNX transforms."""
    seen = set()
    todo = [obj]
    while todo:
      current = todo.pop()
      if id(current) in seen:
        continue
      seen.add(id(current))
      entry = self.objects.get(id(current))
      if entry is not None and entry[0] is current:
        return entry[1]
      token = _token_of(current)
      entry = self.tokens.get(id(token))
      if entry is not None and entry[0] is token:
        return entry[1]
      todo.extend(_outer_objects(current))
    return None

  def register(self, name, info: SiteInfo) -> None:
    key = (name, info.var_type)
    if key not in self.sites:
      self.sites[key] = info


class _FrameStack(threading.local):

  def __init__(self):
    self.stack: list[Frame] = []


FRAMES = _FrameStack()

def _token_of(module: tp.Any) -> tp.Any:
  """A module's identity token: its ``_pytree__nodes`` mapping object."""
  if not hasattr(module, '__dict__'):
    return None
  return vars(module).get('_pytree__nodes')


def mark(module: Module) -> tp.Any:
  """Gives ``module`` (a private copy) a token of its own and returns it.

  The token is the module's ``_pytree__nodes`` mapping (which attributes are
  data), replaced by an equal but distinct object. Graph definitions and
  pytree structures hold it as a static value, compared by value (so
  ``nnx.graphdef`` and every cache key are unchanged) but handed, as the
  same object, to every copy a transform makes: ``nnx.jit``, ``nnx.vmap``,
  ... in graph or tree mode, and ``jax.jit``, ``jax.vmap``... of modules as
  pytrees. So the token identifies the module across transforms.
  """
  nodes = vars(module).get('_pytree__nodes')
  if nodes is None:
    return None
  for frame in FRAMES.stack:
    entry = frame.tokens.get(id(nodes))
    if entry is not None and entry[0] is nodes:
      return nodes  # a copy of a module an enclosing capture marked
  token = type(nodes)(nodes, copy=True)
  object.__setattr__(module, '_pytree__nodes', token)
  return token


def _outer_objects(obj: tp.Any) -> list[tp.Any]:
  """The objects ``obj`` is a copy of, in the active NNX transforms.

  NNX transforms in graph mode (the default) merge their inputs into copies
  inside an ``nnx.update_context``; while their function runs, the context
  maps each copy to the index of the object it copies.
  """
  stacks = graphlib.GRAPH_CONTEXT.update_context_stacks
  outers = []
  for stack in list(stacks.values()):
    for ctx in reversed(stack):
      inner = getattr(ctx, 'inner_ref_outer_index', None)
      if not inner or obj not in inner:
        continue
      index = inner[obj]
      outer_map = getattr(ctx, 'outer_index_outer_ref', None)
      if outer_map is not None and index in outer_map:
        outers.append(outer_map[index])
  return outers


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



def flat_init(init) -> list[tuple[PathParts, str, type, tp.Any]]:
  """``init``'s entries as ``(module path, name, type, value)``."""
  if init is None:
    return []
  entries = []
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
