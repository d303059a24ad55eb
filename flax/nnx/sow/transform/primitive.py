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
"""The ``sow`` primitive: an identity that leaves a named marker in a jaxpr.

Every rule of ``sow_p`` is the identity: evaluation, lowering (no HLO op, no
token), differentiation and batching. Its only job is to be *seen* by the
``capture`` interpreter.

A marker whose result is unused would be removed by dead-code elimination
inside transformations (``grad``, ``scan``, ``checkpoint``, ...). An effect
prevents that, but an effect in a compiled computation costs every call (JAX
then threads runtime tokens and leaves its C++ dispatch fast path: measured
17us -> 193us per call of a small ``jit``). So the effect is attached only
while a ``capture`` traces its function: ``harvesting`` is a JAX trace-context
flag, which also keys JAX's tracing caches, so a function traced for capture
never shares a jaxpr with the same function traced for plain use.

``jax.vmap`` of a ``cond``/``switch`` whose index is batched runs every branch
on every example and selects the outputs per example, so a sow in a branch
would record, for each example, values of branches it did not take. While
capturing, ``sow_p.bind`` refuses to run under that rule
(``_jax.branches_of_batched_cond``). The rule traces each branch with the
batching trace (binding every sow, nested ones included) unless it finds the
batched branch in JAX's cache, and then evaluates the batched branch by
binding its equations, so a sow at the top level of a branch is bound there
in any case. A sow nested in a sub-jaxpr of a branch (a ``jit`` inside it)
escapes when the batched branch comes from the cache: JAX made it for a cond
of the same trace on the same branch functions whose index was not batched
and whose operands all were. That case is recorded for every example.

A ``custom_vjp``'s backward rule runs later, when the program is transposed
(and a ``custom_jvp``'s JVP rule, when a loop body holding it is
differentiated after being batched): outside the rule's frame, so its sows
would record, for each example, the cotangents of every branch (zero where
the branch was not taken). So while capturing, a ``custom_jvp_call`` or
``custom_vjp_call`` bound under that rule has its functions (the body and
its rules) wrapped: whenever one runs, its sows are refused as the branch's
own are (``_in_rules_of_batched_cond``). For that this module replaces
the ``bind`` of these two primitives of JAX's
(``_mark_rules_under_batched_cond``, which calls JAX's own); outside a
capture it only reads ``harvesting``. A custom call in a ``jit``,
``checkpoint`` or other higher-order primitive within a branch escapes
where JAX does not bind it again while the rule evaluates the branch: in a
loop body (the rule stages that primitive as it is, and the loop is
differentiated after the rule returned), or when JAX reuses a
differentiated form of it cached for a cond whose index was not batched.

What JAX would need for this to be a plain primitive: an
``effects.EffectTypeSet`` (say ``effects.batched_cond_disallowed_effects``)
that ``_cond_batching_rule`` consults when ``index_dim is not None``,
raising for a branch effect of a registered type as it already does, by
name, for state and IO effects (its ``TODO: clean this up by adding a
specific blocklist``). ``SowEffect`` would register with ``add_type``, as it
does below with ``control_flow_allowed_effects``, and the refusal would
follow the effect through every cache and nesting. A custom rule's sows are
not among a branch's effects (JAX traces the rule later), so the batched
rules would also have to say whose branch they run for: say, the batched
backward rule of ``batching.batch_custom_vjp_bwd`` checking the same set.
"""

from __future__ import annotations

import dataclasses
import re
import typing as tp

import jax
import jax.extend.core as jex_core
from jax.extend.core import primitives as jex_primitives
import jax.extend.linear_util as lu
from jax.interpreters import ad
from jax.interpreters import batching
from jax.interpreters import mlir
from jax.interpreters import partial_eval as pe
import numpy as np

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import thread_stack

Name = tp.Union[str, tuple[tp.Union[str, int], ...]]


class SowEffect(jex_core.Effect):
  """Keeps sow markers alive through dead-code elimination while capturing."""

  def __repr__(self):
    return 'SowEffect'


sow_effect = SowEffect()

_jax.allow_effect_type(SowEffect)

