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
"""Module paths inside a staged call: which module copy has which path.

A staged call (``capture``, ``plant``, ``perturb``, ``nnx.capture``) runs its
function on copies of the graph nodes of its arguments (see
:mod:`flax.nnx.sow.lift.graph_calls`). ``Module.sow`` on a copy, or on a copy
of it that an NNX or JAX transform made inside the call, must find the module's
path: this module keeps, per thread, a stack of active calls (frames), marks
each copy with its path in its frame, and resolves a module to its frame and
path.

Naming, for the functional transforms (:func:`roots`): if the function is a
Module (or a bound method of one), paths are from it; otherwise from the
first positional argument, if it is a graph node. A graph node in any other
argument gets its argument's position as a prefix: the index among the
positional arguments, or the keyword's name. So
``capture(f)(model, x, cache=c)`` names ``Module.sow(T, 'h', ...)`` of
``model.blocks[0]`` ``('blocks', 0, 'h')`` and that of ``c.layers[0]``
``('cache', 'layers', 0, 'h')``. A module the function closes over has no
path: its ``Module.sow`` raises an error that says to pass it as an argument.
Inside ``nnx.capture``, its own frame is the innermost and wins.

Example::

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> from flax.nnx import capture_compat
  >>> from flax.nnx.sow import capture
  >>> class Block(nnx.Module):
  ...   def __call__(self, x):
  ...     self.sow(nnx.Intermediate, 'h', 2 * x)
  ...     return x
  >>> class Model(nnx.Module):
  ...   def __init__(self):
  ...     self.blocks = nnx.List([Block(), Block()])
  ...   def __call__(self, x):
  ...     for block in self.blocks:
  ...       x = block(x)
  ...     return x
  >>> def f(model, x, cache):
  ...   return cache(model(x))
  >>> with capture_compat.install():  # always so in Flax itself
  ...   _, collected = capture(f)(Model(), jnp.ones(2), cache=Block())
  >>> list(collected)
  [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('cache', 'h')]
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import typing as tp


from flax.nnx import graphlib
from flax.nnx.sow.lift import graph_nodes
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import thread_stack

PathParts = tuple[tp.Hashable, ...]


# ---------------------------------------------------------------------------
# Frames: one per active staged call, on a thread-local stack
# ---------------------------------------------------------------------------


class Frame:
  """One active staged call that names ``Module.sow`` sites by path.

  The base frame is the functional transforms' one: it accepts every
  Variable type, and ``Module.sow`` there is the functional ``sow``.
  ``nnx.capture`` subclasses it to collect only its types into States.

  Attributes:
    id: identifies the frame in the marks of its module copies.
    modules: ``(path, module copy)`` while the call runs.
    module_paths: their paths, kept after the call.
    taps: the active taps (see :mod:`flax.nnx.sow.lift.taps`), innermost last.
  """

  functional = True

  def __init__(self, frame_id: tp.Hashable = None):
    # A functional frame's id is its thread and its depth among the
    # functional frames of the thread: the same for every call at that
    # depth, so that an `nnx.jit` inside the call, keyed by the marks in the
    # graph definition, is traced once per module path rather than once per
    # call; and another for every thread, since an eager call marks the
    # caller's own modules, which other threads may be capturing too.
    if frame_id is None:
      frame_id = (
          threading.get_ident(), -1 - sum(f.functional for f in FRAMES.stack)
      )
    self.id = frame_id
    self.modules: list[tuple[PathParts, tp.Any]] = []
    self.module_paths: list[PathParts] = []
    self.taps: list[tp.Any] = []

  def accepts(self, path: PathParts, var_type: type) -> bool:
    """Whether a ``Module.sow`` of ``var_type`` at ``path`` is collected."""
    del path, var_type
    return True

  def path_of(self, obj: tp.Any) -> PathParts | None:
    """``obj``'s path in this frame, or ``None``."""
    mark_ = _mark_of(obj)
    return None if mark_ is None else mark_.path_in(self.id)


# The frames of the calls running on this thread, innermost last.
FRAMES: thread_stack.ThreadStack[Frame] = thread_stack.ThreadStack()


