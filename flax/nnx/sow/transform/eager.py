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
"""Eager interpretation: a JAX trace that sees every bind as it happens.

Outside any JAX trace, ``capture(f)(*args)`` is a direct call of ``f``: its
Python runs on every call, reads every global, closure and attribute as they
are then, and its side effects happen, as in ``f(*args)`` itself. No trace is
made of ``f`` and none is reused across calls. What makes the sows visible is
:class:`EagerTrace`, the current JAX trace while ``f`` runs:

* every first-order primitive is handed to JAX's eager evaluation as it is
  (so it costs what it costs in ``f`` itself);
* a ``sow`` the request handles is recorded (or planted) where it is bound,
  in the :class:`~flax.nnx.sow.transform.scope.Scope` of the call;
* a higher-order primitive (``jit``, ``scan``, ``cond``, ``while``,
  ``remat``, ``custom_jvp``/``custom_vjp`` calls inside a jaxpr,
  ``shard_map``) whose sub-jaxprs hold a handled sow goes to its rule in the
  interpreter's rule table, the same table that interprets staged jaxprs; the
  sub-jaxpr it transforms is cached by the identity of the one JAX hands
  over, and JAX reuses the jaxpr of an inner ``jax.jit`` across calls, so the
  transformed program compiles once;
* a ``custom_jvp``/``custom_vjp`` function called eagerly runs its Python
  under this trace, as JAX's eager evaluation runs it;
* a selection by a name predicate asks it about each name once per call, as
  the call meets the name (a sow, or the sows inside a higher-order
  primitive), and selects the names it said yes to;
* an unjitted ``shard_map`` (which JAX would run primitive by primitive,
  where no trace sees a sow) is staged, its body's Python run once, and its
  equation interpreted as a jaxpr's;
* for an eager ``plant``, the values planted at sows bound here are held
  until an operation reads them (:class:`Unread`), so that a planted value
  nothing uses is refused as when staged.

Under ``jax.grad``, ``jax.vmap`` and the like inside ``f``, the sows reach
this trace through those transformations' own rules, with primal (and
batched) values, exactly as they reach a staged capture.

Two details of JAX make the trace work, both in the funnel module:

1. ``jax.jit`` calls take a compiled fast path that never binds, keyed by
   the configuration in JAX's jit key. ``harvesting``, which is on while a
   capture interprets ``f``, is part of that key, so a jitted function called
   inside an eager capture never takes a fast path recorded outside one. JAX
   records no fast path for a call that is not at the top level, so under
   this trace every ``jit`` (``jax.numpy``'s own among them: ``jnp.add``,
   ``relu``) would go through JAX's Python dispatch on every call. Instead,
   a ``jit`` whose program holds no sow at any depth runs its first call as
   at the top level, which records the compiled fast path under the
   capturing key: it never binds again, and costs what it costs in ``f``.
   Whether a program holds a sow does not depend on what a capture selects,
   so such a fast path can drop no sow of any later capture; a ``jit`` whose
   program holds one is bound on every call and reaches its rule, and never
   records a fast path under the capturing key, also when called at the top
   level while a capture runs (a plant's function). While an eager ``plant``
   runs, no fast path is recorded or taken (:data:`tracking_reads`).
2. NNX refuses to update a Variable from another JAX trace than the one it
   was created under, to keep tracers from leaking. This trace makes no
   tracers (its values are JAX's concrete arrays, as at the top level), so it
   takes the weak reference by which the trace it runs under is known to
   NNX: ``f`` updates the caller's modules in place, as a direct call does.
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax
import jax.core
import jax.extend.core as core
import jax.extend.source_info_util as source_info_util

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import deferred
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.scope import as_array
from flax.nnx.sow.transform.selection import Selection
from flax.nnx.sow.transform.sites import Site
from flax.nnx.sow.transform.sites import site_at
from flax.nnx.sow.transform.sites import where_bound


def can_run() -> bool:
  """Whether a call now runs eagerly: at JAX's top level, or directly
  inside another eager interpretation (a nested eager ``capture``)."""
  return _jax.trace_ctx.is_top_level() or (
      type(_jax.trace_ctx.trace) is EagerTrace
  )


# On while an eager `plant` runs (see `Unread`). In JAX's jit key, so that
# no compiled fast path of a jit, which would pass the planted values it
# reads unseen, is recorded or taken then.
# Kept across a reload of this module, as `primitive.harvesting` is.
tracking_reads = globals().get('tracking_reads') or jax.make_user_context(
    default_value=False)


def can_track_reads() -> bool:
  """Whether an eager interpretation can tell which planted values are read
  (:class:`Unread`): only where the jit dispatch is chosen here, so that no
  jit passes them by on a compiled fast path."""
  return _jax.jit_dispatch_is_set()


def run(scope: Scope, call: tp.Callable[[], tp.Any],
        unread: Unread | None = None) -> tp.Any:
  """Runs ``call()`` eagerly, interpreting its binds in ``scope``.

  Call it only where :func:`can_run`. The sows ``scope.request`` handles are
  recorded in ``scope`` (or take planted values); the others reach the
  enclosing trace, so an enclosing capture sees them. With ``unread``, the
  values planted at sows bound directly are kept there until an operation
  reads them (see :class:`Unread`).
  """
  trace = EagerTrace(_jax.trace_ctx.trace, scope, unread)
  if unread is None:
    with primitive.harvesting(True), core.set_current_trace(trace):
      return call()
  with (primitive.harvesting(True), tracking_reads(True),
        core.set_current_trace(trace)):
    return call()


class Unread:
  """The values planted at sows bound eagerly that nothing has read yet.

  A staged ``plant`` refuses a planted sow whose result the program never
  reads (it would change nothing: ``Module.sow`` discards what ``sow``
  returns); a jaxpr says so. Eagerly, a planted value counts as read once
  an operation takes it (every bind, jits included, while
  :data:`tracking_reads` keeps JAX's compiled fast path off), or once the
  caller finds it in what the call returns or left in its graph nodes
  (:meth:`read`). Held by identity, with the value, so an identity is not
  reused while it waits.
  """

  def __init__(self):
    # Per planted sow executed, by number: its leaves (held, so that their
    # identities are not reused), its site and where it was bound; and the
    # number of each leaf, by identity. As staged, a sow counts as read
    # once any of its leaves is.
    self.sows: dict[int, tuple[list[tp.Any], Site, tp.Any]] = {}
    self.values: dict[int, int] = {}
    self._planted = 0

  def planted(self, site: Site, leaves: tp.Sequence[tp.Any],
              source_info: tp.Any) -> None:
    number = self._planted
    self._planted += 1
    self.sows[number] = (list(leaves), site, source_info)
    for leaf in leaves:
      self.values[id(leaf)] = number

  def read(self, values: tp.Iterable[tp.Any]) -> None:
    for value in values:
      number = self.values.pop(id(value), None)
      if number is not None:
        leaves, _, _ = self.sows.pop(number)
        for leaf in leaves:
          self.values.pop(id(leaf), None)

  def first(self) -> tuple[Site, str] | None:
    """The site of the first planted sow still unread and where it was
    bound."""
    for _, site, source_info in self.sows.values():
      return site, where_bound(source_info)
    return None


_JAXPRS = (core.Jaxpr, core.ClosedJaxpr)


def _has_jaxprs(params: dict[str, tp.Any]) -> bool:
  """Whether ``core.jaxprs_in_params(params)`` yields anything: a jaxpr as a
  value or inside a tuple value, the only places JAX (and so every rule)
  looks. This runs for every primitive bound eagerly, most of which hold no
  jaxpr but many a tuple (shapes, dimension numbers), which must not send
  them down the higher-order path."""
  for value in params.values():
    if isinstance(value, _JAXPRS):
      return True
    if isinstance(value, tuple):
      for item in value:
        if isinstance(item, _JAXPRS):
          return True
  return False


class EagerTrace(jax.core.Trace):
  """The trace of an eager interpretation (see the module docstring).

  Attributes:
    parent: the trace ``f`` was called under: JAX's eval trace, or the
      trace of an enclosing eager interpretation.
    scope: what this interpretation records and plants.
  """

  def __init__(self, parent: tp.Any, scope: Scope,
               unread: Unread | None = None):
    super().__init__()
    self.parent = parent
    self.scope = scope
    self.unread = unread
    # Known to NNX as the trace it runs under (see the module docstring, 2).
    # JAX's jit key holds this reference too; `harvesting` tells the two
    # apart there.
    self._weakref = parent._weakref
    # A selection by a name predicate is asked about each name as the call
    # meets it, once per name (see `_ask`): the scope's request selects the
    # names it said yes to so far.
    selection = scope.request.selection
    self._predicate: Selection | None = None
    self._answers: dict[primitive.Name, bool] = {}
    if isinstance(selection, Selection) and selection.by_predicate:
      self._predicate = selection
      scope.request = dataclasses.replace(
          scope.request, selection=selection.answered(frozenset()))
    # Whether the names met are asked about: by the predicate, or by the
    # scope's own `on_names` (an eager plant by pattern).
    self._meeting = self._predicate is not None or (
        scope.on_names is not None)

  def process_primitive(self, prim, args, params):
    # `Primitive.bind` made the eval trace current before calling this.
    if self.unread is not None:  # an eager plant (every primitive comes here)
      self._read(args)
    if prim is primitive.sow_p:
      if deferred.is_deferred(params):
        return self._deferred_sow(args, params)
      if self._meeting:
        self._meet(((params['sow_name'], params['tag']),))
      return self._sow(args, params)
    rule = None
    if _has_jaxprs(params):
      # Deferred sows inside are named from the values bound here.
      params = deferred.rename_params(prim, params, args)
      # Walked only if a message needs the names (see `Scope.passed`).
      self.scope.passed_params.append(params)
      if self._meeting:
        self._meet([key for sub in core.jaxprs_in_params(params)
                    for key in primitive.sow_keys(sub)])
      rule = interpreter.higher_order_rule(prim, params, self.scope.request)
    if rule is not None:
      eqn = _equation(prim, args, params)
      with core.set_current_trace(self.parent):
        return rule(self.scope, eqn, list(args))
    return self._forward(prim, args, params)

  def _forward(self, prim, args, params):
    """Binds ``prim`` in the parent trace."""
    parent = self.parent
    if parent is _jax.eval_trace:
      return prim.bind_with_trace(
          parent, args, [jax.typeof(a) for a in args], params
      )
    with core.set_current_trace(parent):
      return prim.bind(*args, **params)

  def _read(self, args: tp.Sequence[tp.Any]) -> None:
    if self.unread is not None and self.unread.values:
      self.unread.read(args)

  def _meet(self, keys: tp.Sequence[tuple[primitive.Name, tp.Hashable]]):
    """Tells the name predicate and the scope's ``on_names`` of the sows
    ``keys`` (those about to be bound, or inside a primitive about to be
    bound): each may widen the scope's request before it is asked."""
    if self._predicate is not None:
      self._ask(keys)
    if self.scope.on_names is not None:
      self.scope.on_names(self.scope, keys)

  def _ask(self, keys: tp.Iterable[tuple[primitive.Name, tp.Hashable]]):
    """Asks the name predicate about the names of ``keys`` not asked yet,
    and widens the scope's request to the names it selects."""
    predicate = tp.cast(Selection, self._predicate)
    tag = predicate.tag
    new = [name for name, t in keys
           if (tag is None or t == tag) and name not in self._answers]
    if not new:
      return
    yes = False
    for name in dict.fromkeys(new):
      self._answers[name] = answer = bool(
          tp.cast(tp.Callable[[tp.Any], bool], predicate.names)(name))
      yes = yes or answer
    if yes:
      selected = frozenset(n for n, a in self._answers.items() if a)
      self.scope.request = dataclasses.replace(
          self.scope.request, selection=predicate.answered(selected))

  def _sow(self, args, params):
    if not self.scope.request.handles(params):
      self.scope.passed.add((params['sow_name'], params['tag']))
      return self._forward(primitive.sow_p, args, params)
    leaves = [as_array(a) for a in args]
    source_info = source_info_util.current()
    site = site_at(params, leaves, source_info)
    out = interpreter.handle_site(self.scope, site, leaves)
    if self.unread is not None and self.scope.request.plants(params):
      self.unread.planted(site, out, source_info)
    return out

  def _deferred_sow(self, args, params):
    """A deferred sow bound here (under ``vmap`` of a module, say): named
    from its anchors' values, then handled as any sow; its anchors pass
    through."""
    resolution, named = deferred.resolve_bound(params, args)
    if resolution is None:
      # No running capture holds its module: an enclosing interpretation
      # may, or nothing does.
      if type(self.parent) is EagerTrace:
        return self._forward(primitive.sow_p, args, params)
      raise deferred.refusal(params)
    count = len(args) - params['anchors']
    values, anchors = list(args[:count]), list(args[count:])
    if resolution is deferred.DROP:
      return values + anchors
    assert named is not None
    if self._meeting:
      self._meet(((named['sow_name'], named['tag']),))
    return list(self._sow(values, named)) + anchors

  def process_custom_jvp_call(self, prim, fun, jvp, tracers, *,
                              symbolic_zeros):
    del prim, jvp, symbolic_zeros  # evaluated, not differentiated
    self._read(tracers)
    with core.set_current_trace(self):
      return fun.call_wrapped(*tracers)

  def process_custom_vjp_call(self, prim, fun, fwd, bwd, tracers, *,
                              out_trees, symbolic_zeros):
    del prim, fwd, bwd, out_trees, symbolic_zeros
    self._read(tracers)
    with core.set_current_trace(self):
      return fun.call_wrapped(*tracers)

  def process_call(self, prim, fun, tracers, params):
    # A call primitive's body is Python to run, as the eval trace runs it.
    del prim, params
    self._read(tracers)
    with core.set_current_trace(self):
      return fun.call_wrapped(*tracers)

  def process_shard_map(self, prim, fun, args, **params):
    # JAX runs an eager `shard_map` primitive by primitive, each a program
    # of its own, where no trace of ours would see a sow. So it is staged
    # (its body's Python runs once, as eagerly) and its one equation
    # interpreted as a jaxpr's: a body holding a handled sow goes to the
    # rule of `shard_map`, which returns its per-shard values as under
    # `jax.jit`; one holding none is bound as it is, which JAX runs as it
    # runs the eager call.
    self._read(args)
    staged = []

    def stage(*xs):
      # The staging trace's rule returns a FlatTree of the outputs.
      staged.append(prim.bind(*xs, subfuns=(fun,), **params))
      return list(staged[0].vals)

    closed = jax.make_jaxpr(stage)(*args)
    with core.set_current_trace(self.parent):
      outs = interpreter.evaluate(
          closed.jaxpr, closed.consts, list(args), self.scope)
    return staged[0].update(outs)

  def stage_value(self, val):
    # A constant made into an array (`jnp.asarray`), as at the top level.
    return self.parent.stage_value(val)

  def cur_qdd(self, x):
    return self.parent.cur_qdd(x)


def _dispatch(trace: tp.Any, closed: core.ClosedJaxpr) -> str:
  """How a ``jax.jit`` called under ``trace`` runs its cache miss (see the
  module docstring, 1, and ``_jax.set_jit_dispatch``).

  Under an eager interpretation, a program holding no sow at any depth runs
  as at the top level: the trace would hand it to JAX's eval trace as it
  is, whatever any capture selects, and JAX records its fast path. At the
  top level while a capture runs (a plant's function, called by the
  interpreter), a program holding a sow records no fast path, which a later
  eager capture would take. While an eager ``plant`` tracks which planted
  values are read, no fast path is recorded at all.
  """
  if not primitive.harvesting.value:
    return _jax.AS_JAX_DOES
  fast = not tracking_reads.value and not primitive.sow_keys(closed.jaxpr)
  if type(trace) is EagerTrace:
    return _jax.AT_TOP_LEVEL if fast else _jax.AS_JAX_DOES
  return _jax.AS_JAX_DOES if fast else _jax.WITHOUT_FAST_PATH


# Once, for the process. Where JAX lacks the function it relies on, every
# jit keeps JAX's own dispatch (slower, and as correct but for a fast path
# recorded at the top level while a capture runs), and `plant` stages (see
# `can_track_reads`).
_jax.set_jit_dispatch(_dispatch, (EagerTrace,))


def _equation(prim, args, params) -> core.JaxprEqn:
  """The equation a staging trace would make of this bind, for a rule.

  Rules read the parameters, the numbers and types of the inputs and
  outputs, the effects and where it was bound (for the name stack of its
  transformations and for messages).
  """
  in_avals = [jax.typeof(a) for a in args]
  out_avals, effects = prim.abstract_eval(*in_avals, **params)
  if not prim.multiple_results:
    out_avals = [out_avals]
  return core.new_jaxpr_eqn(
      [core.Var(aval) for aval in in_avals],
      [core.Var(aval) for aval in out_avals],
      prim,
      params,
      effects,
      source_info_util.current(),
  )