# True while a capture traces its function. A user context (public JAX) is
# part of the trace context, so it keys JAX's tracing caches, and of the jit
# key: a jitted function called while a capture runs eagerly must not take
# the compiled fast path cached outside one, which would run its sows unseen
# (see `eager`). Unlike a configuration option it reads no environment
# variable, so nothing outside a capture changes what a sow does, and
# re-importing this module defines a new context rather than failing.
harvesting = globals().get('harvesting') or jax.make_user_context(
    default_value=False)


# True while a plant (or `nnx.capture` planting `init` perturbations) traces
# or runs its function: a sow whose value does not depend on a vmap's inputs
# then goes on batched, as a per-member planted value needs (`_sow_batch`).
# In the trace context and the jit key, as `harvesting` is.
planting = globals().get('planting') or jax.make_user_context(
    default_value=False)


class _SowPrimitive(jex_core.Primitive):
  """The type of ``sow_p``: refuses, while capturing, a batched-index cond.

  See the module docstring for why this is checked at ``bind`` and what JAX
  would need instead.
  """

  def bind(self, *args, **params):
    if harvesting.value:
      rules = _IN_RULES_OF_BATCHED_COND.stack
      if rules:
        # A custom rule of such a branch, run after the cond's batching rule
        # returned (a backward rule, at transposition): whatever trace.
        refuse_batched_cond(
            params['sow_name'], rules[-1],
            why='is sown by a custom_vjp or custom_jvp rule of a branch, which'
            ' runs for every example when the program is differentiated')
      # Such a cond binds its branches' sows under a batch trace: a sow bound
      # straight into a jaxpr (the common case while capturing) is in none,
      # and searching the stack would cost several microseconds per sow.
      if type(_jax.trace_ctx.trace) is not _jax.DynamicJaxprTrace:
        branches = _jax.branches_of_batched_cond()
        if branches is not None:
          refuse_batched_cond(params['sow_name'], branches)
    return super().bind(*args, **params)


def refuse_batched_cond(
    name: Name, branches, *, why: str = ''
) -> tp.NoReturn:
  """Raises the refusal of sows in a branch of a cond whose index is batched:
  ``name``'s and those of ``branches``; ``why`` says where ``name`` runs,
  if not in the branch itself."""
  if isinstance(branches, Exception):
    raise branches  # this JAX cannot tell (`_jax.MissingJaxFeature`)
  names = {name}
  for branch in branches:
    names.update(eqn.params['sow_name'] for eqn in sow_equations(branch.jaxpr))
  where = f' ({name!r} {why})' if why else ''
  raise NotImplementedError(
      'capture: jax.vmap of a cond/switch whose index depends on the mapped'
      ' inputs runs every branch on every example, so its sows'
      f' ({", ".join(sorted(map(repr, names)))}) cannot tell which branch an'
      f' example took{where}. Use jax.vmap(capture(f)) instead of'
      ' capture(jax.vmap(f)), or sow outside the cond.'
  )


# Innermost last: the branches of a batched-index cond (or the error of a JAX
# that cannot tell) whose custom_jvp/custom_vjp functions are running: the
# body, the forward, backward or JVP rule, whenever JAX runs them.
_IN_RULES_OF_BATCHED_COND: thread_stack.ThreadStack[tp.Any] = (
    thread_stack.ThreadStack())


# A transformation, not a new function: the wrapped function keeps the stores
# JAX reads its output structure from, and resets to trace it again.
@lu.transformation2
def _in_rules_of_batched_cond(f, branches, *args, **kwargs):
  with _IN_RULES_OF_BATCHED_COND.pushed(branches):
    return f(*args, **kwargs)


def _mark_rules_under_batched_cond(custom_call: jex_core.Primitive):
  """A ``bind`` for ``custom_call`` (``custom_jvp_call``/``custom_vjp_call``)
  that, while capturing under JAX's batching rule of a cond whose index is
  batched, wraps the functions it carries (``subfuns``) so that their sows,
  whenever JAX runs them, are refused as the branch's own are.

  The rule evaluates each batched branch by binding its equations, so a
  custom call of a branch is bound here under the rule's frame (also when
  JAX took the batched branch from its cache).
  """
  unhooked = type(custom_call).bind  # JAX's own, whatever this replaced

  def bind(*args, **params):
    if harvesting.value and 'subfuns' in params:
      try:
        branches = _jax.branches_of_batched_cond(evaluating=True)
      except _jax.MissingJaxFeature as e:
        branches = e  # cannot tell: a sow these functions bind raises it
      if branches is not None:
        params['subfuns'] = tuple(
            _in_rules_of_batched_cond(fun, branches)
            for fun in params['subfuns'])
    return unhooked(custom_call, *args, **params)

  tp.cast(tp.Any, bind).unhooked = unhooked
  return bind


