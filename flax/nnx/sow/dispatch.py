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
"""The plan of a jaxpr for a request: which rule each equation gets.

An equation gets ``None`` (bind it unchanged) unless it is a sow the request
handles or drops, or holds one in a sub-jaxpr at any depth: then it gets
``handle_sow``, ``drop_sow``, its rule in ``rules.RULES``, or a refusal
naming the primitive. Outside any capture, an equation still carrying the
sow effect gets its rule too (see ``plan``). The plan is computed once per
(jaxpr, request, whether a capture is tracing).
"""

from __future__ import annotations

import typing as tp

import jax.extend.core as core

from flax.nnx.sow import _jax
from flax.nnx.sow import primitive
from flax.nnx.sow.scope import Rule
from flax.nnx.sow.scope import Scope
from flax.nnx.sow.sites import Request
from flax.nnx.sow.sites import describe_names
from flax.nnx.sow.sites import Site
from flax.nnx.sow.sites import site_of
from flax.nnx.sow.sites import where


def handle_sow(scope: Scope, eqn: core.JaxprEqn, invals: list[tp.Any]):
  return handle_site(scope, site_of(eqn), invals)


def handle_site(scope: Scope, site: Site, invals: list[tp.Any]):
  """What a handled sow of ``site`` (as its own jaxpr sees it) returns: its
  planted values, if any, else ``invals``; records them in ``scope``. For a
  sow equation, and for a sow bound under an eager interpretation."""
  site = scope.here(site)
  planted = scope.plant(site, invals)
  scope.record(site, invals)
  return invals if planted is None else planted


def _handle_unread_sow(
    scope: Scope, eqn: core.JaxprEqn, invals: list[tp.Any]
):
  """``handle_sow`` for a sow whose result nothing reads.

  A value planted there would change nothing, which ``plant`` refuses rather
  than reporting success: ``Module.sow`` discards the value ``sow`` returns,
  for instance.
  """
  site = scope.here(site_of(eqn))
  if scope.request.refuse_unread and scope.request.plants(eqn.params):
    raise ValueError(
        f'plant: the sow {site.name!r} (tag={site.tag!r}, at {where(eqn)})'
        ' returns a value the function never uses, so a value planted there'
        ' would change nothing. Use what sow returns (x = sow(x, name=...));'
        ' Module.sow discards it, so plant into a tap of the module'
        ' (flax.nnx.sow.tap) instead.'
    )
  return handle_sow(scope, eqn, invals)


def drop_sow(scope: Scope, eqn: core.JaxprEqn, invals: list[tp.Any]):
  del scope, eqn
  return invals


def _refuse(scope: Scope, eqn: core.JaxprEqn, invals: list[tp.Any]):
  del invals
  names = describe_names(handled_names(eqn, scope.request))
  raise NotImplementedError(
      f'capture: the higher-order primitive {eqn.primitive.name!r} (at'
      f' {where(eqn)}) contains sows {names} and has no capture rule; move'
      ' the sows out of it or exclude them with capture(..., tag=...,'
      ' names=...).'
  )


def plan(jaxpr: core.Jaxpr, request: Request) -> tuple[Rule | None, ...]:
  """For each equation: the rule to apply, or None to bind it unchanged.

  Outside of any capture (``harvesting`` off), an equation that still
  carries the sow effect of a sub-jaxpr traced for capture (unselected sows
  inside a ``jit``, say) is re-staged by its rule, so that its sows are
  re-bound without the effect and a plain ``jax.jit`` around the result keeps
  JAX's fast dispatch path.
  """
  return cached_plan(jaxpr, request, not primitive.harvesting.value)


@_jax.weakref_lru_cache(trace_context_in_key=False)
def cached_plan(jaxpr: core.Jaxpr, request: Request, strip: bool):
  """``plan``, with ``strip`` given: whether no capture is tracing."""
  rules = tuple(_plan_eqn(eqn, request, strip) for eqn in jaxpr.eqns)
  if not request.refuse_unread or handle_sow not in rules:
    return rules
  read = _read_vars(jaxpr)
  return tuple(
      _handle_unread_sow
      if rule is handle_sow
      and not any(var in read for var in eqn.outvars)
      else rule
      for eqn, rule in zip(jaxpr.eqns, rules)
  )


def _read_vars(jaxpr: core.Jaxpr) -> set[core.Var]:
  """The variables an equation or an output of ``jaxpr`` reads."""
  read = {atom for atom in jaxpr.outvars if isinstance(atom, core.Var)}
  for eqn in jaxpr.eqns:
    read.update(atom for atom in eqn.invars if isinstance(atom, core.Var))
  return read


def _plan_eqn(
    eqn: core.JaxprEqn, request: Request, strip: bool
) -> Rule | None:
  if eqn.primitive is primitive.sow_p:
    if request.handles(eqn.params):
      return handle_sow
    return None if request.rebind_unhandled else drop_sow
  rule = higher_order_rule(eqn.primitive, eqn.params, request)
  if rule is None and strip and primitive.sow_effect in eqn.effects:
    return _rules.RULES.get(eqn.primitive)
  return rule


def higher_order_rule(
    prim: core.Primitive, params: tp.Mapping[str, tp.Any], request: Request
) -> Rule | None:
  """The rule of a ``prim`` whose sub-jaxprs (in ``params``) hold a sow that
  ``request`` handles or drops, or a refusal naming it if it has none;
  ``None`` if they hold no such sow. For an equation, and for a bind under
  an eager interpretation."""
  # A loop rather than `any(...)` of a generator: this runs for every
  # equation of every program captured (a quarter less time per equation).
  for sub in core.jaxprs_in_params(params):
    if contains(sub, request):
      return _rules.RULES.get(prim, _refuse)
  return None


def contains(jaxpr: core.Jaxpr, request: Request) -> bool:
  """Whether ``request`` handles or drops a sow of ``jaxpr``, at any depth."""
  return any(rule is not None for rule in plan(jaxpr, request))


def handled_names(eqn: core.JaxprEqn, request: Request) -> list[tp.Any]:
  """The names of the sows ``request`` handles inside ``eqn``, in order."""
  names = [
      sow.params['sow_name']
      for sub in core.jaxprs_in_params(eqn.params)
      for sow in primitive.sow_equations(sub)
      if request.handles(sow.params)
  ]
  return list(dict.fromkeys(names))


# The rules evaluate sub-jaxprs with the interpreter, which plans with this
# module, so their module imports it; importing it here, once everything above
# is defined, makes the table complete wherever a plan is made (the table is
# read at call time).
# pylint: disable=g-import-not-at-top,cyclic-import
from flax.nnx.sow import rules as _rules  # noqa: E402
