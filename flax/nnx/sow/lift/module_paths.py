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
"""Module paths inside a call: which module is at which path.

A call of ``capture``, ``plant``, ``perturb`` or ``nnx.capture`` runs its
function on graph nodes: the caller's own when eager, copies it made when
staged (see :mod:`flax.nnx.sow.lift.graph_calls`). ``Module.sow`` on one of
them must find the module's path. This module keeps, per thread, a stack of
active calls (frames); each frame knows its roots and, built on first use
and for that call only, a map from each module it reaches to its path (and
from each array its Variables hold to the Variable's path). Nothing is
written onto any module: ``nnx.split(model)`` inside the call is what it is
outside, and nothing of the call remains on any object after it.

A copy of a module made inside the call by a JAX or NNX transformation
(``nnx.jit``, ``nnx.vmap``, ``nnx.scan``, ``jax.jit`` of a module as a
pytree) is none of the frame's modules. Its ``Module.sow`` is *deferred*
(:mod:`flax.nnx.sow.transform.deferred`), named where the program is bound,
by the first of:

1. the NNX transform's own record: in graph mode, each NNX transform keeps,
   in its update context, the index of each copy among what it split, and
   what it split; the deferred sow carries ``(context tag, index)`` of each
   context between the copy and the call's objects (:func:`context_chain`),
   and where the program is bound inside that context (eagerly), the index
   gives the module the copy was made from;
2. its anchors: the values of some of the copy's Variables, carried as
   operands; their origins (the caller's arrays eagerly, the staged copies'
   inputs when staged) are looked up in the frames' maps, which give the
   Variables' paths and so the module's;
3. when staged, what the record of 1. gave when the sow was staged, if the
   sow occurs once in the program (JAX reused its trace for no other
   module).

JAX may reuse one trace for several modules of the same structure (one
``nnx.jit`` for every block): the names are found anew each time the
program is bound, never written into the trace. Where none of the three
tells, the sow is refused with an error naming the module.

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

The example of :func:`flax.nnx.capture_compat.install` shows these names.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import threading
import typing as tp

import jax

from flax.nnx import graphlib
from flax.nnx.sow.lift import class_hooks
from flax.nnx.sow.lift import graph_nodes
from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import deferred as deferred_lib
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import thread_stack

PathParts = tuple[tp.Hashable, ...]


# ---------------------------------------------------------------------------
# Frames: one per active staged call, on a thread-local stack
# ---------------------------------------------------------------------------


class Frame:
  """One active call that names ``Module.sow`` sites by path.

  The base frame is the functional transforms' one: it accepts every
  Variable type, and ``Module.sow`` there is the functional ``sow``.
  ``nnx.capture`` subclasses it to collect only its types into States.

  Attributes:
    id: identifies the frame in the sites it collects (``nnx.capture``).
    roots: ``(path prefix, graph node)`` of the call (see :func:`roots`).
    taps: the active taps (see :mod:`flax.nnx.sow.lift.taps`), innermost last.
  """

  functional = True

  def __init__(self, frame_id: tp.Hashable = None):
    if frame_id is None:
      frame_id = (
          threading.get_ident(), -1 - sum(f.functional for f in FRAMES.stack)
      )
    self.id = frame_id
    self.roots: list[tuple[PathParts, tp.Any]] = []
    self.taps: list[tp.Any] = []
    self._modules: list[tuple[PathParts, tp.Any]] | None = None
    self._module_index: dict[int, PathParts] = {}
    self._variables: dict[int, list[PathParts]] | None = None
    self._held: list[tp.Any] = []
    self._kept_paths: list[PathParts] | None = None
    self._staged: dict[int, tuple[tp.Any, PathParts]] = {}

  def start(self, found: tp.Iterable[tuple[PathParts, tp.Any]]) -> None:
    """Sets the call's roots; the maps are built when first needed."""
    self.roots = list(found)
    self._kept_paths = None
    self._modules = None
    self._module_index = {}
    self._variables = None
    self._held = []

  @property
  def modules(self) -> list[tuple[PathParts, tp.Any]]:
    """``(path, module)`` for every module the roots reach, each once."""
    if self._modules is None:
      self._modules = modules_of_roots(self.roots)
      self._module_index = {id(m): path for path, m in self._modules}
    return self._modules

  @property
  def module_paths(self) -> list[PathParts]:
    if self._kept_paths is not None:
      return self._kept_paths
    return [path for path, _ in self.modules]

  def release(self) -> None:
    """Drops the call's objects, at the end of a staged call: its copies
    hold the trace's tracers, which must not outlive it. The module paths
    stay (``nnx.capture`` files its States by them)."""
    if not self.functional:
      self.modules  # pylint: disable=pointless-statement
    if self._modules is not None:
      self._kept_paths = [path for path, _ in self._modules]
    self.roots = []
    self._modules = None
    self._module_index = {}
    self._variables = None
    self._held = []

  def note_staged(self, pending: tp.Any, holder: tp.Any) -> None:
    """Notes the path of the module a deferred sow was staged on, as its
    NNX contexts led to it then (see :func:`path_in`)."""
    path = self.path_of(holder)
    if path is not None:
      self._staged[id(pending)] = (pending, path)

  def staged_path(self, pending: tp.Any) -> PathParts | None:
    found = self._staged.get(id(pending))
    return None if found is None or found[0] is not pending else found[1]

  def paths_now(self, value: tp.Any) -> list[PathParts]:
    """:meth:`variable_paths` as the map has it now (no new look)."""
    if self._variables is None:
      return []
    return self._variables.get(id(value), [])

  def accepts(self, path: PathParts, var_type: type) -> bool:
    """Whether a ``Module.sow`` of ``var_type`` at ``path`` is collected."""
    del path, var_type
    return True

  def accepts_type(self, var_type: type) -> bool:
    """Whether a ``Module.sow`` of ``var_type`` is collected at some path."""
    del var_type
    return True

  def path_of(self, obj: tp.Any) -> PathParts | None:
    """``obj``'s path in this frame, or ``None``."""
    if not self.roots:
      return None
    self.modules  # pylint: disable=pointless-statement
    return self._module_index.get(id(obj))

  def variable_paths(self, value: tp.Any) -> list[PathParts]:
    """The paths of the Variables of this frame's modules that hold
    ``value`` (an array, by identity), or ``[]``.

    The map is built on first use (for a staged call, as it starts: see
    :func:`~flax.nnx.sow.lift.taps.run_in_frame`) and extended after a miss
    with the values the Variables hold then: the call may have given them
    new ones, and a program bound before that still reads the old.
    """
    if isinstance(value, KnownOrigin):
      return list(value.paths.get(id(self), ()))
    if not self.roots:
      return []
    if self._variables is None:
      self._variables = {}
      self._index_variables()
    found = self._variables.get(id(value))
    if found is None and value is not None:
      self._index_variables()
      found = self._variables.get(id(value))
    if found is None and isinstance(value, jax.core.Tracer):
      # A tracer of a trace that is not current (a module closed over by a
      # custom_vjp's forward under grad): the array it stands for.
      underlying = _jax.traced_value(value)
      if underlying is not None:
        return self.variable_paths(underlying)
    return found or []

  def _index_variables(self) -> None:
    index = self._variables
    assert index is not None
    for prefix, root in self.roots:
      if not graph_nodes.holds_graph_nodes(root):
        continue
      for path, variable in _variables_of(root):
        for leaf in jax.tree_util.tree_leaves(variable.get_raw_value()):
          paths = index.setdefault(id(leaf), [])
          full = (*prefix, *path)
          if full not in paths:
            paths.append(full)
            self._held.append(leaf)  # so that an identity is not reused

  def holder_path(
      self, anchors: tp.Sequence[PathParts], origins: tp.Sequence[tp.Any]
  ) -> PathParts | None:
    """The path of the module of this frame whose Variables at ``anchors``
    (paths from the module) hold the arrays ``origins`` (``None``:
    unknown), or ``None`` if no anchor is one of this frame's.

    Raises:
      ValueError: the anchors point at different modules (Variables
        shared between modules under the same name).
    """
    found: set[PathParts] | None = None
    seen: set[PathParts] = set()
    for anchor, origin in zip(anchors, origins):
      if origin is None:
        continue
      candidates = {
          path[:len(path) - len(anchor)]
          for path in self.variable_paths(origin)
          if len(path) >= len(anchor)
          and tuple(path[len(path) - len(anchor):]) == tuple(anchor)
      }
      if not candidates:
        continue
      seen |= candidates
      found = candidates if found is None else found & candidates
      if not found:
        break
    if found is None:
      return None
    if len(found) != 1:
      held = ', '.join(map(repr, sorted(found or seen, key=repr)))
      raise ValueError(
          'capture: a Module.sow inside a JAX transformation reads'
          f' Variables that this call holds at other module paths ({held}),'
          ' so its module cannot be told; sow from a module whose Variables'
          ' are its own.'
      )
    return next(iter(found))