# A reload of this module (a notebook's autoreload) runs it again in the same
# namespace: the primitive that functions imported before the reload bind is
# kept (its rules are registered again below), as are the contexts above and
# below, so that they still mean what this module means.
sow_p = globals().get('sow_p') or _SowPrimitive('sow')
sow_p.multiple_results = True


def _sow_impl(*leaves, **params):
  del params
  return leaves


# One set for every marker (JAX's own `no_effects` is frozen too), rather than
# a set per sow kept by its equation.
_HARVEST_EFFECTS = frozenset({sow_effect})


def _sow_abstract_eval(*avals, **params):
  del params
  sow_effects = _HARVEST_EFFECTS if harvesting.value else jex_core.no_effects
  return list(avals), sow_effects


def _sow_lowering(ctx, *leaves, **params):
  del ctx, params
  return list(leaves)


def _sow_jvp(primals, tangents, **params):
  # Only primal values are sown: a tangent is not an intermediate of the
  # program the user wrote. Gradients of intermediates come from `perturb`.
  out = sow_p.bind(*primals, **as_jvp_primal(params))
  return out, list(tangents)


def as_jvp_primal(params: dict[str, tp.Any]) -> dict[str, tp.Any]:
  """``params`` of a bind that is a JVP rule's primal output, marked so (see
  ``keeps_unbatched``). The mark is a parameter of the equation, so that it
  holds wherever JAX batches the equation later: a ``jax.checkpoint``, a
  loop or a ``jit`` re-batches the JVP'd program it holds after the JVP rule
  has returned."""
  if params.get('jvp_primal'):
    return params
  return {**params, 'jvp_primal': True}


def not_jvp_primal(params: dict[str, tp.Any]) -> dict[str, tp.Any]:
  """``params`` without the mark of ``as_jvp_primal``: what a JVP rule binds
  for the tangent of a marked primal."""
  return {k: v for k, v in params.items() if k != 'jvp_primal'}


def with_vmap_skipped(params: dict[str, tp.Any],
                      vmapped: int) -> dict[str, tp.Any]:
  """``params`` of a marker that a vmap left unbatched (``keeps_unbatched``)
  and did not count: ``skipped`` holds the position of each such vmap among
  all those applied to the marker so far, innermost first (the counted
  ones, ``vmapped``, and the skipped ones), so that the vmaps JAX records
  around an equation can be matched with those counted
  (``sites._inner_vmaps``)."""
  skipped = params.get('skipped', ())
  return {**params, 'skipped': (*skipped, vmapped + len(skipped))}


def keeps_unbatched(dims: tp.Sequence[int | None],
                    params: tp.Mapping[str, tp.Any]) -> bool:
  """Whether a batching rule must return these unbatched leaves unbatched.

  A rule that broadcasts an unbatched value while capturing (so that each
  member of a vmap gets its own entry) would batch a primal output that
  does not depend on the mapped inputs. ``jax.jacfwd`` (so ``jax.hessian``)
  vmaps a JVP over its basis and requires exactly that primal to stay
  unbatched (``out_axes=None``), so a JVP rule's primal output (its
  ``jvp_primal`` parameter) keeps its batching; its sow is still recorded
  broadcast, once per member.
  """
  return bool(params.get('jvp_primal')) and all(dim is None for dim in dims)


def _sow_transpose(cotangents, *leaves, **params):
  del leaves, params
  return list(cotangents)


def mapped_axis_leading(leaves, dims, size: int) -> list[tp.Any]:
  """``leaves`` with their mapped axis (``dims``) moved first; an unbatched
  leaf (``None``) is broadcast to ``size`` along it, so that every sown leaf
  has the axis its batching counts."""
  return [
      jax.numpy.broadcast_to(leaf, (size, *jax.numpy.shape(leaf)))
      if dim is None
      else jax.numpy.moveaxis(leaf, dim, 0)
      for leaf, dim in zip(leaves, dims)
  ]


