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
"""The jaxpr interpreter behind ``capture``, ``plant`` and ``nnx.capture``.

``evaluate``, the one way in, replays a jaxpr under whatever JAX trace is
current (eager evaluation, ``jit`` staging, ``grad``, ``vmap``...). Each
equation is bound as it is, except:

* a sow the ``Request`` (``request.py``) handles: ``handle_sow`` records its
  values (``capture``) or replaces them by planted ones (``plant``), in the
  ``Scope`` (``scope.py``) of the call; ``drop_sow`` drops one the request
  removes;
* a higher-order equation with such a sow inside: it is handled by its rule
  in ``RULES`` (registered by the modules of ``rules/``), or refused with an
  error naming the primitive.

Which equations need attention is decided once per (jaxpr, request) by the
cached ``plan``; an equation without a handled sow inside is bound
unchanged, so a ``jit`` or a ``custom_vjp`` without sows keeps its
compilation cache and its custom rules.

Two fast paths sit behind ``evaluate``. Under a staging trace (``jit``), a
jaxpr whose handled sows are all first-order equations of its own is not
replayed equation by equation: it is rewritten once (cached) into a jaxpr
that returns the sown values as extra outputs, and staged as one
``closed_call``, which XLA inlines (``rewrite.py``). And ``capture`` mostly
hands over jaxprs with no such sow at all: it takes the sows staged into its
own trace as they are staged (``staged_sows.py``), and a jaxpr with no sow
left is staged as it is. Staging then costs about what tracing ``f`` costs.

Sub-jaxprs are rewritten by tracing ``evaluate`` over them (``transform``). A
transformed jaxpr takes the original inputs followed by the planted leaves of
its planted sites, and returns the original outputs followed by the leaves of
every recorded site. It is cached by the identity of the original, so a
re-bound ``jit`` hits JAX's compilation cache on the next call.
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax
import jax.core
import jax.extend.core as core
import jax.extend.linear_util as lu
import jax.extend.source_info_util as source_info_util
import numpy as np
from jax.interpreters import partial_eval as pe

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import planting
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import rewrite
from flax.nnx.sow.transform import selection as selection_lib
from flax.nnx.sow.transform import staged_sows
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.scope import as_array
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.sites import Site
from flax.nnx.sow.transform.sites import describe_names
from flax.nnx.sow.transform.sites import site_of
from flax.nnx.sow.transform.sites import where


# A rule for a higher-order primitive: (scope, equation, input values) ->
# output values; it records into the scope.
Rule = tp.Callable[[Scope, core.JaxprEqn, list[tp.Any]], list[tp.Any]]

RULES: dict[core.Primitive, Rule] = {}
"""The rule of each higher-order primitive, filled by the modules of
``rules`` (each registers its rules beside their definitions)."""


def register(*prims: core.Primitive) -> tp.Callable[[Rule], Rule]:
  """Registers the decorated rule for ``prims``; returns it unchanged."""

  def decorate(rule: Rule) -> Rule:
    for prim in prims:
      if prim in RULES:
        raise AssertionError(f'two capture rules for {prim.name!r}')
      RULES[prim] = rule
    return rule

  return decorate


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
    raise unread_plant(site, where(eqn))
  return handle_sow(scope, eqn, invals)


def unread_plant(site: Site, location: str) -> ValueError:
  """The error of a planted sow at ``location`` whose result nothing
  reads."""
  return ValueError(
      f'plant: the sow {site.name!r} (tag={site.tag!r}, at {location})'
      ' returns a value the function never uses, so a value planted there'
      ' would change nothing. Use what sow returns (x = sow(x, name=...));'
      ' Module.sow discards it, so plant into a tap of the module'
      ' (flax.nnx.sow.tap) instead.'
  )


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
    return RULES.get(eqn.primitive)
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
      return RULES.get(prim, _refuse)
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


def bind(eqn: core.JaxprEqn, invals: list[tp.Any], **new_params):
  """Binds ``eqn``'s primitive, returning a list of outputs."""
  params = eqn.primitive.get_bind_params(dict(eqn.params, **new_params))
  outs = eqn.primitive.bind(*invals, **params)
  return outs if eqn.primitive.multiple_results else [outs]