@dataclasses.dataclass(frozen=True, eq=False)
class KnownOrigin:
  """The origin of a value as the frames of a staged call saw it (the
  paths of the Variables holding it, by frame), kept after the trace
  without the value itself (a tracer of the trace)."""

  paths: dict[int, tuple[PathParts, ...]]


def _variables_of(root: tp.Any) -> list[tuple[PathParts, tp.Any]]:
  # Imported here: `flax.nnx.module` itself delegates to this package.
  # pylint: disable-next=g-import-not-at-top
  from flax.nnx import variablelib

  try:
    return [
        (tuple(path), value)
        for path, value in graphlib.iter_graph(root, graph=True)
        if isinstance(value, variablelib.Variable)
    ]
  except Exception:  # pylint: disable=broad-except
    return []  # not a graph node


# The frames of the calls running on this thread, innermost last.
FRAMES: thread_stack.ThreadStack[Frame] = thread_stack.ThreadStack()


def innermost_functional() -> Frame | None:
  for frame in reversed(FRAMES.stack):
    if frame.functional:
      return frame
  return None


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
  return _choose(lambda frame: frame.path_of(obj), var_type)


def _choose(path_in, var_type: type, frames=None):
  fallback = None
  for frame in reversed(FRAMES.stack if frames is None else frames):
    path = path_in(frame)
    if path is None:
      continue
    if frame.functional:
      return fallback or (frame, path, True)
    if frame.accepts(path, var_type):
      return frame, path, True
    if fallback is None:
      fallback = (frame, path, False)
  return fallback


