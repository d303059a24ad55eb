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
"""One call of ``capture_compat.capture``: stage, interpret, build States.

An eager capture is traced like ``nnx.jit``: once per call structure
(function, types, graph definition and non-array arguments by value, array
shapes and dtypes); later calls only evaluate the staged program on their
own modules and inputs.
"""

from __future__ import annotations

import dataclasses
import threading
import typing as tp
import weakref


from flax.nnx import graphlib
from flax.nnx import module as module_lib
from flax.nnx import statelib
from flax.nnx import variablelib
from flax.nnx.capture_compat import frames
from flax.nnx.capture_compat import method_outputs as method_outputs_lib
from flax.nnx.capture_compat import numpy_guards as guards_lib
from flax.nnx.sow import _jax
from flax.nnx.sow import interpreter
from flax.nnx.sow import keys
from flax.nnx.sow import module_paths as paths_lib
from flax.nnx.sow import primitive
from flax.nnx.sow import tracing
from flax.nnx.sow.capture import group as group_records
from flax.nnx.sow.scope import Scope
from flax.nnx.sow.sites import Request
from flax.nnx.sow.sites import Site
from flax.nnx.sow.sites import check_entry

Module = module_lib.Module
PathParts = frames.PathParts
State = statelib.State
_NO_VALUE = object()


@dataclasses.dataclass(frozen=True)
class _SiteSelection:
  """Selects exactly the (name, tag) sites a frame collects.

  A :class:`~flax.nnx.sow.selection.Selection` selects by tag and by name
  separately; a frame knows which name goes with which tag.
  """

  sites: frozenset[tuple[primitive.Name, type]]

  def matches(self, params: tp.Mapping[str, tp.Any]) -> bool:
    return (params['sow_name'], params['tag']) in self.sites


@dataclasses.dataclass(frozen=True)
class _Trace:
  """What one trace of a compat capture leaves behind; no tracers.

  Everything :class:`Call` needs to evaluate the call again on other
  arguments of the same structure: the staged jaxpr, how to rebuild its
  outputs, the sow sites the frame collects (found in the jaxpr), and the
  guards that must hold for it to be reused.
  """

  jaxpr: tp.Any  # core.ClosedJaxpr
  outcome: tp.Any  # tracing's outcome of the trace
  module_paths: tuple[PathParts, ...]
  sites: dict[tuple[primitive.Name, type], frames.SiteInfo]
  guards: tuple[guards_lib.Guard, ...] = ()


class ModuleCall:
  """The key of the traces of ``capture(module)``: ``module(*args)``, whose
  code is determined by the module's graph definition."""


# Per function (weakly held): traces by call structure. An eager capture is
# traced like `nnx.jit`: once per structure of its arguments, then only
# evaluated.
TRACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
TRACES_LOCK = threading.Lock()
_MAX_TRACES_PER_FUNCTION = 64


class _HashedKey:
  """A key hashed once: hashing a graph definition is not cheap, and a key is
  both looked up and, on a miss, stored.

  A key holding unhashable values (a module attribute ``features=[16, 16]``,
  a dict, a dataclass) is frozen by value (:func:`keys.freeze`), as
  ``nnx.jit`` compares graph definitions: otherwise every call would trace
  again, and re-trace and recompile every ``jit`` inside.
  """

  __slots__ = ('key', 'hash', 'raw')

  def __init__(self, key: tp.Hashable):
    self.raw = None
    try:
      self.hash = hash(key)
    except TypeError:
      self.raw = key
      key = keys.freeze(key)
      self.hash = hash(key)
    self.key = key

  def stored(self) -> _HashedKey:
    """This key as it is kept: a snapshot, not a view of the call's values.

    Raises:
      keys.Unkeyable: the key holds a value that cannot be snapshotted.
    """
    if self.raw is None:
      return self
    stored = _HashedKey.__new__(_HashedKey)
    stored.raw = None
    stored.key = keys.freeze(self.raw, snapshot=True)
    stored.hash = hash(stored.key)
    if stored != self:
      raise keys.Unkeyable('the snapshot of the key differs from it')
    return stored

  def __hash__(self) -> int:
    return self.hash

  def __eq__(self, other) -> bool:
    return (
        isinstance(other, _HashedKey)
        and self.hash == other.hash
        and self.key == other.key
    )