def evaluate(
    jaxpr: core.Jaxpr,
    consts: tp.Sequence[tp.Any],
    args: tp.Sequence[tp.Any],
    scope: Scope,
    staged: staged_sows.Harvested | None = None,
) -> list[tp.Any]:
  """Evaluates ``jaxpr`` in ``scope``, which records every sow it handles in
  program order; the one way into the interpreter.

  Args:
    jaxpr: the jaxpr to evaluate.
    consts: the values of its constants.
    args: the values of its inputs.
    scope: the interpretation (its request, planter and records).
    staged: the sows collected as ``jaxpr`` was staged (``staged_sows.py``),
      whose leaves are its last outputs; they are recorded in program order
      and those outputs left out of the result.

  Returns:
    The values of ``jaxpr``'s outputs (without those of ``staged``).
  """
  if staged is None or not staged.sows:
    return _evaluate(jaxpr, consts, args, scope)
  if staged.marked:
    closed = staged_sows.materialize(core.ClosedJaxpr(jaxpr, consts), staged)
    return _evaluate(closed.jaxpr, closed.consts, args, scope)
  outs = _evaluate_unmarked(jaxpr, consts, args, scope)
  num_outs = len(outs) - staged.num_leaves
  leaves = iter(outs[num_outs:])
  for sow in staged.sows:
    site = scope.here(sow.site)
    scope.record(site, [next(leaves) for _ in range(site.num_leaves)])
  return outs[:num_outs]


def _evaluate_unmarked(
    jaxpr: core.Jaxpr,
    consts: tp.Sequence[tp.Any],
    args: tp.Sequence[tp.Any],
    scope: Scope,
) -> list[tp.Any]:
  """``_evaluate``, for a jaxpr traced for capture with no equation carrying
  the sow effect: it has no sow at any depth (each one traced for capture
  carries the effect, and so does an equation holding one), so under a
  staging trace it is staged as it is, as one ``closed_call``.
  """
  trace = rewrite.staging_trace()
  if (
      trace is None
      or jaxpr.is_high
      or any(isinstance(e, _jax.JaxprInputEffect) for e in jaxpr.effects)
  ):
    return _evaluate(jaxpr, consts, args, scope)
  call = rewrite.as_call(jaxpr, jaxpr.eqns, jaxpr.outvars, jaxpr.effects)
  return rewrite.emit_call(trace, call, [*consts, *args])


def _evaluate(
    jaxpr: core.Jaxpr,
    consts: tp.Sequence[tp.Any],
    args: tp.Sequence[tp.Any],
    scope: Scope,
) -> list[tp.Any]:
  """``evaluate`` without staged sows: equation by equation, or as one
  rewritten call under a staging trace."""
  trace = rewrite.staging_trace()
  if trace is not None and scope.request.collect:
    rewritten = rewritten_call(
        jaxpr, scope.request, not primitive.harvesting.value
    )
    if rewritten is not None:
      return rewrite.emit_rewritten(
          trace, rewritten, len(jaxpr.outvars), [*consts, *args], scope
      )
  env: dict[core.Var, tp.Any] = {}

  def read(atom):
    return atom.val if isinstance(atom, core.Literal) else env[atom]

  env.update(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))
  dead = dead_after(jaxpr)
  for var in dead[0]:
    del env[var]
  copyable = rewrite.reemittable(jaxpr) if trace is not None else ()
  for i, (eqn, rule) in enumerate(
      zip(jaxpr.eqns, plan(jaxpr, scope.request))
  ):
    invals = [read(v) for v in eqn.invars]
    if eqn.primitive is primitive.sow_p:  # an identity: it returns literals
      invals = [as_array(v) for v in invals]
    name_stack = (
        source_info_util.current_name_stack() + eqn.source_info.name_stack
    )
    with (
        source_info_util.user_context(
            eqn.source_info.traceback, name_stack=name_stack
        ),
        eqn.ctx.manager,
    ):
      if rule is not None:
        outs = rule(scope, eqn, invals)
      elif trace is not None and copyable[i]:
        outs = rewrite.reemit(trace, eqn, invals)
      else:
        outs = bind(eqn, invals)
    env.update(zip(eqn.outvars, outs))
    # Eagerly, each value is a buffer: drop it once nothing reads it, as
    # `f` itself would (its intermediates die as it goes).
    for var in dead[i + 1]:
      del env[var]
  return [
      as_array(v.val) if isinstance(v, core.Literal) else env[v]
      for v in jaxpr.outvars
  ]