# ---------------------------------------------------------------------------
# Modules that are none of a frame's: deferred to where the program is bound
# ---------------------------------------------------------------------------

# How many of a module's Variables a deferred sow carries as anchors: one
# whose origin is known names the module; more cover Variables updated
# before the sow (whose values are computed, so have no origin).
MAX_ANCHORS = 8


def anchors_of(module: tp.Any) -> list[tuple[PathParts, tp.Any]]:
  """``(path from the module, array)`` of the first Variables of
  ``module``, in graph order: what a deferred sow on it carries."""
  found = []
  for path, variable in _variables_of(module):
    leaves = jax.tree_util.tree_leaves(variable.get_raw_value())
    if leaves and primitive.is_array(leaves[0]):
      found.append((path, leaves[0]))
      if len(found) == MAX_ANCHORS:
        break
  return found


@dataclasses.dataclass(frozen=True)
class SowDetail:
  """What a deferred ``Module.sow`` (or ``Module.perturb``) is, besides its
  module's path: the :class:`~flax.nnx.sow.transform.deferred.Deferred`'s
  ``detail``.

  Attributes:
    var_type: the Variable type sown, which chooses the frame (see
      :func:`resolve`).
    site: ``site(frame, path, accepted, *args)`` gives the resolution: the
      sow's name and marker at ``path`` in ``frame``, or
      ``deferred.DROP`` (a function of the layer that made the sow, the
      same object for every sow, so the detail is static).
    args: the rest of ``site``'s arguments.
  """

  var_type: type
  site: tp.Callable[..., deferred_lib.Resolution]
  args: tuple[tp.Hashable, ...]

  def resolve(self, pending, origins, frames, once
              ) -> deferred_lib.Resolution:
    chosen = _choose(path_in(pending, origins, once), self.var_type, frames)
    return None if chosen is None else self.site(*chosen, *self.args)