def _sow_batch(axis_data, leaves, dims, *, vmapped, **params):
  # While capturing, a value sown under vmap carries the mapped axis, leading,
  # as `jax.vmap`'s outputs do: a leaf that does not depend on the mapped
  # inputs is broadcast, so that every member of an ensemble (say) gets its
  # own entry, and a value planted there is per member too. `vmapped` counts
  # these leading axes, outermost vmap first (each rule runs after the vmaps
  # inside it), so the interpreter can put a loop axis after the vmaps
  # applied outside that loop. Outside a capture, nothing is broadcast and the
  # parameters stay as they are: a plain program keeps its cost. The anchors
  # of a deferred sow (`deferred`) say where its module's state comes from,
  # not what is sown: they pass through as they are, batched or not.
  count = len(leaves) - params.get('anchors', 0)
  leaves, anchors = list(leaves[:count]), list(leaves[count:])
  dims, anchor_dims = list(dims[:count]), list(dims[count:])
  if not harvesting.value:
    moved = [
        leaf if dim is None else jax.numpy.moveaxis(leaf, dim, 0)
        for leaf, dim in zip(leaves, dims)
    ]
    out_dims = [None if dim is None else 0 for dim in dims]
    out = sow_p.bind(*moved, *anchors, vmapped=vmapped, **params)
    return out, out_dims + anchor_dims
  moved = mapped_axis_leading(leaves, dims, axis_data.size)
  if not leaves:
    # No leaf carries the mapped axis: the sow keeps its size, which a
    # loop's step count (one per member) needs (`sites.Site.sizes`).
    params['sizes'] = (axis_data.size, *params.get('sizes', ()))
  # The program goes on with a broadcast value only where a plant may put
  # per-member values there; a capture alone records per member and leaves
  # the program as it is, so that what JAX needs unbatched stays so (the
  # primal output of `jax.jacfwd`'s JVP when a loop carries the sown value).
  keep = keeps_unbatched(dims, params) or (
      not planting.value and all(dim is None for dim in dims))
  out = sow_p.bind(*moved, *anchors, vmapped=vmapped + 1, **params)
  if keep:
    # Recorded per member; the program goes on with the unbatched value.
    return leaves + anchors, [None] * len(leaves) + anchor_dims
  return out, [0] * len(leaves) + anchor_dims


def _sow_partial_eval_custom(saveable, unknowns, instantiated, eqn):
  """Splits a sow between a known program and a staged one that recomputes
  what it needs (``jax.checkpoint``, and a ``while_loop``'s body under
  ``jax.linearize``).

  While capturing, a sow of known values is recorded by the known program,
  and the staged one gets the values from an identity without the effect:
  left to JAX, an effectful equation stays in the known program alone and
  its outputs are saved as residuals, which a ``while_loop`` cannot carry
  (JAX asserts there). Otherwise a sow is split as JAX splits any equation
  it recomputes: known values in both programs, unknown ones staged.
  """
  del saveable  # an identity: recomputing it saves as much as saving it
  count = len(eqn.outvars)
  residuals = [
      v for v, inst in zip(eqn.invars, instantiated)
      if isinstance(v, jex_core.Var) and not inst
  ]
  if any(unknowns):
    return None, eqn, [True] * count, [True] * count, residuals
  staged = eqn
  if eqn.effects:
    inner = [jex_core.Var(v.aval) for v in eqn.outvars]
    identity = jex_core.ClosedJaxpr(
        jex_core.Jaxpr((), inner, inner, [], debug_info=jex_core.DebugInfo(
            'sow', 'the identity of a recomputed sow', None, None)),
        (),
    )
    staged = eqn.replace(primitive=jex_primitives.closed_call_p,
                         params={'call_jaxpr': identity},
                         effects=jex_core.no_effects)
  return eqn, staged, [False] * count, [True] * count, residuals


sow_p.def_impl(_sow_impl)
sow_p.def_effectful_abstract_eval(_sow_abstract_eval)
# Not cached: JAX caches a lowering per (primitive, parameters) as a function
# it then inlines, and every sow site has parameters of its own (its name),
# so the cache never hits and only costs a function per sow.
mlir.register_lowering(sow_p, _sow_lowering, cacheable=False)
ad.primitive_jvps[sow_p] = _sow_jvp
ad.primitive_transposes[sow_p] = _sow_transpose
batching.fancy_primitive_batchers[sow_p] = _sow_batch
pe.partial_eval_jaxpr_custom_rules[sow_p] = _sow_partial_eval_custom
# See the module docstring. A reload of this module replaces these rather
# than wrapping them again.
for _custom_call in (jex_primitives.custom_jvp_call_p,
                     jex_primitives.custom_vjp_call_p):
  tp.cast(tp.Any, _custom_call).bind = _mark_rules_under_batched_cond(
      _custom_call)


