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
"""Staging a jaxpr under ``jit`` with less work than equation by equation.

Under a staging trace, ``evaluate`` copies the equations that need no rule
as they are (``reemittable``, ``reemit``), and a jaxpr whose handled sows
are all first-order equations of its own is rewritten once (cached) into a
jaxpr that returns the sown values as extra outputs, staged as one
``closed_call`` (``rewrite_jaxpr``, ``emit_rewritten``), which XLA inlines.
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax
import jax.core
import jax.extend.core as core
import jax.extend.source_info_util as source_info_util

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.sites import Site
from flax.nnx.sow.transform.sites import site_of


@_jax.weakref_lru_cache(trace_context_in_key=False)
def reemittable(jaxpr: core.Jaxpr) -> tuple[bool, ...]:
  """Equations a staging trace may copy as they are, without re-binding.

  A first-order, effect-free, low-level equation already in a valid jaxpr
  stages to itself: re-binding it would only repeat its abstract evaluation
  (most of the cost of staging ``capture(f)`` under ``jit``).
  """
  return tuple(_reemittable(eqn) for eqn in jaxpr.eqns)


def _reemittable(eqn: core.JaxprEqn) -> bool:
  if eqn.effects or eqn.primitive is primitive.sow_p:
    return False
  if any(True for _ in core.jaxprs_in_params(eqn.params)):
    return False
  return not eqn.primitive.is_high(
      *[v.aval for v in eqn.invars], **eqn.params
  )


def staging_trace() -> _jax.DynamicJaxprTrace | None:
  trace = _jax.trace_ctx.trace
  if type(trace) is _jax.DynamicJaxprTrace and not trace.requires_low:
    return trace
  return None


def reemit(trace: _jax.DynamicJaxprTrace, eqn: core.JaxprEqn, invals):
  source_info = source_info_util.current()
  tracers = [trace.to_jaxpr_tracer(x, source_info) for x in invals]
  return trace.emit_eqn(
      tracers,
      [v.aval for v in eqn.outvars],
      eqn.primitive,
      eqn.params,
      eqn.effects,
      source_info,
      eqn.ctx,
  )


@dataclasses.dataclass(frozen=True)
class Rewritten:
  """A jaxpr whose handled sows need no rule, rewritten as a whole.

  Attributes:
    call: takes the original constants and inputs; returns the original
      outputs followed by the leaves of ``sites``, in order.
    sites: the recorded sites, in program order.
  """

  call: core.ClosedJaxpr
  sites: tuple[Site, ...]


def rewrite_jaxpr(
    jaxpr: core.Jaxpr, sows: tp.Sequence[bool | None], strip: bool
) -> Rewritten | None:
  """``jaxpr`` with its handled sows removed and their inputs returned.

  The common case of a staged capture: every handled sow is a first-order
  equation of ``jaxpr`` itself. Staging ``evaluate`` would then only copy
  the equations, one tracer at a time; instead, they are copied once into a
  new jaxpr, staged as a single ``closed_call`` (which XLA inlines).

  Args:
    jaxpr: a jaxpr without Hijax equations, into which nothing is planted.
    sows: per equation, from the interpreter's plan: ``True`` for a sow it
      records, ``False`` for one it drops, ``None`` for an equation bound as
      it is.
    strip: whether no capture is tracing (a re-bound sow then loses its
      effect).

  Returns:
    The rewritten call, or ``None`` where an equation refers to inputs by
    position through its effects, or nothing is recorded.
  """
  substitute: dict[core.Var, jax.core.Atom] = {}

  def read(atom):
    return substitute.get(atom, atom) if isinstance(atom, core.Var) else atom

  def reads_removed(eqn):
    for atom in eqn.invars:
      if isinstance(atom, core.Var) and atom in substitute:
        return True
    return False

  # Runs once per staged program, over every equation: per equation, only
  # what must be done, and nothing built for the equations it keeps as they
  # are (most of them).
  eqns: list[core.JaxprEqn] = []
  sites: list[Site] = []
  sown: list[jax.core.Atom] = []
  for eqn, recorded in zip(jaxpr.eqns, sows, strict=True):
    if recorded is not None:
      invars = (
          list(map(read, eqn.invars)) if reads_removed(eqn) else eqn.invars
      )
      if recorded:
        sites.append(site_of(eqn))
        sown.extend(invars)
      substitute.update(zip(eqn.outvars, invars))
      continue
    if eqn.effects and any(
        isinstance(e, _jax.JaxprInputEffect) for e in eqn.effects
    ):
      return None
    if eqn.primitive is primitive.sow_p:
      # Re-bound (not handled): its effect is what binding it now gives.
      sow_effects = core.no_effects if strip else {primitive.sow_effect}
      invars = list(map(read, eqn.invars))
      eqns.append(eqn.replace(invars=invars, effects=sow_effects))
    elif substitute and reads_removed(eqn):
      eqns.append(eqn.replace(invars=list(map(read, eqn.invars))))
    else:
      eqns.append(eqn)
  if not sites:
    return None  # nothing to collect: evaluate keeps the program as it is
  outvars = [read(v) for v in jaxpr.outvars] + sown
  effects = set().union(*(eqn.effects for eqn in eqns))
  call = as_call(jaxpr, eqns, outvars, effects)
  return Rewritten(call, tuple(sites))


def as_call(
    jaxpr: core.Jaxpr,
    eqns: list[core.JaxprEqn],
    outvars: list[jax.core.Atom],
    effects: tp.Any,
) -> core.ClosedJaxpr:
  """``eqns`` as a jaxpr taking ``jaxpr``'s constants, then its inputs."""
  return core.ClosedJaxpr(
      core.Jaxpr(
          constvars=(),
          invars=[*jaxpr.constvars, *jaxpr.invars],
          outvars=outvars,
          eqns=eqns,
          effects=effects,
          debug_info=core.DebugInfo(
              'capture', jaxpr.debug_info.func_src_info, None, None
          ),
      ),
      (),
  )


def emit_call(
    trace: _jax.DynamicJaxprTrace,
    call: core.ClosedJaxpr,
    values: tp.Sequence[tp.Any],
) -> list[tp.Any]:
  """Stages ``call`` on ``values`` as one ``closed_call`` equation."""
  source_info = source_info_util.current()
  tracers = [trace.to_jaxpr_tracer(x, source_info) for x in values]
  return trace.emit_eqn(
      tracers,
      call.out_avals,
      core.primitives.closed_call_p,
      dict(call_jaxpr=call),
      call.jaxpr.effects,
      source_info,
  )


def emit_rewritten(
    trace: _jax.DynamicJaxprTrace,
    rewritten: Rewritten,
    num_outs: int,
    values: tp.Sequence[tp.Any],
    scope: Scope,
) -> list[tp.Any]:
  outs = emit_call(trace, rewritten.call, values)
  start = num_outs
  for site in rewritten.sites:
    end = start + site.num_leaves
    scope.record_arrays(scope.here(site), outs[start:end])
    start = end
  return outs[:num_outs]