def path_in(pending: deferred_lib.Deferred, origins: list[tp.Any],
            once: bool):
  """``path_in(frame)``: the path, in a frame, of the module of a deferred
  sow: the one its NNX transforms' contexts lead to (:func:`context_chain`,
  where the program is bound inside them: eagerly), else the one its
  anchors' origins are Variables of, else, if the sow occurs once in the
  program (no trace of it was reused for another module), the path its
  contexts led to when it was staged (:meth:`Frame.staged_path`)."""
  holder = _live_holder(pending.chain)

  def in_frame(frame: Frame) -> PathParts | None:
    if holder is not None:
      path = frame.path_of(holder)
      if path is not None:
        return path
    path = frame.holder_path(pending.anchors, origins)
    if path is None and once:
      path = frame.staged_path(pending)
    return path

  return in_frame


def context_chain(module: tp.Any) -> tuple[tuple[tp.Any, int], ...]:
  """How ``module``, a copy an NNX transform made inside a call, is found
  again where the transform's program is bound: ``(tag, index)`` of each
  NNX update context between it and the call's own objects, innermost
  first (``nnx.jit``, ``nnx.vmap``, ``nnx.scan``... in graph mode keep
  their copies' indexes there). The indexes are the structure's, the same
  for every module a reused trace runs on."""
  chain: list[tuple[tp.Any, int]] = []
  stacks = graphlib.GRAPH_CONTEXT.update_context_stacks
  obj = module
  while len(chain) < len(stacks):
    for tag, stack in stacks.items():
      inner = stack[-1].inner_ref_outer_index if stack else None
      if inner is not None and obj in inner:
        index = inner[obj]
        chain.append((tag, index))
        outer = stack[-1].outer_index_outer_ref
        obj = outer[index] if outer is not None and index in outer else None
        break
    else:
      break
    if obj is None:
      break
    if any(frame.path_of(obj) is not None for frame in FRAMES.stack):
      break
  return tuple(chain)


def may_be_a_copy(module: tp.Any) -> bool:
  """Whether ``module``, which no running frame holds, may be a copy of one
  of the frames' modules: one an NNX transform made (its context records
  it), one whose Variables hold traced values (named where the program is
  bound), or one whose Variables hold a frame's arrays (merged from the
  caller's state). Not a module closed over or made eagerly inside the call.
  """
  if context_chain(module):
    return True
  anchors = anchors_of(module)
  values = [value for _, value in anchors]
  if any(isinstance(value, jax.core.Tracer) for value in values):
    return True
  paths = tuple(path for path, _ in anchors)
  return any(frame.holder_path(paths, values) is not None
             for frame in FRAMES.stack)


# The staged calls running in this thread, in JAX's trace context and jit
# key: a jit called inside a staged call that runs modules (an `nnx.jit`
# method, say) traces anew for that call, so that its Python runs there and
# the copies NNX makes of the call's modules are noted in that call's frame
# (`Frame.note_staged`). A trace made in another call (an eager one, or
# another staged call) holds sows noted there: a copy of a module without
# Variables, whose sows no origin names, could not be named from it. Within
# one staged call, JAX still shares a trace among modules of one structure.
# Kept across a reload of this module, as `primitive.harvesting` is.
_STAGING = globals().get('_STAGING') or jax.make_user_context(
    default_value=None)
_STAGED_CALLS = itertools.count()