def sow_equations(jaxpr: jex_core.Jaxpr) -> tp.Iterator[jex_core.JaxprEqn]:
  """The sow equations of ``jaxpr`` at any depth, in program order."""
  for eqn in jaxpr.eqns:
    if eqn.primitive is sow_p:
      yield eqn
    for sub in jex_core.jaxprs_in_params(eqn.params):
      yield from sow_equations(sub)


@_jax.weakref_lru_cache(trace_context_in_key=False, maxsize=1024)
def sow_keys(jaxpr: jex_core.Jaxpr) -> frozenset[tuple[Name, tp.Hashable]]:
  """The ``(name, tag)`` of every sow in ``jaxpr``, at any depth.

  Cached per jaxpr (held weakly; a jaxpr is immutable), and per sub-jaxpr,
  so a program whose sub-jaxprs JAX caches (the body of a ``jit``) is walked
  once: this is how a name predicate is resolved on every call.
  """
  keys = set()
  for eqn in jaxpr.eqns:
    if eqn.primitive is sow_p:
      keys.add((eqn.params['sow_name'], eqn.params['tag']))
    for sub in jex_core.jaxprs_in_params(eqn.params):
      keys.update(sow_keys(sub))
  return frozenset(keys)


def check_name(name: tp.Any, *, where: str) -> Name:
  """Returns ``name`` if it is a valid sow name, else raises ``TypeError``.

  NumPy integer scalars in a tuple name become ints (a layer index taken
  from ``np.arange``), so ``('layers', np.int64(3))`` and ``('layers', 3)``
  are the same name.
  """
  if isinstance(name, str):
    return _untraced(name, name, where=where)
  refuse_traced(name, where=where)
  if isinstance(name, tuple) and name:
    parts = [name_part(part) for part in name]
    checked = [part for part in parts if part is not None]
    if len(checked) == len(parts):
      for part in checked:
        if isinstance(part, str):
          _untraced(part, name, where=where)
      return tuple(checked)
  raise TypeError(
      f'{where}: name must be a str or a non-empty tuple of str/int, got'
      f' {name!r} of type {type(name).__name__}.'
  )


def refuse_traced(name: tp.Any, *, where: str) -> None:
  """Raises ``TypeError`` if ``name`` is, or is a tuple holding, a traced
  value: a name is static, so no selection could name one."""
  parts = name if isinstance(name, tuple) else (name,)
  if any(isinstance(part, jax.core.Tracer) for part in parts):
    raise TypeError(
        f'{where}: a name must be static, known while tracing: a str or a'
        ' tuple of str/int (the index of a Python loop, not of a traced'
        f' one); got {name!r}, which holds a traced value.'
    )


# A tracer formatted into a string (`f'h{i}'` with a traced `i`) leaves its
# repr there: `JitTracer(~int32[])`, `VmapTracer(...)`, `GradTracer(...)`.
_TRACER_TEXT = re.compile(r'[A-Za-z]*Tracer[(<]|Traced<')


def _untraced(text: str, name: tp.Any, *, where: str) -> str:
  """Refuses a name formatted from a traced value: it holds the tracer's
  repr, which changes from trace to trace, so no selection could name it."""
  if _TRACER_TEXT.search(text):
    raise TypeError(
        f'{where}: the name {name!r} was formatted from a traced value. A'
        ' name is static: build it from Python values (the index of a Python'
        ' loop), or sow the traced value under a fixed name (lax.scan and'
        ' fori_loop stack its entries along the loop axis).'
    )
  return text


def is_name(value: tp.Any) -> bool:
  """Whether ``value`` is a valid sow name."""
  try:
    check_name(value, where='')
  except TypeError:
    return False
  return True


def name_part(part: tp.Any) -> str | int | None:
  """``part`` as a name component, or ``None`` if it cannot be one."""
  if isinstance(part, str):
    return part
  if isinstance(part, bool) or isinstance(part, np.bool_):
    return None
  if isinstance(part, int):
    return int(part)  # an IntEnum or int subclass: its plain value
  if isinstance(part, np.integer):
    return int(part)
  return None


