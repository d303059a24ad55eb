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
"""The jaxpr interpreter behind ``capture`` and ``plant``.

``evaluate`` replays a jaxpr under whatever JAX trace is current (eager
evaluation, ``jit`` staging, ``grad``, ``vmap``...). Each equation is bound as
it is, except:

* a sow the ``Request`` handles: its values are recorded (``capture``) or
  replaced by planted ones (``plant``);
* a higher-order equation with such a sow inside: it is handled by its rule
  in ``rules.RULES``, or refused with an error naming the primitive.

Which equations need attention is decided once per (jaxpr, request) by the
cached ``plan``; an equation without a handled sow inside is bound unchanged,
so a ``jit`` or a ``custom_vjp`` without sows keeps its compilation cache and
its custom rules.

Under a staging trace (``jit``), a jaxpr whose handled sows are all
first-order equations of its own is not replayed equation by equation: it is
rewritten once (cached) into a jaxpr that returns the sown values as extra
outputs, and staged as one ``closed_call``, which XLA inlines. Staging then
costs about what tracing ``f`` alone costs. (``capture`` mostly hands over
jaxprs with no such sow at all: it takes the sows staged into its own trace
as they are staged, see ``harvest``, and ``evaluate_unmarked`` stages the
result as it is.)

Sub-jaxprs are rewritten by tracing ``evaluate`` over them (``transform``). A
transformed jaxpr takes the original inputs followed by the planted leaves of
its planted sites, and returns the original outputs followed by the leaves of
every recorded site. It is cached by the identity of the original, so a
re-bound ``jit`` hits JAX's compilation cache on the next call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import typing as tp

import jax
import jax.core
import jax.extend.core as core
import jax.extend.linear_util as lu
import jax.extend.source_info_util as source_info_util
import numpy as np
from jax.interpreters import partial_eval as pe

from flax.nnx.sow import _jax
from flax.nnx.sow import intervene
from flax.nnx.sow import primitive
from flax.nnx.sow.selection import Selection
from flax.nnx.sow.selection import SiteFilter


@dataclasses.dataclass(frozen=True)
class Request:
  """What an interpretation does; hashable, so part of every cache key.

  Attributes:
    selection: the sows this interpretation may handle.
    collect: record the values of the selected sows (``capture``).
    planted: the selected sows that take planted values (``plant``), or
      ``None``.
    rebind_unhandled: re-bind the sows it does not handle, so that an
      enclosing interpretation still sees them; ``False`` drops every sow.
    refuse_unread: planting into a sow whose result the program never reads
      is an error (``plant``); ``nnx.capture`` plants ``init`` perturbations
      wherever legacy added them, read or not.
    fn_names: the planted names whose values a function computes from the
      sown value (``plant(f, {name: fn})``), in a fixed order; the functions
      themselves are per call (``Scope.fns``).
  """

  selection: SiteFilter
  collect: bool = True
  planted: SiteFilter | None = None
  rebind_unhandled: bool = True
  refuse_unread: bool = False
  fn_names: tuple[primitive.Name, ...] = ()

  def handles(self, params: dict[str, tp.Any]) -> bool:
    return self.selection.matches(params) and (
        self.collect or self.plants(params)
    )

  def plants(self, params: tp.Mapping[str, tp.Any]) -> bool:
    """Whether a selected sow with these ``params`` takes a planted value."""
    return self.planted is not None and self.planted.matches(params)


STRIP_ALL_SOWS = Request(
    Selection(), collect=False, planted=None, rebind_unhandled=False
)

Aval = tuple[tuple[int, ...], np.dtype]


@dataclasses.dataclass(frozen=True)
class Site:
  """The static description of one sow site as seen from one scope.

  Attributes:
    name, tag, mode, tree: the sow's parameters.
    avals: (shape, dtype) of each leaf, as seen from this scope.
    vmapped: how many leading axes of the sown leaves come from ``vmap``s
      (outermost first), as counted by the sow's batching rule.
    inner_vmaps: how many of those vmaps were applied inside this scope's
      jaxpr (on the sow itself or on an equation between it and this scope);
      the others were applied outside, to an equation holding this jaxpr.
  """

  name: primitive.Name
  tag: tp.Hashable
  mode: str
  tree: tp.Any  # jax.tree_util.PyTreeDef
  avals: tuple[Aval, ...]
  vmapped: int = 0
  inner_vmaps: int = 0

  @property
  def num_leaves(self) -> int:
    return self.tree.num_leaves

  @property
  def outer_vmaps(self) -> int:
    """The leading axes from vmaps applied outside this scope's jaxpr: a loop
    of this scope adds its axis after them."""
    return self.vmapped - self.inner_vmaps

  def with_leading(self, *dims: int) -> Site:
    """This site seen from outside a map that adds leading axes."""
    avals = tuple(((*dims, *shape), dtype) for shape, dtype in self.avals)
    return dataclasses.replace(self, avals=avals)

  def with_loop_axis(self, length: int) -> Site:
    """This site seen from outside a loop that stacks its values: the loop
    axis comes after the axes of the vmaps applied outside the loop."""
    at = self.outer_vmaps
    avals = tuple(
        ((*shape[:at], length, *shape[at:]), dtype)
        for shape, dtype in self.avals
    )
    return dataclasses.replace(self, avals=avals)

  def seen_through(self, vmaps: int) -> Site:
    """This site seen from the jaxpr holding an equation that ``vmaps``
    vmaps were applied to."""
    if not vmaps:
      return self
    return dataclasses.replace(self, inner_vmaps=self.inner_vmaps + vmaps)


def vmaps_of(eqn: core.JaxprEqn) -> int:
  """How many ``vmap``s were applied to ``eqn`` at its own level.

  JAX records each transformation in the name stack of the equations it
  emits, relative to their jaxpr: a scan batched by a vmap outside it reads
  ``vmap()`` while its body does not; a vmap inside the body marks the
  body's equations instead.
  """
  return vmaps_in(eqn.source_info)


def vmaps_in(source_info: tp.Any) -> int:
  """``vmaps_of`` an equation staged with ``source_info``."""
  return sum(
      1
      for part in source_info.name_stack.stack
      if isinstance(part, _jax.Transform) and part.name == 'vmap'
  )


def aval_of(value: tp.Any) -> Aval:
  aval = jax.typeof(value)
  return tuple(aval.shape), np.dtype(aval.dtype)


@functools.lru_cache(maxsize=256)
def _avals(jax_avals: tuple[tp.Any, ...]) -> tuple[Aval, ...]:
  # Shared between sites: a program with thousands of sows of a few shapes
  # then allocates no tuples per sow (fewer garbage collections).
  return tuple((tuple(a.shape), np.dtype(a.dtype)) for a in jax_avals)


def site_of(eqn: core.JaxprEqn) -> Site:
  return site_at(eqn.params, eqn.invars, eqn.source_info)


def site_at(
    params: tp.Mapping[str, tp.Any],
    values: tp.Sequence[tp.Any],
    source_info: tp.Any,
) -> Site:
  """The site of a sow with ``params`` of ``values`` (variables or tracers),
  staged with ``source_info``."""
  return Site(
      name=params['sow_name'],
      tag=params['tag'],
      mode=params['mode'],
      tree=params['tree'],
      avals=_avals(tuple(v.aval for v in values)),
      vmapped=params['vmapped'],
      inner_vmaps=vmaps_in(source_info),
  )


def check_entry(
    site: Site,
    entry: tp.Any,
    *,
    where: str,
    site_has: str = 'the sow has',
) -> list[jax.Array]:
  """The leaves of ``entry``, a value planted at ``site``, checked against it.

  Raises:
    ValueError: ``entry`` has another structure, shape or dtype than the
      values sown at ``site``; the message starts with ``where`` and says
      what ``site_has``.
  """
  leaves, tree = jax.tree_util.tree_flatten(entry)
  if tree != site.tree:
    raise ValueError(
        f'{where} has structure {tree}, but {site_has} structure'
        f' {site.tree}.'
    )
  checked = []
  for leaf, (shape, dtype) in zip(leaves, site.avals):
    leaf = leaf if isinstance(leaf, jax.Array) else jax.numpy.asarray(leaf)
    got_shape, got_dtype = aval_of(leaf)
    if (got_shape, got_dtype) != (shape, dtype):
      raise ValueError(
          f'{where} has a leaf of {np.dtype(got_dtype).name}'
          f'{list(got_shape)}, but {site_has}'
          f' {np.dtype(dtype).name}{list(shape)}.'
      )
    checked.append(leaf)
  return checked


# One executed sow site: its site and its flat leaf values.
Record = tuple[Site, list[tp.Any]]


class Planter(tp.Protocol):

  def take(
      self, site: Site, leaves: tp.Sequence[tp.Any] | None
  ) -> list[tp.Any]:
    """The planted leaves for this execution of ``site``, which sows
    ``leaves`` (``None`` from a rule: a site that takes a tuple entry)."""


class FnPlanter(Planter, tp.Protocol):
  """A planter of ``Request.fn_names``: it counts their executions."""

  def counter(self, name: primitive.Name) -> intervene.Counter:
    """The occurrence counter of a name planted by a function."""


class Scope:
  """The mutable state of one ``evaluate`` call."""

  def __init__(
      self,
      request: Request,
      planter: Planter | None = None,
      fns: intervene.Functions | None = None,
  ):
    self.request = request
    self.planter = planter
    # The functions of `request.fn_names` (plant(f, {name: fn})).
    self.fns = fns
    # Superseded records become None (see `record`); `records` skips them.
    self._records: list[Record | None] = []
    # Per name: where its first live record is, and how many it has (ints,
    # not a list per name: a program may sow thousands of names).
    self._first: dict[primitive.Name, int] = {}
    self._count: dict[primitive.Name, int] = {}
    # vmaps on the call equations whose bodies are being evaluated in place
    # (see `inlined`): for the sites found there, they are inner vmaps.
    self.inline_vmaps = 0

  def here(self, site: Site, via: core.JaxprEqn | None = None) -> Site:
    """``site`` as seen from this scope's root jaxpr.

    Args:
      site: a site as seen from the jaxpr it was found in: the jaxpr being
        evaluated, or (``via``) a sub-jaxpr of the equation ``via``.
      via: the equation whose sub-jaxpr holds the site, if any.
    """
    vmaps = self.inline_vmaps + (0 if via is None else vmaps_of(via))
    return site.seen_through(vmaps)

  @contextlib.contextmanager
  def inlined(self, eqn: core.JaxprEqn):
    """While the body of the call ``eqn`` is evaluated in this scope."""
    vmaps = vmaps_of(eqn)
    self.inline_vmaps += vmaps
    try:
      yield
    finally:
      self.inline_vmaps -= vmaps

  @property
  def records(self) -> list[Record]:
    """The records of this scope, in program order."""
    return [record for record in self._records if record is not None]

  def record(self, site: Site, leaves: tp.Sequence[tp.Any]):
    if not self.request.collect:
      return
    # A higher-order primitive bound eagerly may return a literal of its
    # body as a raw literal value (checkpoint does): record arrays.
    self.record_arrays(site, list(map(as_array, leaves)))

  def record_arrays(self, site: Site, leaves: list[tp.Any]):
    """``record``, for leaves known to be arrays or tracers, in a list of
    their own (which the record keeps)."""
    if not self.request.collect:
      return
    record = (site, leaves)
    name = site.name
    if site.mode == 'clobber' and name in self._first:
      live = self._live(name)
      if {r[0].tag for _, r in live} == {site.tag}:
        # The values it supersedes are dropped now, so that an eager
        # capture frees them as `f` itself would. It takes the place of the
        # first of them, which fixes the order of the names. Under several
        # tags, which `capture` (by name) and `nnx.capture` (by name and tag)
        # supersede differently, every record stays.
        for i, _ in live[1:]:
          self._records[i] = None
        self._records[live[0][0]] = record
        self._count[name] = 1
        return
    self._first.setdefault(name, len(self._records))
    self._count[name] = self._count.get(name, 0) + 1
    self._records.append(record)

  def _live(self, name: primitive.Name) -> list[tuple[int, Record]]:
    """The live records of ``name`` with their positions, first first."""
    first = self._first[name]
    if self._count[name] == 1:  # a loop of clobbers: found at once
      record = self._records[first]
      assert record is not None
      return [(first, record)]
    live = []
    for i in range(first, len(self._records)):  # no copy of the list
      record = self._records[i]
      if record is not None and record[0].name == name:
        live.append((i, record))
    return live

  def transform(self, closed: core.ClosedJaxpr) -> Transformed:
    """``closed``, a sub-jaxpr of this scope, transformed for its request."""
    return transform(closed, self.request, self.fns)

  def counter(self, name: primitive.Name) -> intervene.Counter:
    """The occurrence counter of ``name``, planted by a function."""
    return tp.cast(FnPlanter, self.planter).counter(name)

  def plant(
      self, site: Site, leaves: tp.Sequence[tp.Any] | None = None
  ) -> list[tp.Any] | None:
    if self.planter is None or not self.request.plants(
        {'sow_name': site.name, 'tag': site.tag}
    ):
      return None
    if site.mode == 'clobber':
      raise ValueError(
          f'plant: {site.name!r} is sown with mode=\'clobber\', so capture'
          ' keeps only its last value and there is no value per sow to plant;'
          ' sow it with mode=\'append\' to plant it.'
      )
    return self.planter.take(site, leaves)

  def last_record(self, name: primitive.Name) -> Record | None:
    for record in reversed(self._records):
      if record is not None and record[0].name == name:
        return record
    return None


# A rule for a higher-order primitive: (scope, equation, input values) ->
# output values; it records into the scope.
Rule = tp.Callable[[Scope, core.JaxprEqn, list[tp.Any]], list[tp.Any]]


def as_array(value: tp.Any) -> tp.Any:
  """A value read from a jaxpr literal as the JAX array ``f`` would give.

  Literals are read as JAX's typed Python/NumPy scalars (``TypedInt``,
  ``TypedNdArray``, a plain ``bool``...), which must not reach the caller:
  ``np.asarray(TypedInt(3))`` is an int64, for instance.
  """
  if isinstance(value, (jax.Array, jax.core.Tracer)):
    return value
  return jax.numpy.asarray(value)


def _handle_sow(scope: Scope, eqn: core.JaxprEqn, invals: list[tp.Any]):
  site = scope.here(site_of(eqn))
  planted = scope.plant(site, invals)
  scope.record(site, invals)
  return invals if planted is None else planted


def _handle_unread_sow(
    scope: Scope, eqn: core.JaxprEqn, invals: list[tp.Any]
):
  """``_handle_sow`` for a sow whose result nothing reads.

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
  return _handle_sow(scope, eqn, invals)