@_jax.weakref_lru_cache(trace_context_in_key=False)
def rewritten_call(
    jaxpr: core.Jaxpr, request: Request, strip: bool
) -> rewrite.Rewritten | None:
  """``jaxpr`` rewritten as one call (``rewrite.py``), if its plan has no
  rule other than recording or dropping first-order sows."""
  if request.planted is not None or jaxpr.is_high:
    # A jaxpr with a Hijax equation is marked ``is_high`` (JAX lowers a
    # jaxpr by that mark alone), so no equation needs checking for it.
    return None
  sows: list[bool | None] = []
  for rule in cached_plan(jaxpr, request, strip):
    if rule is None:
      sows.append(None)
    elif rule is handle_sow or rule is drop_sow:
      sows.append(rule is handle_sow)
    else:
      return None
  return rewrite.rewrite_jaxpr(jaxpr, sows, strip)


@_jax.weakref_lru_cache(trace_context_in_key=False)
def dead_after(jaxpr: core.Jaxpr) -> tuple[tuple[core.Var, ...], ...]:
  """The variables no later equation or output of ``jaxpr`` reads.

  Entry 0 lists the inputs and constants nothing reads; entry ``i + 1`` the
  variables equation ``i`` reads for the last time or defines unread.
  """
  last: dict[core.Var, int] = {}
  for var in (*jaxpr.constvars, *jaxpr.invars):
    last[var] = 0
  for i, eqn in enumerate(jaxpr.eqns, 1):
    for atom in eqn.invars:
      if isinstance(atom, core.Var):
        last[atom] = i
    for var in eqn.outvars:
      last[var] = i
  for atom in jaxpr.outvars:
    if isinstance(atom, core.Var):
      last.pop(atom, None)  # returned: kept to the end
  dead: list[list[core.Var]] = [[] for _ in range(len(jaxpr.eqns) + 1)]
  for var, i in last.items():
    dead[i].append(var)
  return tuple(map(tuple, dead))


@dataclasses.dataclass(frozen=True)
class Transformed:
  """A sub-jaxpr rewritten for a request.

  Attributes:
    jaxpr: takes the original inputs, the planted leaves of
      ``planted_sites``, the index of the first execution of each of
      ``fn_names`` and the ``hoisted`` values, in this order; returns the
      original outputs, the leaves of ``sites`` and the index after the last
      execution of each of ``fn_names``, in this order.
    sites: the recorded sites, in call order.
    planted_sites: the sites that read planted leaves, in call order.
    fn_names: the names planted by a function that the sub-jaxpr sows.
    fn_counts: for each of ``fn_names``, how many times one run executes
      it, or ``None`` if only known at run time (a ``while_loop`` inside).
    hoisted: traced values of enclosing traces that the functions close over
      (see ``planting.hoist_tracers``); empty without functions.
  """

  jaxpr: core.ClosedJaxpr
  sites: tuple[Site, ...]
  planted_sites: tuple[Site, ...]
  fn_names: tuple[primitive.Name, ...] = ()
  fn_counts: tuple[int | None, ...] = ()
  hoisted: tuple[tp.Any, ...] = ()

  @property
  def num_sown_leaves(self) -> int:
    return sum(site.num_leaves for site in self.sites)

  def fn_inputs(self, scope: Scope) -> list[tp.Any]:
    """The arguments after the planted leaves: start indices, hoisted."""
    return [*scope.start_indices(self.fn_names), *self.hoisted]

  def fn_finish(
      self, scope: Scope, ends: tp.Sequence[tp.Any], times: int | None = 1
  ):
    """Advances ``scope``'s counters past ``times`` runs (``None``: known at
    run time only), given the index outputs ``ends`` of the last run."""
    for name, count, end in zip(self.fn_names, self.fn_counts, ends,
                                strict=True):
      total = None if count is None or times is None else count * times
      scope.counter(name).advance(total, end)