def innermost_functional() -> Frame | None:
  for frame in reversed(FRAMES.stack):
    if frame.functional:
      return frame
  return None


# ---------------------------------------------------------------------------
# Path marks: how a module copy knows its path, through every transform
# ---------------------------------------------------------------------------

# The attribute of a module that holds its mark. NNX leaves the attributes
# named `_pytree__*` out of what a module shows its user (the keys of an
# `nnx.Dict`, its repr), while flattening them like any other attribute.
_MARK_ATTRIBUTE = '_pytree__sow_paths'
# An eager call marks the caller's own modules, which calls in other threads
# may be marking and walking too. Marking reads the mark and writes it back,
# and adding or removing the attribute changes the size of the module's
# `__dict__`, which a walk of it in another thread must not see: so marking,
# unmarking and this module's walks of modules hold this lock. While any call
# holds an entry in a module's mark, the attribute stays: what other calls
# change is its value, never the size of the dictionary that the NNX code
# inside a running call (an `nnx.jit` splitting the model, say) may walk.
_MARKS_LOCK = threading.RLock()


@dataclasses.dataclass(frozen=True)
class PathMark:
  """A static attribute of the module copies a staged call runs on.

  For each enclosing frame (innermost last): its id and the module's path
  there. Being static, it is part of the module's graph definition and pytree
  structure, so every copy that an NNX transform (graph or tree mode) or a
  JAX transform of modules as pytrees makes inside the call carries it, and
  the caches of JAX and NNX tell apart modules at different paths (an
  ``nnx.jit`` traced for ``blocks[0]`` is not reused, with its sow names, for
  ``blocks[1]``) and frames. It is only ever set on a call's private copies,
  and removed from them (and from graph nodes the call returns) when the
  call ends.
  """

  paths: tuple[tuple[tp.Hashable, PathParts], ...]

  def path_in(self, frame_id: tp.Hashable) -> PathParts | None:
    for entry_id, path in self.paths:
      if entry_id == frame_id:
        return path
    return None


def _mark_of(obj: tp.Any) -> PathMark | None:
  attributes = getattr(obj, '__dict__', None)
  if attributes is None:
    return None
  mark_ = attributes.get(_MARK_ATTRIBUTE)
  return mark_ if isinstance(mark_, PathMark) else None


def mark(module: tp.Any, frame: Frame, path: PathParts) -> None:
  """Marks ``module`` with its ``path`` in ``frame``."""
  if getattr(module, '__dict__', None) is None:
    return  # a module without attributes cannot sow by path
  with _MARKS_LOCK:
    previous = _mark_of(module)
    entries = () if previous is None else previous.paths
    # Written into the instance dictionary: the mark is neither data nor a
    # user attribute, and must not go through the module's __setattr__.
    vars(module)[_MARK_ATTRIBUTE] = PathMark((*entries, (frame.id, path)))


def unmark(
    nodes: tp.Iterable[tp.Any], frame: Frame, refused: bool = False
) -> None:
  """Removes ``frame``'s entry from the marks of ``nodes`` and the graph
  nodes they reach; with ``refused``, also the refusing ``__captures__``
  (see :func:`run_in_frame`)."""
  with _MARKS_LOCK:
    for _, node in graphlib.iter_graph(list(nodes), graph=True):
      mark_ = _mark_of(node)
      if mark_ is None or mark_.path_in(frame.id) is None:
        continue
      rest = tuple(entry for entry in mark_.paths if entry[0] != frame.id)
      if rest:
        vars(node)[_MARK_ATTRIBUTE] = PathMark(rest)
      else:
        del vars(node)[_MARK_ATTRIBUTE]
        if refused:  # the last call that marked it: no call refuses now
          _allow_legacy_sows(node)


def clear_marks(tree: tp.Any) -> None:
  """Removes the marks of the graph nodes in ``tree`` (and those they reach).

  For the modules in sown values: each is rebuilt from the sow's pytree
  structure, of which the mark of the module it was sown from is a part, so
  it would carry the mark of a call that has ended. No frame holds them.
  """
  with _MARKS_LOCK:
    for _, node in graphlib.iter_graph(graph_nodes.graph_nodes_in(tree),
                                       graph=True):
      if _mark_of(node) is not None:
        del vars(node)[_MARK_ATTRIBUTE]