class Call:
  """One call of a compat ``capture``: stage, interpret, build the States."""

  def __init__(self, var_types, init, method_outputs, call, fn_key, code):
    self.var_types = var_types
    self.init = init
    self.method_outputs = method_outputs
    self.call = call
    self.fn_key = fn_key
    # The function `call` runs; None for a module, whose class is found in
    # the graph definition.
    self.code = code

  def __call__(self, root, args, kwargs):
    init_entries = frames.flat_init(self.init)
    init_types: dict[PathParts, set] = {}
    for path, _, var_type, _ in init_entries:
      init_types.setdefault(path, set()).add(var_type)
    frame = frames.Frame(self.var_types, init_types, self.method_outputs)
    with tracing.updating():
      out, trace, records = self._run(frame, init_entries, root, args, kwargs)
    states = self._states(trace, init_entries, records['records'])
    if not self.var_types:
      return out
    if len(self.var_types) == 1:
      return out, states[0]
    return (out, *states)

  def _run(self, frame, init_entries, root, args, kwargs):
    """Stages (or finds the trace of) the call, evaluates, writes back."""
    # The init values are not traced: perturbations are planted when the
    # staged program is evaluated (see `_InitPlanter`), accumulators are
    # applied to the records after it.
    prepared = tracing.Prepared(
        self._traced(frame), (root, args, kwargs), {}, paths=False
    )
    key = self._cache_key(prepared, init_entries)
    trace = self._lookup(key)
    if trace is not None and not all(g.holds() for g in trace.guards):
      trace = None  # a NumPy scalar it read has changed
    if trace is None:
      # Scanned before tracing: a function that changes a global it reads
      # is then traced again on the next call, which reads the new value.
      guards = () if key is None else guards_lib.numpy_guards(
          self._code_roots(prepared)
      )
      jaxpr, outcome = prepared.trace()
      trace = _Trace(
          jaxpr, outcome, tuple(frame.module_paths),
          frame.sites_in(jaxpr.jaxpr), guards,
      )
      self._store(key, trace)
    selection = _SiteSelection(sites=frozenset(trace.sites))
    try:
      records = _interpret(
          trace.jaxpr, prepared.inputs, selection,
          _init_perturbations(trace, init_entries),
      )
    except NotImplementedError as e:
      e.add_note(MODES_NOTE)
      raise
    out = prepared.finish(trace.outcome, records.pop('out'))
    return out, trace, records

  def _traced(self, frame):
    """The function staged: ``call`` on the copies, inside ``frame``."""

    def traced(root, args, kwargs):
      # Runs on copies, inside the trace.
      if self.method_outputs is not None:
        frame.taps = [method_outputs_lib.tap_spec(self.method_outputs)]
      return paths_lib.run_in_frame(
          frame, frames.module_paths(root),
          lambda: self.call(root, *args, **kwargs),
      )

    return traced

  def _code_roots(self, prepared) -> list[tp.Any]:
    """The code the call runs: the function and the graph nodes' classes."""
    roots = [] if self.code is None else [self.code]
    for node in prepared.graphdef.nodes:
      if isinstance(node, graphlib.NodeDef) and isinstance(node.type, type):
        roots.append(node.type)
    return roots

  def _cache_key(self, prepared, init_entries) -> _HashedKey | None:
    """The key of this call's trace, or ``None`` if it is traced anew.

    Only a top-level eager call, outside any other capture, reuses a trace:
    under a JAX transform the enclosing trace is what gets cached, and an
    enclosing capture's frames take part in resolving module paths.
    """
    if frames.FRAMES.stack or not _jax.trace_ctx.is_top_level():
      return None
    structure = prepared.cache_key()
    if structure is None or self.fn_key is None:
      return None
    key = (
        self.var_types,
        self.method_outputs,
        # What the modules' sows run: on a released Flax, `install` changes
        # them, and a trace of Flax's own Module.sow collects nothing.
        Module.sow,
        Module.perturb,
        tuple((path, name, var_type) for path, name, var_type, _
              in init_entries),
        _jax.trace_context(),
        structure,
    )
    try:
      return _HashedKey(key)
    except TypeError:  # a value whose __hash__ fails even once frozen
      return None

  def _lookup(self, key) -> _Trace | None:
    if key is None:
      return None
    with TRACES_LOCK:
      return TRACES.get(self.fn_key, {}).get(key)

  def _store(self, key, trace: _Trace) -> None:
    if key is None or trace.jaxpr.consts:
      # Arrays the function read from outside its arguments (the weights of
      # a module it closes over, a global): a direct call would read their
      # current values, so the trace is not reused.
      return
    try:
      key = key.stored()
    except keys.Unkeyable:
      return
    with TRACES_LOCK:
      traces = TRACES.setdefault(self.fn_key, {})
      if len(traces) >= _MAX_TRACES_PER_FUNCTION:
        traces.clear()
      traces[key] = trace

  def _states(self, trace, init_entries, records) -> list[State]:
    # A name may be sown with several types (a perturbation and a sow).
    values = group_records(records, key=lambda site: (site.name, site.tag))
    # Per module path and type: name -> value, as legacy __captures__.
    slots: dict[tuple[PathParts, type], dict[str, tp.Any]] = {}
    module_paths = set(trace.module_paths)
    for path, name, var_type, value in init_entries:
      if path in module_paths:
        slots.setdefault((path, var_type), {})[name] = value
    for key, info in trace.sites.items():
      if key not in values:
        continue
      slot = slots.setdefault((info.path, info.var_type), {})
      if info.kind == 'perturb':
        slot.setdefault(info.name, values[key][0])
        continue
      accumulated = (
          slot[info.name] if info.name in slot else info.init_fn()
      )
      for value in values[key]:
        accumulated = info.reduce_fn(accumulated, value)
      slot[info.name] = accumulated
    states = []
    with variablelib.var_defaults(hijax=False, ref=False):
      for var_type in self.var_types:
        flat = []
        for path in trace.module_paths:
          for name, value in slots.get((path, var_type), {}).items():
            flat.append(((*path, name), var_type(value)))
        states.append(statelib.from_flat_state(flat))
    return states


