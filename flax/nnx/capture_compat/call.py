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
"""One call of ``capture_compat.capture``: run or stage, interpret, build
States.

Outside any JAX trace the call is eager, as in Flax 0.12.8: the function runs
on the caller's modules, its Python on every call, and the sows of the
capture's frame are recorded as they are bound
(:mod:`flax.nnx.sow.transform.eager`); jitted functions inside keep the
programs JAX compiled for them. Under a JAX trace (``nnx.jit`` around the
capture, say) the call is staged to a jaxpr on copies of its graph nodes and
interpreted there; the enclosing trace is what JAX caches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import typing as tp

from flax.nnx import module as module_lib
from flax.nnx import statelib
from flax.nnx import variablelib
from flax.nnx.capture_compat import frames
from flax.nnx.capture_compat import method_outputs as method_outputs_lib
from flax.nnx.sow.transform import eager
from flax.nnx.sow.transform import inner_calls
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.lift import taps
from flax.nnx.sow.transform import planting
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.lift import graph_calls
from flax.nnx.sow.capture import group as group_records
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.sites import Record
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.sites import Site

Module = module_lib.Module
PathParts = frames.PathParts
State = statelib.State
Sites = dict[tuple[primitive.Name, type], frames.SiteInfo]


@dataclasses.dataclass(frozen=True)
class _FrameSites:
  """Selects the sows of one frame: those its ``Module.sow`` and
  ``Module.perturb`` calls mark as its own (``SiteInfo.frame``).

  Hashable and the same for every call of a capture at the same depth, so
  the transformed body of an inner ``jit`` is cached across calls. With
  ``perturbations``, only the perturbation sites whose ``(sow name, type)``
  it lists are selected (the sites ``init`` plants).
  """

  frame: tp.Hashable
  perturbations: frozenset | None = None

  def matches(self, params: tp.Mapping[str, tp.Any]) -> bool:
    info = params.get('meta')
    if not isinstance(info, frames.SiteInfo) or info.frame != self.frame:
      return False
    if self.perturbations is None:
      return True
    return info.kind == 'perturb' and (
        (params['sow_name'], params['tag']) in self.perturbations
    )


def _sites(records: tp.Iterable[Record]) -> Sites:
  """What each recorded site of the frame makes of its values, by ``(sow
  name, Variable type)``: the first of each, in call order. The frame's
  ``Module.sow``/``perturb`` markers carry it (``SiteInfo``), also inside a
  jit body traced by an earlier call."""
  sites: Sites = {}
  for site, _ in records:
    info = site.meta
    assert isinstance(info, frames.SiteInfo), site
    sites.setdefault((site.name, info.var_type), info)
  return sites


class Call:
  """One call of a compat ``capture``: run or stage, build the States."""

  def __init__(self, var_types, init, method_outputs, call):
    self.var_types = var_types
    self.init = init
    self.method_outputs = method_outputs
    self.call = call

  def __call__(self, root, args, kwargs):
    init_entries = frames.flat_init(self.init)
    init_types: dict[PathParts, set] = {}
    for path, _, var_type, _ in init_entries:
      init_types.setdefault(path, set()).add(var_type)
    frame = frames.Frame(self.var_types, init_types, self.method_outputs)
    # The init values are not traced: perturbations are planted where their
    # sites are sown (see `_InitPlanter`), accumulators are applied to the
    # records after the call.
    planted = {
        (frames.sow_name(path, name), var_type): value
        for path, name, var_type, value in init_entries
    }
    scope = Scope(
        Request(
            _FrameSites(frame.id),
            planted=_FrameSites(frame.id, frozenset(planted)) if planted
            else None,
        ),
        _InitPlanter(planted) if planted else None,
    )
    # Set, never reset: a plant around this call may plant its sows too.
    with _modes_note(), (primitive.planting(True) if planted
                         else contextlib.nullcontext()), \
        inner_calls.running(self._description(root), None) as call:
      if eager.can_run():
        out = eager.run(
            scope, lambda: self._traced(frame)(root, args, kwargs)
        )
      else:
        with graph_calls.updating():
          out = self._run_staged(scope, frame, root, args, kwargs)
      records = scope.records
      inner_calls.took(call, [(site.name, site.tag) for site, _ in records])
    states = (
        self._states(frame, _sites(records), init_entries, records)
        if records or init_entries
        else [statelib.from_flat_state([]) for _ in self.var_types]
    )
    if not self.var_types:
      return out
    if len(self.var_types) == 1:
      return out, states[0]
    return (out, *states)

  def _description(self, root) -> str:
    """How messages name this call: ``nnx.capture(Transformer,
    Intermediate)``, say."""
    what = (type(root).__name__ if isinstance(root, Module)
            else inner_calls.name_of(root))
    parts = [what, *(t.__name__ for t in self.var_types)]
    return f'nnx.capture({", ".join(parts)})'

  def _run_staged(self, scope, frame, root, args, kwargs):
    """Stages the call on copies, evaluates it in ``scope``, writes back."""
    prepared = graph_calls.Prepared(
        self._traced(frame), (root, args, kwargs), {}, paths=False
    )
    jaxpr, outcome = prepared.trace()  # resolved in `frame` too
    out_flat = interpreter.evaluate(
        jaxpr.jaxpr, jaxpr.consts, prepared.inputs, scope
    )
    return prepared.finish(outcome, out_flat)

  def _traced(self, frame):
    """The function run: ``call`` on the objects given, inside ``frame``."""

    def traced(root, args, kwargs):
      if self.method_outputs is not None:
        frame.taps = [method_outputs_lib.tap_spec(self.method_outputs)]
      return taps.run_in_frame(
          frame, [((), root)], lambda: self.call(root, *args, **kwargs),
      )

    return traced

  def _states(
      self, frame, sites: Sites, init_entries, records: list[Record]
  ) -> list[State]:
    # A name may be sown with several types (a perturbation and a sow).
    values = group_records(records, key=lambda site: (site.name, site.tag))
    # Per module path and type: name -> value, as legacy __captures__.
    slots: dict[tuple[PathParts, type], dict[str, tp.Any]] = {}
    module_paths = set(frame.module_paths)
    for path, name, var_type, value in init_entries:
      if path in module_paths:
        slots.setdefault((path, var_type), {})[name] = value
    for key, info in sites.items():
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
        for path in frame.module_paths:
          for name, value in slots.get((path, var_type), {}).items():
            flat.append(((*path, name), var_type(value)))
        states.append(statelib.from_flat_state(flat))
    return states


class _modes_note:
  """Adds :data:`MODES_NOTE` to a refusal raised while interpreting."""

  def __enter__(self):
    return self

  def __exit__(self, kind, error, tb):
    if kind is not None and issubclass(kind, NotImplementedError):
      error.add_note(MODES_NOTE)
    return False


MODES_NOTE = (
    "nnx.capture: Module.sow is sown with mode='append', except with"
    " reduce_fn=capture_compat.keep_last, which is sown with mode='clobber'"
    ' (keeps the last value): a while loop (nnx.while_loop, nnx.fori_loop'
    ' with traced bounds) accepts that if the same name was sown before the'
    ' loop.'
)


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
    return planting.check_value(
        self.values[(site.name, site.tag)], site.tree, site.avals,
        where=f'nnx.capture: the init perturbation {site.name!r}',
        site_has='Module.perturb there (as a capture without init returns'
        ' it) has',
    )