def staging() -> tp.ContextManager[None]:
  """The context of one staged call that runs modules (see ``_STAGING``)."""
  return _STAGING(next(_STAGED_CALLS))


def _live_holder(chain) -> tp.Any | None:
  """:func:`_chain_holder`, followed through the NNX contexts live now until
  an object a frame holds: a trace reused under more transforms than it was
  made in (an ``nnx.jit`` traced at the top of a call, reused under an
  ``nnx.vmap``) carries a chain that ends at a copy those transforms made,
  whose own contexts lead on."""
  holder = _chain_holder(chain)
  seen: set[int] = set()
  frames = FRAMES.stack + _FINISHING.stack
  while holder is not None and id(holder) not in seen and not any(
      frame.path_of(holder) is not None for frame in frames):
    seen.add(id(holder))
    more = context_chain(holder)
    if not more:
      break
    holder = _chain_holder(more)
  return holder


def _chain_holder(chain) -> tp.Any | None:
  """The object the outermost live context of ``chain`` made its copy from
  (the transform whose program is being bound runs in it), or ``None``."""
  stacks = graphlib.GRAPH_CONTEXT.update_context_stacks
  for tag, index in reversed(chain):
    stack = stacks.get(tag)
    outer = stack[-1].outer_index_outer_ref if stack else None
    if outer is not None and index in outer:
      return outer[index]
  return None


def resolve_deferred(
    pending: deferred_lib.Deferred, tag: tp.Hashable,
    origins: list[tp.Any], once: bool = True,
) -> deferred_lib.Resolution:
  """The resolver of deferred sows (see
  :mod:`flax.nnx.sow.transform.deferred`): the module whose Variables the
  anchors come from, in the frames running now and those of a staged call
  being finished (:func:`finishing`), chosen as its detail says."""
  del tag
  resolve_ = getattr(pending.detail, 'resolve', None)
  if resolve_ is None:
    return None
  return resolve_(pending, origins, FRAMES.stack + _FINISHING.stack, once)


def deferred_sow(
    module: tp.Any, value: tp.Any, *, rest: tuple[tp.Hashable, ...],
    detail: tp.Hashable, tag: tp.Hashable, mode: str,
) -> tuple[tp.Any, bool] | None:
  """Sows ``value`` for ``module``, which no running frame holds, under a
  name its path starts (``(*path, *rest)``), found from its Variables.

  Inside a JAX transformation (the Variables hold tracers), the sow is
  deferred (see :mod:`flax.nnx.sow.transform.deferred`); outside any (a
  module merged from the caller's state), it is resolved at once. Returns
  ``(what the sow returns, whether it was resolved or deferred)``, or
  ``None`` if nothing tells which module it is (no Variable, or none of
  its arrays is a frame's).
  """
  anchors = anchors_of(module)
  chain = context_chain(module)
  if not anchors and not chain:
    return None
  pending = deferred_lib.Deferred(
      anchors=tuple(path for path, _ in anchors), rest=rest,
      owner=type(module).__name__, detail=detail, chain=chain,
  )
  values = [value for _, value in anchors]
  # A copy made inside a transformation (its Variables traced, or known to
  # an NNX transform's context) is named where the program is bound; any
  # other module (merged from the caller's state, closed over) at once.
  if not chain and not any(isinstance(v, jax.core.Tracer) for v in values):
    resolution = resolve_deferred(pending, tag, values)
    if resolution is None:
      return None
    if isinstance(resolution, deferred_lib.Drop):
      return value, True
    name, meta = resolution
    return primitive.sow_with_meta(
        value, name=name, tag=tag, mode=mode, meta=meta), True
  holder = _live_holder(chain)
  if holder is not None:
    for frame in FRAMES.stack:
      frame.note_staged(pending, holder)
  leaves, treedef = primitive.flatten_value(
      value, where=f'{type(module).__name__}.sow')
  out = deferred_lib.sow(leaves, values, deferred=pending, treedef=treedef,
                         tag=tag, mode=mode)
  return jax.tree_util.tree_unflatten(treedef, out), True