def _drop_sow(scope: Scope, eqn: core.JaxprEqn, invals: list[tp.Any]):
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
  return _plan(jaxpr, request, not primitive.harvesting.value)


@_jax.weakref_lru_cache(trace_context_in_key=False)
def _plan(jaxpr: core.Jaxpr, request: Request, strip: bool):
  rules = tuple(_plan_eqn(eqn, request, strip) for eqn in jaxpr.eqns)
  if not request.refuse_unread or _handle_sow not in rules:
    return rules
  read = _read_vars(jaxpr)
  return tuple(
      _handle_unread_sow
      if rule is _handle_sow
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
      return _handle_sow
    return None if request.rebind_unhandled else _drop_sow
  # A loop rather than `any(...)` of a generator: this runs for every
  # equation of every program captured (a quarter less time per equation).
  for sub in core.jaxprs_in_params(eqn.params):
    if contains(sub, request):
      return _rules.RULES.get(eqn.primitive, _refuse)
  if strip and primitive.sow_effect in eqn.effects:
    return _rules.RULES.get(eqn.primitive)
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


def describe_names(names: tp.Iterable[tp.Any]) -> str:
  return ', '.join(sorted(map(repr, names))) or '(none)'


# This package's files: an equation's location skips them (a sow is bound
# by `primitive.sow`, a module's sow by `Module.sow`), to name user code.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_COMPAT_DIR = os.path.join(os.path.dirname(_PACKAGE_DIR), 'capture_compat')


def where(eqn: core.JaxprEqn) -> str:
  """Where ``eqn`` was traced: the first frame outside JAX and this
  package."""
  for frame in _jax.user_frames(eqn.source_info.traceback):
    if not frame.file_name.startswith((_PACKAGE_DIR, _COMPAT_DIR)):
      return f'{frame.file_name}:{frame.start_line} ({frame.function_name})'
  return source_info_util.summarize(eqn.source_info)


def bind(eqn: core.JaxprEqn, invals: list[tp.Any], **new_params):
  """Binds ``eqn``'s primitive, returning a list of outputs."""
  params = eqn.primitive.get_bind_params(dict(eqn.params, **new_params))
  outs = eqn.primitive.bind(*invals, **params)
  return outs if eqn.primitive.multiple_results else [outs]


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


def _staging_trace() -> _jax.DynamicJaxprTrace | None:
  trace = _jax.trace_ctx.trace
  if type(trace) is _jax.DynamicJaxprTrace and not trace.requires_low:
    return trace
  return None


def _reemit(trace: _jax.DynamicJaxprTrace, eqn: core.JaxprEqn, invals):
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
class _Rewritten:
  """A jaxpr whose handled sows need no rule, rewritten as a whole.

  Attributes:
    call: takes the original constants and inputs; returns the original
      outputs followed by the leaves of ``sites``, in order.
    sites: the recorded sites, in program order.
  """

  call: core.ClosedJaxpr
  sites: tuple[Site, ...]


@_jax.weakref_lru_cache(trace_context_in_key=False)
def _rewrite(
    jaxpr: core.Jaxpr, request: Request, strip: bool
) -> _Rewritten | None:
  """``jaxpr`` with its handled sows removed and their inputs returned.

  The common case of a staged capture: every handled sow is a first-order
  equation of ``jaxpr`` itself. Staging ``evaluate`` would then only copy
  the equations, one tracer at a time; instead, they are copied once into a
  new jaxpr, staged as a single ``closed_call`` (which XLA inlines). Returns
  ``None`` where equations need more than that: a rule, planting, Hijax
  types, or effects that refer to inputs by position.
  """
  if request.planted is not None or jaxpr.is_high:
    # A jaxpr with a Hijax equation is marked ``is_high`` (JAX lowers a
    # jaxpr by that mark alone), so no equation needs checking for it.
    return None
  rules = _plan(jaxpr, request, strip)
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
  for eqn, rule in zip(jaxpr.eqns, rules):
    if rule is not None:
      if rule is not _handle_sow and rule is not _drop_sow:
        return None
      invars = (
          list(map(read, eqn.invars)) if reads_removed(eqn) else eqn.invars
      )
      if rule is _handle_sow:
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
  call = _as_call(jaxpr, eqns, outvars, effects)
  return _Rewritten(call, tuple(sites))


def _as_call(
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


def _emit_call(
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


def evaluate_unmarked(
    jaxpr: core.Jaxpr,
    consts: tp.Sequence[tp.Any],
    args: tp.Sequence[tp.Any],
    scope: Scope,
) -> list[tp.Any]:
  """``evaluate``, for a jaxpr traced for capture with no equation carrying
  the sow effect: it has no sow at any depth (each one traced for capture
  carries the effect, and so does an equation holding one), so under a
  staging trace it is staged as it is, as one ``closed_call``.
  """
  staging = _staging_trace()
  if (
      staging is None
      or jaxpr.is_high
      or any(isinstance(e, _jax.JaxprInputEffect) for e in jaxpr.effects)
  ):
    return evaluate(jaxpr, consts, args, scope)
  call = _as_call(jaxpr, jaxpr.eqns, jaxpr.outvars, jaxpr.effects)
  return _emit_call(staging, call, [*consts, *args])


def _evaluate_rewritten(
    trace: _jax.DynamicJaxprTrace,
    rewritten: _Rewritten,
    num_outs: int,
    values: tp.Sequence[tp.Any],
    scope: Scope,
) -> list[tp.Any]:
  outs = _emit_call(trace, rewritten.call, values)
  start = num_outs
  for site in rewritten.sites:
    end = start + site.num_leaves
    scope.record_arrays(scope.here(site), outs[start:end])
    start = end
  return outs[:num_outs]


def evaluate(
    jaxpr: core.Jaxpr,
    consts: tp.Sequence[tp.Any],
    args: tp.Sequence[tp.Any],
    scope: Scope,
) -> list[tp.Any]:
  """Evaluates ``jaxpr`` in ``scope``, which collects the records."""
  staging = _staging_trace()
  if staging is not None and scope.request.collect:
    rewritten = _rewrite(
        jaxpr, scope.request, not primitive.harvesting.value
    )
    if rewritten is not None:
      return _evaluate_rewritten(
          staging, rewritten, len(jaxpr.outvars), [*consts, *args], scope
      )
  env: dict[core.Var, tp.Any] = {}

  def read(atom):
    return atom.val if isinstance(atom, core.Literal) else env[atom]

  env.update(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))
  dead = dead_after(jaxpr)
  for var in dead[0]:
    del env[var]
  copyable = reemittable(jaxpr) if staging is not None else ()
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
      elif staging is not None and copyable[i]:
        outs = _reemit(staging, eqn, invals)
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
      (see ``intervene.hoist_tracers``); empty without functions.
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

  @property
  def num_planted_leaves(self) -> int:
    return sum(site.num_leaves for site in self.planted_sites)

  def fn_inputs(self, scope: Scope) -> list[tp.Any]:
    """The arguments after the planted leaves: start indices, hoisted."""
    starts = [
        intervene.as_index(scope.counter(name).index) for name in self.fn_names
    ]
    return [*starts, *self.hoisted]

  def fn_finish(
      self, scope: Scope, ends: tp.Sequence[tp.Any], times: int | None = 1
  ):
    """Advances ``scope``'s counters past ``times`` runs (``None``: known at
    run time only), given the index outputs ``ends`` of the last run."""
    for name, count, end in zip(self.fn_names, self.fn_counts, ends,
                                strict=True):
      total = None if count is None or times is None else count * times
      scope.counter(name).advance(total, end)


class _InputPlanter(intervene.Counting):
  """Hands out planted leaves that arrive as extra jaxpr inputs, and the
  values the functions of ``fns`` compute, counting from input indices."""

  def __init__(
      self,
      leaves: tp.Sequence[tp.Any],
      starts: dict[primitive.Name, tp.Any],
      fns: intervene.Functions | None,
  ):
    super().__init__(starts, fns)
    self.leaves = list(leaves)
    self.sites: list[Site] = []

  def take(self, site: Site, leaves: tp.Sequence[tp.Any] | None):
    computed = self.computed(site, leaves)
    if computed is not None:
      return computed
    self.sites.append(site)
    taken, self.leaves = (
        self.leaves[: site.num_leaves],
        self.leaves[site.num_leaves :],
    )
    return taken


def transform(
    closed: core.ClosedJaxpr,
    request: Request,
    fns: intervene.Functions | None = None,
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
    fns: intervene.Functions | None,
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
    planter = _InputPlanter(
        args[n : n + m], dict(zip(fn_names, args[n + m :])), fns
    )
    scope = Scope(request, planter, fns)
    outs = evaluate(closed.jaxpr, closed.consts, args[:n], scope)
    sites.extend(site for site, _ in scope.records)
    planter_sites.extend(planter.sites)
    counters = [planter.counters[name] for name in fn_names]
    fn_counts.extend(c.static_count for c in counters)
    return [
        *outs,
        *(leaf for _, leaves in scope.records for leaf in leaves),
        *(intervene.as_index(c.index) for c in counters),
    ]

  in_avals = [
      *closed.in_avals, *planted_avals, *[index_aval] * len(fn_names)
  ]
  debug = core.DebugInfo('capture', 'capture', None, None)
  jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(
      lu.wrap_init(body, debug_info=debug), in_avals
  )
  jaxpr, consts, hoisted = intervene.hoist_tracers(jaxpr, consts)
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
  """
  if request.planted is None:
    return ()
  selection = request.selection
  if request.fn_names:
    selection = _Excluding(selection, frozenset(request.fn_names))
  collecting = dataclasses.replace(
      request, selection=selection, collect=True, planted=None, fn_names=()
  )
  return tuple(
      site
      for site in transform(closed, collecting).sites
      if request.plants({'sow_name': site.name, 'tag': site.tag})
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


@dataclasses.dataclass(frozen=True)
class _Excluding:
  """``selection`` without the sows named in ``names``."""

  selection: SiteFilter
  names: frozenset

  def matches(self, params: tp.Mapping[str, tp.Any]) -> bool:
    return params['sow_name'] not in self.names and self.selection.matches(
        params
    )


def split_records(
    sites: tp.Sequence[Site], leaves: tp.Sequence[tp.Any]
) -> list[Record]:
  """Pairs each site with its slice of a flat list of sown leaves."""
  records, start = [], 0
  for site in sites:
    records.append((site, list(leaves[start : start + site.num_leaves])))
    start += site.num_leaves
  assert start == len(leaves), (start, len(leaves))
  return records


# The rules evaluate sub-jaxprs with this module, so their module imports this
# one; importing it here, once everything above is defined, makes the table
# complete wherever the interpreter is used (the table is read at call time).
# pylint: disable=g-import-not-at-top,cyclic-import
from flax.nnx.sow import rules as _rules  # noqa: E402