def transform(
    closed: core.ClosedJaxpr,
    request: Request,
    fns: planting.Functions | None = None,
) -> Transformed:
  """Traces ``evaluate`` over ``closed`` for ``request``.

  Cached (keyed by trace context) unless ``request`` plants functions: then
  memoized in ``fns``, for one call, since the result holds its tracers.
  """
  if not request.fn_names:
    return _cached_transform(closed, request)
  assert fns is not None, request
  return fns.memo(closed, request, lambda: _transform(closed, request, fns))


def _transform(
    closed: core.ClosedJaxpr,
    request: Request,
    fns: planting.Functions | None,
) -> Transformed:
  to_plant = sites_to_plant(closed, request)
  fn_names = fn_names_in(closed, request)
  planted_avals = [
      jax.core.ShapedArray(shape, dtype)
      for site in to_plant
      for shape, dtype in site.avals
  ]
  index_aval = jax.core.ShapedArray((), np.dtype(np.int32))
  sites: list[Site] = []
  planter_sites: list[Site] = []
  fn_counts: list[int | None] = []

  def body(*args):
    n, m = len(closed.in_avals), len(planted_avals)
    planter = planting.InputPlanter(
        args[n : n + m], dict(zip(fn_names, args[n + m :])), fns
    )
    scope = Scope(request, planter, fns)
    outs = _evaluate(closed.jaxpr, closed.consts, args[:n], scope)
    sites.extend(site for site, _ in scope.records)
    planter_sites.extend(planter.sites)
    counters = [planter.counters[name] for name in fn_names]
    fn_counts.extend(c.static_count for c in counters)
    return [
        *outs,
        *(leaf for _, leaves in scope.records for leaf in leaves),
        *(planting.as_index(c.index) for c in counters),
    ]

  in_avals = [
      *closed.in_avals, *planted_avals, *[index_aval] * len(fn_names)
  ]
  debug = core.DebugInfo('capture', 'capture', None, None)
  jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(
      lu.wrap_init(body, debug_info=debug), in_avals
  )
  jaxpr, consts, hoisted = planting.hoist_tracers(jaxpr, consts)
  assert fns is not None or not hoisted, hoisted
  assert tuple(planter_sites) == to_plant, (planter_sites, to_plant)
  return Transformed(
      core.ClosedJaxpr(jaxpr, consts),
      tuple(sites),
      tuple(planter_sites),
      fn_names,
      tuple(fn_counts),
      tuple(hoisted),
  )


_cached_transform = _jax.weakref_lru_cache(
    lambda closed, request: _transform(closed, request, None)
)
# The cache of the requests without functions, as tests and benchmarks see it.
transform.cache_info = _cached_transform.cache_info  # type: ignore


def sites_to_plant(closed: core.ClosedJaxpr, request: Request):
  """The sites of ``closed`` that read planted leaves, as seen from here.

  They are the sites a collecting request records whose name is planted
  with a tuple of values, so this reuses (and caches) that transformation.
  It collects only the planted sows: another sow (an append in a
  ``while_loop``, which needs a bound to be collected) is not its business.
  """
  if request.planted is None:
    return ()
  selection: selection_lib.SiteFilter = selection_lib.Both(
      request.selection, request.planted)
  if request.fn_names:
    selection = selection_lib.Excluding(selection, frozenset(request.fn_names))
  collecting = dataclasses.replace(
      request, selection=selection, collect=True, planted=None, fn_names=()
  )
  return tuple(
      site
      for site in transform(closed, collecting).sites
      if request.plants(site.params)
  )


def fn_names_in(
    closed: core.ClosedJaxpr, request: Request
) -> tuple[primitive.Name, ...]:
  """The names of ``request.fn_names`` that ``closed`` plants, at any depth."""
  if not request.fn_names:
    return ()
  found = {
      name
      for name, tag in primitive.sow_keys(closed.jaxpr)
      if request.selection.matches({'sow_name': name, 'tag': tag})
      and request.plants({'sow_name': name, 'tag': tag})
  }
  return tuple(name for name in request.fn_names if name in found)


def plants_into(closed: core.ClosedJaxpr, request: Request) -> bool:
  """Whether ``request`` plants a value (or a function) into ``closed``."""
  return bool(sites_to_plant(closed, request) or fn_names_in(closed, request))