# Frames of staged calls whose jaxpr is being resolved after their trace.
_FINISHING: thread_stack.ThreadStack[Frame] = thread_stack.ThreadStack()


@contextlib.contextmanager
def finishing(frames: tp.Sequence[Frame]) -> tp.Iterator[None]:
  """Lets the resolver see ``frames`` (staged calls whose function has
  returned) while the deferred sows of their jaxpr are resolved."""
  for frame in frames:
    _FINISHING.stack.append(frame)
  try:
    yield
  finally:
    for frame in reversed(frames):
      popped = _FINISHING.stack.pop()
      assert popped is frame


deferred_lib.set_resolver(resolve_deferred)


# The frames started while staging a call (see `started`), innermost last.
_STARTED: thread_stack.ThreadStack[list[Frame]] = thread_stack.ThreadStack()


@contextlib.contextmanager
def started(frames: list[Frame]) -> tp.Iterator[list[Frame]]:
  """Collects into ``frames`` the frames started in the block (a staged
  call's, directly: a call staged inside collects its own)."""
  with _STARTED.pushed(frames):
    yield frames


def release(
    frames: tp.Sequence[Frame], values: tp.Sequence[tp.Any]
) -> list[KnownOrigin | None]:
  """The origins of ``values`` (a staged call's inputs) in ``frames``, kept
  without them; then drops the frames' objects (see :meth:`Frame.release`)."""
  origins: list[KnownOrigin | None] = []
  for value in values:
    paths = {}
    for frame in frames:
      found = frame.paths_now(value)
      if found:
        paths[id(frame)] = tuple(found)
    origins.append(KnownOrigin(paths) if paths else None)
  for frame in frames:
    frame.release()
  return origins


def note_started(frame: Frame) -> None:
  if _STARTED.stack:
    _STARTED.stack[-1].append(frame)


def refuse_unnamed_copy(module: tp.Any, method: str, value: tp.Any) -> None:
  """Raises if ``value`` is traced: ``module`` is then a copy a JAX
  transformation made inside the call (or one closed over by it) that
  :func:`deferred_sow` could not name, as it holds no Variable from the
  call's arguments."""
  if not FRAMES.stack:
    return
  traced = lambda tree: any(isinstance(leaf, jax.core.Tracer)
                            for leaf in jax.tree_util.tree_leaves(tree))
  variables = [v.get_raw_value() for _, v in _variables_of(module)]
  # A module holding concrete Variables is the caller's (closed over), not
  # a copy: it takes the path of an unreachable module (see there).
  if not (traced(variables) or not variables and traced(value)):
    return
  raise ValueError(
      f'Module.{method} was called on a {type(module).__name__} inside a JAX'
      ' transformation (jit, vmap, scan, an NNX transform...) that is none'
      " of the capture's modules and holds no Variable whose value comes"
      " from the capture's arguments, so nothing in the program says which"
      ' module it is (a module without Variables, or one created inside the'
      ' function). Sow from a module that holds Variables, or pass it to'
      ' the capture as an argument.'
  )


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
    if graphlib.set_graph_mode.current_value():
      return _graph_modules(root, module_lib.Module)
    return [
        (tuple(path), module)
        for path, module in module_lib.iter_modules(root)
    ]
  except Exception:  # pylint: disable=broad-except
    # Not a graph node: nothing to name by path.
    return []


# Whether a value of each type is an NNX graph node (a module, a container,
# a pytree: what may hold a module), as `graphlib.is_node` answers from the
# type alone, asked once per type; cleared when a type is registered as a
# graph node or pytree (the sizes of the registries change).
_NODE_TYPES: dict[type, bool] = {}
_REGISTRIES: list[int] = []


def _node_types() -> dict[type, bool]:
  sizes = [len(graphlib.GRAPH_REGISTRY), len(graphlib.PYTREE_REGISTRY),
           len(graphlib.JAX_PYTREE_REGISTRY)]
  if sizes != _REGISTRIES:
    _NODE_TYPES.clear()
    _REGISTRIES[:] = sizes
  return _NODE_TYPES