def check_static(value: tp.Any, *, what: str, where: str) -> tp.Hashable:
  """Returns ``value`` if it can be a static (hashable) parameter."""
  try:
    hash(value)
  except TypeError:
    raise TypeError(
        f'{where}: {what} must be hashable (it is static), got {value!r} of'
        f' type {type(value).__name__}.'
    ) from None
  return value


_ARRAY_TYPES = (jax.Array, np.ndarray, np.generic)
_NUMBER_TYPES = (bool, int, float, complex)
# isinstance on the jax.Array ABC is slow: the answer is kept per leaf type
# (it depends on the type alone), for at most _MAX_TYPES types, so that
# classes made afresh (a dataclass defined per call) cannot grow it.
_IS_ARRAY: dict[type, bool] = {}
_MAX_TYPES = 256


def is_array(leaf: tp.Any) -> bool:
  """Whether ``leaf`` is an array: a JAX array (or tracer), a NumPy array or a
  NumPy scalar. These are the leaves ``capture`` traces; any other leaf of its
  arguments reaches the function unchanged.
  """
  kind = type(leaf)
  known = _IS_ARRAY.get(kind)
  if known is None:
    known = isinstance(leaf, _ARRAY_TYPES)
    if len(_IS_ARRAY) < _MAX_TYPES:
      _IS_ARRAY[kind] = known
  return known


def _is_sowable_leaf(leaf: tp.Any) -> bool:
  return is_array(leaf) or isinstance(leaf, _NUMBER_TYPES)


def is_sowable(value: tp.Any) -> bool:
  """Whether :func:`sow` accepts ``value``: a pytree whose leaves are arrays
  (see :func:`is_array`) or Python numbers.

  Example::

    >>> import jax.numpy as jnp
    >>> from flax.nnx.sow.transform import primitive
    >>> primitive.is_sowable({'a': jnp.ones(2), 'b': 3.0})
    True
    >>> primitive.is_sowable(['not an array'])
    False
  """
  return all(map(_is_sowable_leaf, jax.tree_util.tree_leaves(value)))


def _as_jax_array(leaf: tp.Any) -> jax.Array:
  # Python and NumPy scalars become arrays exactly as JAX converts arguments.
  return leaf if isinstance(leaf, jax.Array) else jax.numpy.asarray(leaf)


def flatten_value(value: tp.Any, *, where: str):
  """Flattens a sown pytree into JAX arrays, rejecting any other leaf."""
  leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(value)
  leaves = []
  for path, leaf in leaves_with_paths:
    if not _is_sowable_leaf(leaf):
      raise TypeError(
          f'{where}: every leaf must be an array or a Python number, got'
          f' {leaf!r} of type {type(leaf).__name__} at'
          f' value{jax.tree_util.keystr(path)}.'
      )
    if isinstance(leaf, (np.ndarray, np.generic)) and not _is_numeric(
        leaf.dtype
    ):
      # JAX has no arrays of strings, objects or dates: say so here rather
      # than let its conversion fail with a message naming no sow.
      raise TypeError(
          f'{where}: a NumPy array of dtype {leaf.dtype} cannot be sown (JAX'
          ' arrays are numeric or boolean), at'
          f' value{jax.tree_util.keystr(path)}.'
      )
    leaves.append(_as_jax_array(leaf))
  return leaves, treedef


def _is_numeric(dtype: np.dtype) -> bool:
  # `jnp.issubdtype` knows ml_dtypes (bfloat16, float8...), which NumPy
  # files under the 'V' kind of structured types.
  return dtype == np.bool_ or jax.numpy.issubdtype(dtype, np.number)


MODES = ('append', 'clobber')


def check_mode(mode: tp.Any, *, where: str) -> str:
  if mode not in MODES:
    raise ValueError(
        f'{where}: mode must be one of {MODES}, got {mode!r}.'
    )
  return mode