MODES_NOTE = (
    "nnx.capture: Module.sow is sown with mode='append', except with"
    " reduce_fn=capture_compat.keep_last, which is sown with mode='clobber'"
    ' (keeps the last value): a while loop (nnx.while_loop, nnx.fori_loop'
    ' with traced bounds) accepts that if the same name was sown before the'
    ' loop.'
)


def _init_perturbations(trace, init_entries) -> dict[tuple, tp.Any]:
  """``init``'s values for the perturbation sites of ``trace``, by
  ``(sow name, Variable type)``."""
  values = {
      (path, name, var_type): value
      for path, name, var_type, value in init_entries
  }
  planted = {}
  for key, info in trace.sites.items():
    if info.kind != 'perturb':
      continue
    value = values.get((info.path, info.name, info.var_type), _NO_VALUE)
    if value is not _NO_VALUE:
      planted[key] = value
  return planted


class _InitPlanter:
  """Plants ``init``'s perturbations: each at every execution of its site.

  As in Flax 0.12.8, where a perturbation is one Variable of its module: every
  call of ``Module.perturb`` with that name adds the same value. Seen from
  the captured function, the site's value carries the axes of the transforms
  around it (the members of an ``nnx.vmap``, the steps of an ``nnx.scan``),
  as the State the capture returns does.
  """

  def __init__(self, values: dict[tuple, tp.Any]):
    self.values = values

  def take(self, site: Site, leaves=None) -> list[tp.Any]:
    del leaves  # the same value at every execution
    return check_entry(
        site,
        self.values[(site.name, site.tag)],
        where=f'nnx.capture: the init perturbation {site.name!r}',
        site_has='Module.perturb there (as a capture without init returns'
        ' it) has',
    )


def _interpret(jaxpr, inputs, selection, planted) -> dict[str, tp.Any]:
  request = Request(
      selection,
      planted=_SiteSelection(sites=frozenset(planted)) if planted else None,
  )
  scope = Scope(request, _InitPlanter(planted) if planted else None)
  out_flat = interpreter.evaluate(jaxpr.jaxpr, jaxpr.consts, inputs, scope)
  return {'out': out_flat, 'records': scope.records}