def resolve(
    obj: tp.Any, var_type: type
) -> tuple[Frame, PathParts, bool] | None:
  """The frame a ``Module.sow`` on ``obj`` goes to, its path there, and
  whether the frame collects ``var_type``.

  The innermost frame that holds ``obj`` and collects ``var_type`` wins;
  failing that, the innermost frame that holds ``obj`` (the sow then only
  reaches an enclosing functional capture); ``None`` if no frame holds
  ``obj``. A functional frame collects every type, and the frames outside it
  are not searched: its sows are its own.
  """
  fallback = None
  for frame in reversed(FRAMES.stack):
    path = frame.path_of(obj)
    if path is None:
      continue
    if frame.functional:
      return fallback or (frame, path, True)
    if frame.accepts(path, var_type):
      return frame, path, True
    if fallback is None:
      fallback = (frame, path, False)
  return fallback


def refuse_unreachable(module: tp.Any, method: str) -> None:
  """Raises if a functional staged call runs ``module.<method>`` but the
  module is none of its arguments' (a closure, or made inside the call)."""
  if innermost_functional() is None:
    return
  raise ValueError(
      f'Module.{method} was called on a {type(module).__name__} that is not'
      ' reachable from the arguments of the function being captured, planted'
      ' or perturbed (a module in a closure, or one created inside the'
      ' function), so it has no path to be named by. Pass it as an argument:'
      ' its sows are then named (*path, name) from it.'
  )


def sow_name(path: PathParts, name: str) -> tuple[str | int, ...]:
  """The sow name of ``Module.sow(T, name, ...)`` at ``path``."""
  parts: list[str | int] = []
  for part in (*path, name):
    checked = primitive.name_part(part)
    parts.append(repr(part) if checked is None else checked)
  return tuple(parts)


# ---------------------------------------------------------------------------
# Roots: which graph nodes of a call have which path prefix
# ---------------------------------------------------------------------------


def sow_methods() -> tuple[tp.Any, tp.Any]:
  """What ``Module.sow`` and ``Module.perturb`` are now.

  On a released Flax, ``capture_compat.install`` changes them, and a trace
  made with Flax's own writes attributes instead of sowing: a cache of
  traces that run modules is keyed by them.
  """
  # Imported here: `flax.nnx.module` itself delegates to this package.
  # pylint: disable-next=g-import-not-at-top
  from flax.nnx import module as module_lib

  return module_lib.Module.sow, module_lib.Module.perturb


def modules_of(root: tp.Any) -> list[tuple[PathParts, tp.Any]]:
  """``(path, module)`` for every module of ``root``.

  A module held at several paths is yielded once, at its first path, by
  :func:`nnx.iter_modules` itself.
  """
  # Imported here: `flax.nnx.module` itself delegates to this package.
  # pylint: disable-next=g-import-not-at-top
  from flax.nnx import module as module_lib

  try:
    with _MARKS_LOCK:  # see there
      return [
          (tuple(path), module)
          for path, module in module_lib.iter_modules(root)
      ]
  except Exception:  # pylint: disable=broad-except
    # Not a graph node: nothing to name by path.
    return []


def roots(node, args, kwargs) -> list[tuple[PathParts, tp.Any]]:
  """``(prefix, argument)`` for every argument that may hold modules.

  ``node`` is the callable's graph node, or ``None`` (see the naming rule in
  this module's docstring).
  """
  found: list[tuple[PathParts, tp.Any]] = []
  if node is not None:
    found.append(((), node))
  for i, arg in enumerate(args):
    prefix = () if node is None and i == 0 else (i,)
    found.append((prefix, arg))
  for name, arg in kwargs.items():
    found.append(((name,), arg))
  return found