def sow(
    value: tp.Any,
    *,
    name: Name,
    tag: tp.Hashable = None,
    mode: str = 'append',
) -> tp.Any:
  """Tags ``value`` under ``name`` so that :func:`capture` can collect it.

  ``sow`` is the identity: it returns ``value`` (with Python numbers converted
  to JAX arrays) and, outside :func:`capture`, does nothing at all, also under
  ``jax.jit``, ``jax.grad``, ``jax.vmap``, ``lax.scan`` or ``jax.export``.

  Example (``capture(f)(x)`` returns ``f(x)`` and ``{'features': [sin(x)]}``;
  see :func:`capture`)::

    >>> import jax
    >>> import jax.numpy as jnp
    >>> from flax.nnx.sow import sow
    >>> def f(x):
    ...   y = sow(jnp.sin(x), name='features')
    ...   return 2 * y
    >>> bool((f(jnp.full(3, 0.5)) == 2 * jnp.sin(jnp.full(3, 0.5))).all())
    True
    >>> jax.jit(f).lower(jnp.zeros(3)).as_text().count('sow')
    0

  Args:
    value: any pytree of arrays (Python numbers are converted as JAX converts
      them).
    name: a ``str`` or a tuple of ``str``/``int``, static.
    tag: any static hashable value, used by ``capture(f, tag=...)`` to select
      sows.
    mode: ``'append'`` (default): ``capture`` returns one entry per executed
      sow, stacked along the loop axis inside ``lax.scan``; refused inside a
      ``while_loop``, whose trip count is dynamic. ``'clobber'``: each sow
      replaces what was collected under ``name`` so far, so ``capture``
      returns one entry, the last value; allowed in ``scan`` and
      ``while_loop``.

  Returns:
    ``value``, unchanged.
  """
  return sow_with_meta(value, name=name, tag=tag, mode=mode, meta=None)


def sow_with_meta(
    value: tp.Any,
    *,
    name: Name,
    tag: tp.Hashable,
    mode: str,
    meta: tp.Hashable,
) -> tp.Any:
  """:func:`sow`, with static ``meta`` data carried by the marker.

  For libraries built on ``sow``: the marker keeps ``meta`` wherever the
  program goes (inside a cached ``jit`` body, say), so whatever reads the
  program learns it there rather than from a side effect of tracing, which
  a reused trace does not repeat. ``nnx.capture`` keeps a ``Module.sow``'s
  arguments there. ``capture`` and ``plant`` ignore it. ``None`` leaves the
  marker as ``sow`` makes it.
  """
  where = f'sow(name={name!r})'
  name = check_name(name, where=where)
  tag = check_static(tag, what='tag', where=where)
  mode = check_mode(mode, where=where)
  leaves, treedef = flatten_value(value, where=where)
  params = dict(sow_name=name, tag=tag, mode=mode, tree=treedef, vmapped=0)
  if meta is not None:
    params['meta'] = check_static(meta, what='meta', where=where)
  out = bind(leaves, params)
  return jax.tree_util.tree_unflatten(treedef, out)


# -- Seeing through inner captures ------------------------------------------
# A capture takes the sows it selects: an enclosing capture does not see
# them. A capture asked to see through the captures inside it (such as a
# library's own `nnx.capture`) raises `seeing_through` by one while it runs,
# and every sow bound then is followed by a copy of itself per such capture,
# marked with its level (`Through`): a copy is selected by the capture of
# its level only, so the inner captures take the sow as before and each
# see-through capture gets the value as the program goes on with it (after
# the plants inside it). The count is in JAX's jit key: a trace made while
# one runs holds the copies, and is not reused where none runs.
seeing_through = globals().get('seeing_through') or jax.make_user_context(
    default_value=0)


@dataclasses.dataclass(frozen=True)
class Through:
  """The marker data (``meta``) of the copy of a sow made for the capture
  that sees through inner captures at ``level`` (1 is the outermost)."""

  level: int


def through_level(params: tp.Mapping[str, tp.Any]) -> int:
  """The level of the see-through capture a sow is a copy for; 0 if it is
  the sow itself."""
  meta = params.get('meta')
  return meta.level if type(meta) is Through else 0


def bind(leaves: tp.Sequence[tp.Any], params: dict[str, tp.Any]) -> list:
  """Binds a sow made by the user's program (``sow``, ``Module.sow``, a tap)
  with ``params``, then its copy for each see-through capture running, the
  innermost first; returns the last one's outputs."""
  out = sow_p.bind(*leaves, **params)
  levels = seeing_through.value
  if levels:
    copy = {k: v for k, v in params.items() if k != 'meta'}
    for level in range(levels, 0, -1):
      out = sow_p.bind(*out, **copy, meta=Through(level))
  return out
