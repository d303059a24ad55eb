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
"""Deferred sows: sows whose name is found where the program is bound.

A sow made inside a JAX trace may not know its whole name there: a
``Module.sow`` on a copy of a module that ``nnx.jit`` or ``jax.vmap`` made
inside a capture knows its own name but not its module's path, which depends
on which module of the caller the copy was made from. JAX reuses that trace
for every module of the same structure (two blocks of a model share one
``nnx.jit`` trace), so the path cannot be written into it.

Such a sow is *deferred*: its name is a :class:`Deferred`, and it carries, as
*anchors*, operands the program reads its module's state from (the values of
some of its Variables), after the values it sows. JAX's own transformations
carry the anchors as they carry any operand (into a ``jit`` body, a ``scan``
body, through ``vmap``), so wherever the program is bound, what each anchor
comes from is plain dataflow: an input of the equation bound. There the sow is
*resolved*: :func:`rename_params` (an equation's sub-jaxprs, on the values it
is bound with) and :func:`rename_jaxpr` (a whole jaxpr, on its inputs) follow
each anchor through the equations' inputs to the input it comes from, hand
those origins to the resolver that the caller registered (the module paths of
the running captures, :mod:`flax.nnx.sow.lift.module_paths`), and replace the
sow by an ordinary one with the name it gives, without anchors; or drop it
(:data:`DROP`), or leave it deferred for an enclosing capture to resolve.
Nothing else in this package ever sees a deferred sow: a rule that meets one
refuses it, naming it.

Origins are followed only through the inputs of equations whose operands map
to their sub-jaxprs' inputs one to one or by a known layout (``jit``,
``closed_call``, ``remat``, ``custom_jvp_call``, ``custom_vjp_call``,
``scan``, ``while``, ``cond``, ``shard_map``); an anchor computed inside the
program (a Variable updated before the sow) has none.
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax.extend.core as core

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import primitive

PathParts = tuple[tp.Hashable, ...]


@dataclasses.dataclass(frozen=True)
class Deferred:
  """The name of a deferred sow, until it is resolved.

  Attributes:
    anchors: for each anchor operand, where it sits in the sowing object (a
      Variable's path from the module); static.
    rest: what follows the path found, in the name (``('h',)`` for
      ``Module.sow(T, 'h', ...)``).
    owner: the sowing object's type name, for messages.
    detail: what the resolver needs besides (hashable, static).
  """

  anchors: tuple[PathParts, ...]
  rest: tuple[tp.Hashable, ...]
  owner: str
  detail: tp.Hashable = None
  # Another way the maker may find the module where the sow is bound:
  # static data of its own (see `flax.nnx.sow.lift.module_paths`).
  chain: tuple[tp.Hashable, ...] = ()

  def describe(self) -> str:
    return f'{self.owner} sow {self.rest!r}'


class Drop:
  """The type of :data:`DROP` (one instance)."""

  def __repr__(self):
    return 'DROP'


# A resolution that removes the sow: its values pass through unsown (a tap
# whose patterns do not match the module the sow turned out to be on).
DROP = Drop()

# (name, meta) for the ordinary sow, DROP, or None: not resolved here.
Resolution = tp.Union[tuple[tp.Any, tp.Hashable], Drop, None]
# (deferred, tag, the origin of each anchor or None, whether this deferred
# sow occurs once in the program resolved) -> a resolution.
Resolver = tp.Callable[[Deferred, tp.Hashable, list[tp.Any], bool],
                       Resolution]

_RESOLVERS: list[Resolver] = []


def set_resolver(resolver: Resolver) -> None:
  """Registers the one resolver (by the layer that makes deferred sows)."""
  _RESOLVERS[:] = [resolver]


def _resolve(deferred: Deferred, tag, origins: list[tp.Any],
             once: bool = True) -> Resolution:
  if not _RESOLVERS:
    return None
  return _RESOLVERS[0](deferred, tag, origins, once)


def is_deferred(params: tp.Mapping[str, tp.Any]) -> bool:
  """Whether the sow of ``params`` is deferred."""
  return isinstance(params.get('sow_name'), Deferred)


def sow(
    leaves: tp.Sequence[tp.Any],
    anchors: tp.Sequence[tp.Any],
    *,
    deferred: Deferred,
    treedef: tp.Any,
    tag: tp.Hashable,
    mode: str,
) -> list[tp.Any]:
  """Binds a deferred sow of ``leaves`` (of ``treedef``) with ``anchors``;
  returns the sown leaves (the anchors' outputs are dropped)."""
  assert len(anchors) == len(deferred.anchors)
  params = dict(sow_name=deferred, tag=tag, mode=mode, tree=treedef,
                vmapped=0, anchors=len(anchors))
  out = primitive.bind([*leaves, *anchors], params)
  return list(out[:len(leaves)])


def resolve_bound(
    params: dict[str, tp.Any], args: tp.Sequence[tp.Any]
) -> tuple[Resolution, dict[str, tp.Any] | None]:
  """A deferred sow bound directly (eagerly): ``args`` are its operands,
  the anchors' values their own origins. Returns the resolution and, if it
  names the sow, the parameters of the ordinary sow of the values."""
  deferred = params['sow_name']
  count = len(args) - params['anchors']
  resolution = _resolve(deferred, params['tag'], list(args[count:]))
  if resolution is None or resolution is DROP:
    return resolution, None
  return resolution, _named_params(params, resolution)


def _named_params(params, resolution) -> dict[str, tp.Any]:
  name, meta = resolution
  named = {k: v for k, v in params.items() if k not in ('anchors', 'meta')}
  named['sow_name'] = name
  if primitive.through_level(params):
    named['meta'] = params['meta']  # a see-through copy stays one
  elif meta is not None:
    named['meta'] = meta
  return named


# ---------------------------------------------------------------------------
# Sub-jaxprs: which operands of an equation are which inputs of each
# ---------------------------------------------------------------------------


def _sub_jaxprs(
    name: str, params: tp.Mapping[str, tp.Any], num_operands: int
) -> list[tuple[str, int | None, tp.Any, list[int]]] | None:
  """``(parameter, index in it or None, jaxpr, operand of each input)`` for
  the sub-jaxprs of a primitive whose layout is known; ``None`` otherwise."""
  whole = list(range(num_operands))
  if name in ('jit', 'pjit', 'closed_call', 'core_call', 'shard_map'):
    key = 'jaxpr' if 'jaxpr' in params else 'call_jaxpr'
    return [(key, None, params[key], whole)]
  if name in ('remat2', 'checkpoint', 'scan'):
    return [('jaxpr', None, params['jaxpr'], whole)]
  if name in ('custom_jvp_call', 'custom_vjp_call', 'custom_vjp_call_jaxpr'):
    key = 'call_jaxpr' if 'call_jaxpr' in params else 'fun_jaxpr'
    return [(key, None, params[key], whole)]
  if name == 'cond':
    return [('branches', i, branch, whole[1:])
            for i, branch in enumerate(params['branches'])]
  if name == 'while':
    nc, nb = params['cond_nconsts'], params['body_nconsts']
    carry = whole[nc + nb:]
    return [('cond_jaxpr', None, params['cond_jaxpr'], whole[:nc] + carry),
            ('body_jaxpr', None, params['body_jaxpr'],
             whole[nc:nc + nb] + carry)]
  return None


def _open(jaxpr) -> core.Jaxpr:
  return jaxpr.jaxpr if isinstance(jaxpr, core.ClosedJaxpr) else jaxpr


@_jax.weakref_lru_cache(trace_context_in_key=False, maxsize=1024)
def _holds_deferred(jaxpr: core.Jaxpr) -> bool:
  for eqn in jaxpr.eqns:
    if eqn.primitive is primitive.sow_p and is_deferred(eqn.params):
      return True
    if any(_holds_deferred(_open(sub))
           for sub in core.jaxprs_in_params(eqn.params)):
      return True
  return False


def holds_deferred(params: tp.Mapping[str, tp.Any]) -> bool:
  """Whether an equation's sub-jaxprs hold a deferred sow."""
  return any(_holds_deferred(_open(sub))
             for sub in core.jaxprs_in_params(params))


# ---------------------------------------------------------------------------
# Renaming
# ---------------------------------------------------------------------------


def rename_params(
    prim: core.Primitive, params: dict[str, tp.Any],
    origins: tp.Sequence[tp.Any]
) -> dict[str, tp.Any]:
  """``params`` with the deferred sows of its sub-jaxprs resolved, where the
  equation's operands come from ``origins`` (``None``: unknown)."""
  if not holds_deferred(params):
    return params
  subs = _sub_jaxprs(prim.name, params, len(origins))
  if subs is None:
    return params  # no known layout: left for the rule to refuse
  new = dict(params)
  for key, index, sub, operands in subs:
    renamed = _rename(sub, [origins[i] for i in operands])
    if renamed is not sub:
      _put(new, key, index, renamed)
  return new


def _put(params: dict[str, tp.Any], key: str, index: int | None,
         sub: tp.Any) -> None:
  """Puts the sub-jaxpr ``sub`` into ``params[key]`` (at ``index`` of a
  tuple of them: the branches of a ``cond``)."""
  if index is None:
    params[key] = sub
  else:
    branches = list(params[key])
    branches[index] = sub
    params[key] = tuple(branches)


def rename_jaxpr(jaxpr, origins: tp.Sequence[tp.Any]):
  """``jaxpr`` (open or closed) with its deferred sows resolved, where its
  inputs come from ``origins`` (``None``: unknown); itself if none is."""
  return _rename(jaxpr, list(origins))


def _rename(jaxpr, origins: list[tp.Any]):
  opened = _open(jaxpr)
  if not _holds_deferred(opened):
    return jaxpr
  plan = _plan(opened)
  # A sow JAX staged once but that occurs several times (a trace reused for
  # several modules) is told apart by its anchors only.
  counts: dict[int, int] = {}
  for deferred, _, _ in plan:
    counts[id(deferred)] = counts.get(id(deferred), 0) + 1
  resolutions = tuple(
      _resolve(deferred, tag, [None if i is None else origins[i]
                               for i in anchors],
               once=counts[id(deferred)] == 1)
      for deferred, tag, anchors in plan
  )
  if all(r is None for r in resolutions):
    return jaxpr
  return _renamed(jaxpr, resolutions)


@_jax.weakref_lru_cache(trace_context_in_key=False, maxsize=1024)
def _renamed(jaxpr, resolutions: tuple[Resolution, ...]):
  """``jaxpr`` (open or closed) with its deferred sows (in :func:`_plan`'s
  order) resolved as ``resolutions`` say; cached, so that a program bound
  again for the same modules is the same object (and the caches keyed by
  it, JAX's and the interpreter's, hit)."""
  renamed = _apply(_open(jaxpr), iter(resolutions))
  if isinstance(jaxpr, core.ClosedJaxpr):
    return core.ClosedJaxpr(renamed, jaxpr.consts)
  return renamed


@_jax.weakref_lru_cache(trace_context_in_key=False, maxsize=1024)
def _plan(
    jaxpr: core.Jaxpr,
) -> tuple[tuple[Deferred, tp.Hashable, tuple[int | None, ...]], ...]:
  """Every deferred sow of ``jaxpr`` at any depth, in a fixed order, with
  the input of ``jaxpr`` each of its anchors comes from (or ``None``)."""
  entries: list[tuple[tp.Any, ...]] = []
  _walk(jaxpr, list(range(len(jaxpr.invars))), entries)
  return tuple(entries)


def _walk(jaxpr: core.Jaxpr, inputs: list[int | None], entries) -> None:
  """Appends the deferred sows of ``jaxpr`` to ``entries``; ``inputs``: the
  top input each of its inputs comes from."""
  top = {v: i for v, i in zip(jaxpr.invars, inputs) if i is not None}

  def of(atom):
    return top.get(atom) if isinstance(atom, core.Var) else None

  for eqn in jaxpr.eqns:
    if eqn.primitive is primitive.sow_p:
      if is_deferred(eqn.params):
        count = eqn.params['anchors']
        anchors = tuple(of(a) for a in eqn.invars[len(eqn.invars) - count:])
        entries.append((eqn.params['sow_name'], eqn.params['tag'], anchors))
      _forward(top, eqn.invars, eqn.outvars)  # the identity
      continue
    subs = _sub_jaxprs(eqn.primitive.name, eqn.params, len(eqn.invars))
    if subs is None:
      continue
    if eqn.primitive.name in _CALLS:
      # What a call returns unchanged is what it was given (`nnx.jit`
      # returns the Variables it did not update so).
      (_, _, sub, operands), = subs
      opened = _open(sub)
      inner = {v: j for j, v in enumerate(opened.invars)}
      for out, returned in zip(eqn.outvars, opened.outvars):
        j = inner.get(returned) if isinstance(returned, core.Var) else None
        if j is not None and of(eqn.invars[operands[j]]) is not None:
          top[out] = of(eqn.invars[operands[j]])
    if not holds_deferred(eqn.params):
      continue
    for _, _, sub, operands in subs:
      opened = _open(sub)
      if _holds_deferred(opened):
        _walk(opened, [of(eqn.invars[i]) for i in operands], entries)


# Primitives that call their one sub-jaxpr on their operands, once.
_CALLS = frozenset({
    'jit', 'pjit', 'closed_call', 'core_call', 'remat2', 'checkpoint',
    'custom_jvp_call', 'custom_vjp_call', 'custom_vjp_call_jaxpr',
})


def _forward(top: dict[tp.Any, int], invars, outvars) -> None:
  for into, out in zip(invars, outvars):
    if isinstance(into, core.Var) and into in top:
      top[out] = top[into]


def _apply(jaxpr: core.Jaxpr, resolutions: tp.Iterator[Resolution]):
  substitute: dict[tp.Any, tp.Any] = {}

  def sub(atom):
    return substitute.get(atom, atom) if isinstance(atom, core.Var) else atom

  eqns = []
  for eqn in jaxpr.eqns:
    invars = [sub(a) for a in eqn.invars]
    if eqn.primitive is primitive.sow_p and is_deferred(eqn.params):
      resolution = next(resolutions)
      if resolution is None:
        eqns.append(eqn.replace(invars=invars))
        continue
      count = len(invars) - eqn.params['anchors']
      # The sow is the identity: its anchors' outputs are their inputs.
      for out, into in zip(eqn.outvars[count:], invars[count:]):
        substitute[out] = into
      if resolution is DROP:
        for out, into in zip(eqn.outvars[:count], invars[:count]):
          substitute[out] = into
        continue
      eqns.append(core.new_jaxpr_eqn(
          invars[:count], eqn.outvars[:count], primitive.sow_p,
          _named_params(eqn.params, resolution), eqn.effects,
          eqn.source_info,
      ))
      continue
    params = eqn.params
    if holds_deferred(params):
      subs = _sub_jaxprs(eqn.primitive.name, params, len(invars))
      if subs is not None:
        params = dict(params)
        for key, index, sub_jaxpr, _ in subs:
          opened = _open(sub_jaxpr)
          if not _holds_deferred(opened):
            continue
          renamed = _apply(opened, resolutions)
          if isinstance(sub_jaxpr, core.ClosedJaxpr):
            renamed = core.ClosedJaxpr(renamed, sub_jaxpr.consts)
          _put(params, key, index, renamed)
    eqns.append(eqn.replace(invars=invars, params=params))
  return jaxpr.replace(
      eqns=eqns, outvars=[sub(a) for a in jaxpr.outvars])


def refusal(params: tp.Mapping[str, tp.Any]) -> ValueError:
  """The error for a deferred sow that no running capture could resolve."""
  deferred: Deferred = params['sow_name']
  return ValueError(
      f'capture: a {deferred.describe()} was made inside a JAX'
      ' transformation (jit, vmap, scan, an NNX transform...) on a copy of'
      ' a module, and none of the Variables it reads there comes from an'
      " input of that transformation that is one of the capture's"
      ' arguments (the module is closed over, created inside the function,'
      ' or each of its Variables was updated before the sow), so nothing in'
      ' the program says which module it is. Pass the module to the'
      ' transformation as an argument.'
  )