def modules_of_roots(
    found: tp.Iterable[tuple[PathParts, tp.Any]],
) -> list[tuple[PathParts, tp.Any]]:
  """Every module under ``found``'s roots, each once, at its first path."""
  modules: list[tuple[PathParts, tp.Any]] = []
  seen: set[int] = set()
  with _MARKS_LOCK:  # the walks, see there
    for prefix, root in found:
      if not graph_nodes.holds_graph_nodes(root):
        continue
      for path, module in modules_of(root):
        if id(module) not in seen:
          seen.add(id(module))
          modules.append(((*prefix, *path), module))
  return modules


# ---------------------------------------------------------------------------
# Flax's own Module.sow inside a functional frame
# ---------------------------------------------------------------------------

# The attribute through which Flax 0.12.8's `Module.sow` and `Module.perturb`
# find the collections `nnx.capture` installed on a module.
_LEGACY_CAPTURES = '__captures__'


# What marks a function as one that runs on this transform: ``Module.sow``,
# ``Module.perturb`` and ``nnx.capture`` as ``flax.nnx.capture_compat``
# implements them, and Flax's own where its ``module.py`` hands them to it
# (the patch series marks them there). Their author declares it: nothing
# here reads a function's code.
ON_TRANSFORM = '__sow_transform__'


def mark_on_transform(fn: tp.Callable[..., tp.Any]) -> None:
  """Declares that ``fn`` runs on this transform (see :data:`ON_TRANSFORM`)."""
  setattr(fn, ON_TRANSFORM, True)


def runs_on_transform(fn: tp.Any) -> bool:
  """Whether ``fn``, or what it wraps (``functools.wraps``), runs on this
  transform: was declared so by :func:`mark_on_transform`."""
  try:
    unwrapped = inspect.unwrap(fn)
  except ValueError:  # a cycle of __wrapped__
    unwrapped = fn
  return any(
      getattr(f, ON_TRANSFORM, False) is True for f in (fn, unwrapped)
  )


def legacy_sow_methods() -> bool:
  """Whether ``Module.sow`` or ``Module.perturb`` is not this transform's:
  Flax 0.12.8's own, which writes into a module's ``__captures__`` (or an
  attribute) instead of sowing, as on a released Flax before
  ``capture_compat.install()``, or a wrapper of it.

  Decided by identity (:func:`runs_on_transform`): a wrapper made with
  ``functools.wraps`` is what it wraps.
  """
  return not all(runs_on_transform(method) for method in sow_methods())


class _RefusedCaptures:
  """The ``__captures__`` of a module in a functional frame while
  ``Module.sow`` is Flax 0.12.8's own.

  Flax's ``Module.sow`` and ``Module.perturb`` iterate a module's
  ``__captures__`` when it has one: this one raises there, before anything
  is written, rather than let the sow write an attribute onto the caller's
  model while the capture returns nothing. Hashable, as a static attribute
  of the module's graph definition, so that copies an NNX transform makes
  inside the call refuse too.
  """

  def __iter__(self):
    raise ValueError(
        'Module.sow (or Module.perturb) was called inside a functional'
        ' capture, plant, perturb or tap (flax.nnx.sow), but Module.sow is'
        " Flax's own, which writes an attribute onto the module instead of"
        ' sowing. Call flax.nnx.capture_compat.install() first (or run the'
        ' capture inside `with capture_compat.install():`): Module.sow sites'
        ' are then sows named (*module_path, name).'
    )

  def __repr__(self):
    return '_RefusedCaptures()'


_REFUSED_CAPTURES = _RefusedCaptures()


def refuse_legacy_sows(nodes: tp.Iterable[tp.Any]) -> None:
  with _MARKS_LOCK:
    for node in nodes:
      if getattr(node, '__dict__', None) is not None:
        vars(node).setdefault(_LEGACY_CAPTURES, _REFUSED_CAPTURES)


def _allow_legacy_sows(node: tp.Any) -> None:
  attributes = getattr(node, '__dict__', None)
  if (attributes is not None
      and attributes.get(_LEGACY_CAPTURES) is _REFUSED_CAPTURES):
    del attributes[_LEGACY_CAPTURES]