def _graph_modules(root: tp.Any, module_type: type
                   ) -> list[tuple[PathParts, tp.Any]]:
  """What ``nnx.iter_modules(root)`` yields in graph mode, in its order and
  at its paths, without visiting what cannot hold a module.

  The same depth-first walk of the graph in node order, each node entered
  once (so a module held at several paths is at the first), a module
  yielded after what it holds; a value that is no graph node (a Variable,
  an array, a static attribute) is skipped by its type. A call that taps or
  names a ``Module.sow`` walks its model once; this walk is most of that
  cost.
  """
  kinds = _node_types()
  found: list[tuple[PathParts, tp.Any]] = []
  entered: set[int] = set()
  stack: list[tuple[PathParts, tp.Any, bool]] = []
  if graphlib.is_node(root):
    stack.append(((), root, False))
  while stack:
    path, node, done = stack.pop()
    if done:
      found.append((path, node))
      continue
    if id(node) in entered:
      continue
    entered.add(id(node))
    impl = graphlib.get_node_impl(node)
    if impl is None:
      continue
    if isinstance(node, module_type):
      stack.append((path, node, True))
    for key, child in reversed(impl.node_dict(node).items()):
      kind = type(child)
      is_node = kinds.get(kind)
      if is_node is None:
        is_node = kinds[kind] = graphlib.is_node(child)
      if is_node:
        stack.append(((*path, key), child, False))
  return found


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
  methods = sow_methods()
  known = _LEGACY.get(methods)
  if known is None:
    if len(_LEGACY) >= 64:
      _LEGACY.clear()
    known = _LEGACY[methods] = not all(map(runs_on_transform, methods))
  return known


# What `legacy_sow_methods` found, by the methods (asked on every call; a
# function's declaration does not change). Bounded.
_LEGACY: dict[tuple[tp.Any, tp.Any], bool] = {}


class _RefusedCaptures:
  """What Flax 0.12.8's ``Module.sow`` finds as ``__captures__`` of a module
  while a functional call runs in its thread and ``Module.sow`` is Flax's
  own.

  Flax's ``Module.sow`` and ``Module.perturb`` iterate a module's
  ``__captures__`` when it has one: this one raises there, before anything
  is written, rather than let the sow write an attribute onto the caller's
  model while the capture returns nothing.
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


class _CapturesHook:
  """The class hook (see :mod:`.class_hooks`) ``nnx.Module.__captures__``
  while a functional call runs and ``Module.sow`` is Flax's own: a module
  asked for it in a thread whose innermost frame is functional has
  :data:`_REFUSED_CAPTURES` (so copies made inside the call, and modules
  made there, refuse too); otherwise it has none, as without the hook. Not a
  data descriptor: a ``__captures__`` that Flax's own ``nnx.capture`` gives
  a module (in its ``__dict__``) comes first.
  """

  def __get__(self, obj, owner=None):
    if obj is not None:
      frame = FRAMES.stack[-1] if FRAMES.stack else None
      if frame is not None and frame.functional:
        return _REFUSED_CAPTURES
    raise AttributeError(_LEGACY_CAPTURES)


def refuse_legacy_sows() -> list[class_hooks.Key]:
  """Holds the refusing ``__captures__`` hook on ``nnx.Module`` for a call;
  returns what :func:`allow_legacy_sows` needs."""
  # Imported here: `flax.nnx.module` itself delegates to this package.
  # pylint: disable-next=g-import-not-at-top
  from flax.nnx import module as module_lib

  return class_hooks.hold(
      [(module_lib.Module, _LEGACY_CAPTURES)],
      lambda cls, name, unhooked: _CapturesHook(),
  )


def allow_legacy_sows(held: tp.Sequence[class_hooks.Key]) -> None:
  """Undoes :func:`refuse_legacy_sows`."""
  class_hooks.release(held)
