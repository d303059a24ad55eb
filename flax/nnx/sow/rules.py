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
"""Rules for higher-order primitives whose sub-jaxprs hold handled sows.

A rule is only consulted for an equation that holds a handled sow somewhere
inside; every other equation is bound unchanged. A higher-order primitive
missing from ``RULES`` is refused by the plan with an error naming it.
The table at the bottom of this file is the complete list; ``dispatch.py``
imports this module, so the table is in place wherever a plan is made.

Every rule works on a ``Transformed`` sub-jaxpr (see ``interpreter.py``):
inputs ``[*original, *planted leaves]``, outputs ``[*original, *sown
leaves]``, and re-binds its primitive with it, adapting the parameters.
"""

from __future__ import annotations

import dataclasses
import functools
import typing as tp

import jax
import jax.extend.core as core
import jax.extend.linear_util as lu
import jax.numpy as jnp
from jax.extend.core import primitives as prims
from jax.sharding import PartitionSpec

from flax.nnx.sow import _jax
from flax.nnx.sow import dispatch
from flax.nnx.sow import interpreter
from flax.nnx.sow import intervene
from flax.nnx.sow import primitive
from flax.nnx.sow.scope import Rule
from flax.nnx.sow.scope import Scope
from flax.nnx.sow.sites import Request
from flax.nnx.sow.sites import Site
from flax.nnx.sow.sites import describe_names
from flax.nnx.sow.sites import split_records
from flax.nnx.sow.sites import where

UNSPECIFIED = _jax.UNSPECIFIED


def _transformed(
    scope: Scope, closed: core.ClosedJaxpr
) -> interpreter.Transformed:
  """``closed``, a sub-jaxpr of ``scope``, transformed for its request."""
  return interpreter.transform(closed, scope.request, scope.fns)


def _take_planted(
    scope: Scope, eqn, sites: tp.Sequence[Site]
) -> list[tp.Any]:
  """The planted leaves for ``sites`` (of ``eqn``'s sub-jaxpr), in order."""
  leaves = []
  for site in sites:
    planted = scope.plant(scope.here(site, eqn))
    assert planted is not None, site
    leaves.extend(planted)
  return leaves


def _finish(
    scope: Scope, eqn, outs, t: interpreter.Transformed,
    times: int | None = 1,
) -> list[tp.Any]:
  """Records the sown outputs and advances the occurrence counters past
  ``times`` runs of ``t``; returns the original outputs."""
  n, m = len(eqn.outvars), t.num_sown_leaves
  for site, leaves in split_records(t.sites, outs[n : n + m]):
    scope.record(scope.here(site, eqn), leaves)
  t.fn_finish(scope, outs[n + m :], times)
  return list(outs[:n])


def _jit(scope: Scope, eqn, invals):
  """Re-binds ``jit`` with a body that also returns the sown leaves.

  The transformed body is cached by the identity of the original one, so an
  eager ``capture(jax.jit(f))`` runs compiled code and compiles only once.
  """
  t = _transformed(scope, eqn.params['jaxpr'])
  planted = [*_take_planted(scope, eqn, t.planted_sites), *t.fn_inputs(scope)]
  n_in, n_out = len(planted), t.num_sown_leaves + len(t.fn_names)
  p = eqn.params
  outs = interpreter.bind(
      eqn,
      [*invals, *planted],
      jaxpr=t.jaxpr,
      in_shardings=(*p['in_shardings'], *[UNSPECIFIED] * n_in),
      in_layouts=(*p['in_layouts'], *[None] * n_in),
      donated_invars=(*p['donated_invars'], *[False] * n_in),
      out_shardings=(*p['out_shardings'], *[UNSPECIFIED] * n_out),
      out_layouts=(*p['out_layouts'], *[None] * n_out),
  )
  return _finish(scope, eqn, outs, t)


def _inline(scope: Scope, eqn, invals, body_param: str = 'call_jaxpr'):
  """Evaluates a call primitive's body in place."""
  body = eqn.params[body_param]
  with scope.inlined(eqn):
    if isinstance(body, core.ClosedJaxpr):
      return interpreter.evaluate(body.jaxpr, body.consts, invals, scope)
    return interpreter.evaluate(body, (), invals, scope)


def _custom_rule(body_param: str) -> Rule:
  """For primitives that carry a user rule (custom_jvp/vjp/vmap) and a body.

  The sown values come from evaluating the body in place; the outputs from
  re-binding the primitive with the sows this scope handles removed from its
  body and rules, so the user's rule still applies (XLA merges the duplicate
  under ``jit``). The sows it does not handle stay in the re-bound primitive
  only, where an enclosing interpretation sees them with the values that
  reach the outputs (a ``plant`` there changes them). The body goes first,
  so that eagerly its intermediates are freed before the re-bound outputs
  exist. Planting changes the function itself, so its custom rule no longer
  applies: then only the body is evaluated.
  """

  def rule(scope: Scope, eqn, invals):
    body = eqn.params[body_param]
    if interpreter.plants_into(body, scope.request):
      return _inline(scope, eqn, invals, body_param)
    removing = scope.request.removing()
    stripped = interpreter.transform(body, removing).jaxpr
    rule_params = {
        param: _stripped_rule(eqn, param, body.jaxpr, removing)
        for param in _DERIVATIVE_RULES
        if param in eqn.params
    }
    _take_in_place(scope, eqn, invals, body_param)
    return interpreter.bind(
        eqn, invals, **{body_param: stripped}, **rule_params
    )

  return rule


def _take_in_place(scope: Scope, eqn, invals, body_param: str) -> None:
  """Records the sows ``scope`` handles in the body of ``eqn``, evaluated in
  place; the others are dropped there, as the re-bound primitive keeps them
  (re-binding them here too would show them twice to an enclosing capture,
  once with a value nothing reads)."""
  if not scope.request.rebind_unhandled:
    _inline(scope, eqn, invals, body_param)
    return
  dropping = dataclasses.replace(scope.request, rebind_unhandled=False)
  inner = Scope(dropping, scope.planter, scope.fns)
  inner.inline_vmaps = scope.inline_vmaps
  _inline(inner, eqn, invals, body_param)
  for site, leaves in inner.records:
    scope.record_arrays(site, leaves)


def _stripped_rule(eqn, param: str, body: core.Jaxpr, removing: Request):
  """A custom derivative rule (a jaxpr thunk) without the handled sows.

  Under differentiation JAX runs the user's forward (``custom_vjp``) or JVP
  (``custom_jvp``) rule in place of the body, and such a rule usually calls
  the function itself: its sows would run again, outside this capture. The
  values of those this capture handles already come from evaluating the
  body, so ``removing`` strips them; the others stay, as in the re-bound
  body. A rule that sows a name the body does not is refused, since that
  value could be collected by no capture.
  """
  what, wrap = _DERIVATIVE_RULES[param]

  def strip(jaxpr: core.Jaxpr, consts) -> core.ClosedJaxpr:
    extra = primitive.sow_keys(jaxpr) - primitive.sow_keys(body)
    if extra:
      raise NotImplementedError(
          f'capture: the {what} rule of the {eqn.primitive.name!r}'
          f' (at {where(eqn)}) sows'
          f' {describe_names(name for name, _ in extra)}, which'
          ' its function does not; under differentiation inside a capture'
          ' such a sow cannot be collected. Sow it in the function instead.'
      )
    closed = core.ClosedJaxpr(jaxpr, consts)
    return interpreter.transform(closed, removing).jaxpr

  return wrap(eqn.params[param], strip)


_MEMO_SIZE = 32


def _memoize(thunk_body):
  """Runs ``thunk_body`` once per argument tuple, outside any trace.

  A custom rule's jaxpr thunk may be called several times (forward and
  transpose, say) and JAX expects the same jaxpr each time; it is traced at
  the top level, like the thunk it replaces. The arguments are JAX's
  symbolic-zero flags of the inputs, so a thunk sees few patterns (one, in
  practice); the bound only keeps a pathological caller from growing the
  memo, which goes with the thunk.
  """

  @functools.lru_cache(maxsize=_MEMO_SIZE)
  def memoized(*args):
    with core.set_current_trace(None):
      return thunk_body(*args)

  return memoized


def _stripped_fwd(thunk, strip):
  @_memoize
  def fwd(*zeros):
    stripped = strip(*thunk.call_wrapped(*zeros))
    return stripped.jaxpr, stripped.consts

  return lu.wrap_init(fwd, debug_info=thunk.debug_info)


def _stripped_jvp(thunk, strip):
  @_memoize
  def jvp(*zeros):
    jaxpr, consts, out_zeros = thunk.call_wrapped(*zeros)
    stripped = strip(jaxpr, consts)
    return stripped.jaxpr, stripped.consts, out_zeros

  return lu.wrap_init(jvp, debug_info=thunk.debug_info)


# The derivative-rule parameters of custom_vjp_call and custom_jvp_call:
# what the rule is called, and how to wrap its thunk.
_DERIVATIVE_RULES = {
    'fwd_jaxpr_thunk': ('forward', _stripped_fwd),
    'jvp_jaxpr_fun': ('JVP', _stripped_jvp),
}


def _scan(scope: Scope, eqn, invals):
  """Appended values become extra ``ys``; clobbered values extra carries.

  A clobber carry starts from zeros that are never observed: a scan of
  static length 0 records nothing for its clobber sites, and an empty stack
  for each of its append sites (see ``_record_zero_trip``). Planted values
  are extra ``xs``; the occurrence indices of names planted by a function are
  extra carries and the values their functions close over extra constants.
  """
  p = eqn.params
  length, n_consts, n_carry = p['length'], p['num_consts'], p['num_carry']
  t = _transformed(scope, p['jaxpr'])
  planted = _take_planted(
      scope, eqn, [site.with_loop_axis(length) for site in t.planted_sites]
  )
  # The scan reads and stacks along axis 0; the user's values have the loop
  # axis after the axes of the vmaps applied outside the loop.
  planted = [
      jnp.moveaxis(leaf, at, 0)
      for leaf, at in zip(planted, _loop_axes(t.planted_sites))
  ]
  n_ys = len(eqn.outvars) - n_carry
  n_fns, hoisted = len(t.fn_names), list(t.hoisted)
  new_jaxpr, clobber_avals = _scan_body(
      t.jaxpr, t.sites, n_consts, n_carry, n_ys, len(planted), n_fns,
      len(hoisted)
  )
  consts, carry, xs = _split(invals, n_consts, n_carry)
  starts = t.fn_inputs(scope)[:n_fns]
  outs = interpreter.bind(
      eqn,
      [*consts, *hoisted, *carry, *starts,
       *map(_jax.zeros_like_aval, clobber_avals), *xs, *planted],
      jaxpr=new_jaxpr,
      num_consts=n_consts + len(hoisted),
      num_carry=n_carry + n_fns + len(clobber_avals),
  )
  carry, ends, clobbered_leaves, ys, appended_leaves = _split(
      outs, n_carry, n_fns, len(clobber_avals), n_ys
  )
  t.fn_finish(scope, ends, times=length)
  if length == 0:
    _record_zero_trip(scope, eqn)
    return [*carry, *ys]
  clobbered, appended = iter(clobbered_leaves), iter(appended_leaves)
  for site in t.sites:
    if site.mode == 'append':
      leaves = [
          jnp.moveaxis(next(appended), 0, site.outer_vmaps)
          for _ in range(site.num_leaves)
      ]
      scope.record(scope.here(site.with_loop_axis(length), eqn), leaves)
    else:
      leaves = [next(clobbered) for _ in range(site.num_leaves)]
      scope.record(scope.here(site, eqn), leaves)
  return [*carry, *ys]


def _record_zero_trip(scope: Scope, eqn) -> None:
  """Records an empty stack for each append site of a scan of length 0.

  Its body never runs, so its clobbers sow nothing; each append site gives
  the stack of no values, as the ``ys`` of the scan do. That includes an
  append that a later clobber of its name supersedes within one iteration
  (the transformed body no longer lists it): no iteration ran the clobber.
  """
  if not scope.request.collect:
    return  # nothing is recorded (plant)
  appends = Request(_Appends(scope.request.selection))
  for site in interpreter.transform(eqn.params['jaxpr'], appends).sites:
    stacked = scope.here(site.with_loop_axis(0), eqn)
    scope.record(
        stacked, [jnp.zeros(shape, dtype) for shape, dtype in stacked.avals]
    )


@dataclasses.dataclass(frozen=True)
class _Appends:
  """The sows of ``selection`` with mode ``'append'``."""

  selection: tp.Any  # selection.SiteFilter

  def matches(self, params: tp.Mapping[str, tp.Any]) -> bool:
    return params['mode'] == 'append' and self.selection.matches(params)


def _loop_axes(sites: tp.Sequence[Site]) -> list[int]:
  """For each leaf of ``sites``: where a loop around them puts its axis."""
  return [site.outer_vmaps for site in sites for _ in range(site.num_leaves)]


# The rewritten bodies are cached by the identity of the (cached) transformed
# body: a new jaxpr object on every call would miss JAX's compilation cache,
# so an eager capture would compile the loop again on each call.
@_jax.weakref_lru_cache(trace_context_in_key=False)
def _scan_body(closed: core.ClosedJaxpr, sites, n_consts, n_carry, n_ys,
               n_planted, n_fns, n_hoisted):
  """The scan body with clobbered leaves as carries, appended ones as ys,
  the hoisted values as constants and the occurrence indices as carries."""
  body = closed.jaxpr
  n_xs = (len(body.invars) - n_consts - n_carry - n_planted - n_fns
          - n_hoisted)
  consts_in, carry_in, xs_in, planted_in, starts_in, hoisted_in = _split(
      body.invars, n_consts, n_carry, n_xs, n_planted, n_fns
  )
  carry_out, ys_out, sown_out, ends_out = _split(
      body.outvars, n_carry, n_ys, len(body.outvars) - n_carry - n_ys - n_fns
  )
  per_site = split_records(sites, sown_out)
  clobber_out = [v for s, vs in per_site if s.mode == 'clobber' for v in vs]
  append_out = [v for s, vs in per_site if s.mode == 'append' for v in vs]
  clobber_in = [core.Var(v.aval) for v in clobber_out]  # never read
  new_body = body.replace(
      invars=[*consts_in, *hoisted_in, *carry_in, *starts_in, *clobber_in,
              *xs_in, *planted_in],
      outvars=[*carry_out, *ends_out, *clobber_out, *ys_out, *append_out],
  )
  return (core.ClosedJaxpr(new_body, closed.consts),
          tuple(v.aval for v in clobber_out))


def _split(values: tp.Sequence[tp.Any], *sizes: int) -> list[list[tp.Any]]:
  """Splits ``values`` into consecutive chunks of ``sizes`` and the rest."""
  chunks, start = [], 0
  for size in sizes:
    chunks.append(list(values[start : start + size]))
    start += size
  chunks.append(list(values[start:]))
  return chunks


def _cond(scope: Scope, eqn, invals):
  """Sown values become extra branch outputs; every branch must agree.

  Names planted by a function may be sown by some branches only: each
  branch takes the occurrence indices of them all (returning those it does
  not sow unchanged) and the values every branch's functions close over.
  """
  branches = [
      _transformed(scope, branch) for branch in eqn.params['branches']
  ]
  _check_branches_agree(eqn, branches)
  planted = _take_planted(scope, eqn, branches[0].planted_sites)
  fn_names = tuple(
      name
      for name in scope.request.fn_names
      if any(name in b.fn_names for b in branches)
  )
  hoisted = [value for b in branches for value in b.hoisted]
  hoisted_avals = [
      [v.aval for v in b.jaxpr.jaxpr.invars[len(b.jaxpr.jaxpr.invars)
                                           - len(b.hoisted):]]
      for b in branches
  ]
  jaxprs = tuple(
      _cond_branch(b, fn_names, i, hoisted_avals)
      for i, b in enumerate(branches)
  )
  starts = [intervene.as_index(scope.counter(n).index) for n in fn_names]
  outs = interpreter.bind(
      eqn, [*invals, *planted, *starts, *hoisted], branches=jaxprs
  )
  counts = []
  for name in fn_names:
    per_branch = {
        dict(zip(b.fn_names, b.fn_counts)).get(name, 0) for b in branches
    }
    counts.append(per_branch.pop() if len(per_branch) == 1 else None)
  agreed = interpreter.Transformed(
      branches[0].jaxpr, branches[0].sites, branches[0].planted_sites,
      fn_names, tuple(counts),
  )
  return _finish(scope, eqn, outs, agreed)


def _cond_branch(
    t: interpreter.Transformed,
    fn_names: tuple[tp.Any, ...],
    position: int,
    hoisted_avals: list[list[tp.Any]],
) -> core.ClosedJaxpr:
  """Branch ``t`` taking the start indices of all ``fn_names`` and the
  hoisted values of all branches (its own are those at ``position``)."""
  if not fn_names and not any(hoisted_avals):
    return t.jaxpr
  jaxpr = t.jaxpr.jaxpr
  n_own = len(t.fn_names)
  head, own_starts, own_hoisted = _split(
      jaxpr.invars, len(jaxpr.invars) - n_own - len(t.hoisted), n_own
  )
  outs, own_ends = _split(jaxpr.outvars, len(jaxpr.outvars) - n_own)
  start_of = dict(zip(t.fn_names, own_starts))
  end_of = dict(zip(t.fn_names, own_ends))
  index_aval = jax.core.ShapedArray((), jnp.int32)
  starts = [start_of.get(name) or core.Var(index_aval) for name in fn_names]
  # A name this branch does not sow: its index passes through unchanged.
  ends = [end_of.get(name, start) for name, start in zip(fn_names, starts)]
  hoisted = []
  for i, avals in enumerate(hoisted_avals):
    if i == position:
      hoisted.extend(own_hoisted)
    else:  # another branch's values, never read here
      hoisted.extend(core.Var(aval) for aval in avals)
  new = jaxpr.replace(
      invars=[*head, *starts, *hoisted], outvars=[*outs, *ends]
  )
  return core.ClosedJaxpr(new, t.jaxpr.consts)


def _check_branches_agree(eqn, branches: list[interpreter.Transformed]):
  first = branches[0]
  if all(
      b.sites == first.sites and b.planted_sites == first.planted_sites
      for b in branches
  ):
    return
  lines = [
      f'  branch {i} sows {_describe_sites(b.sites)}'
      for i, b in enumerate(branches)
  ]
  raise ValueError(
      f'capture: the branches of a cond/switch (at {where(eqn)})'
      ' must sow the same names, modes, structures, shapes and dtypes in the'
      ' same order:\n' + '\n'.join(lines)
  )


def _describe_sites(sites: tp.Sequence[Site]) -> str:
  if not sites:
    return 'nothing'
  return ', '.join(
      f'{s.name!r} ({s.mode}, {s.tree}, '
      + ', '.join(f'{jnp.dtype(d).name}{list(shape)}' for shape, d in s.avals)
      + ')'
      for s in sites
  )


def _while(scope: Scope, eqn, invals):
  """Clobbered values become extra carries; appended values are refused.

  The trip count is only known at run time, so an appended value has no
  static shape. A clobber carry starts from the last value collected under
  the same name before the loop, so a loop that runs zero times leaves it
  unchanged; without such a value there is nothing true to return for zero
  trips, so the loop is refused. Planting a tuple of values is refused for
  the same reason; a name planted by a function takes its occurrence index
  as an extra carry, and the values its function closes over as extra
  constants of the body.
  """
  p = eqn.params
  if dispatch.contains(p['cond_jaxpr'].jaxpr, scope.request):
    raise NotImplementedError(
        f'capture: the condition of a while_loop (at {where(eqn)})'
        ' sows; move the sows into the body or out of the loop.'
    )
  t = _transformed(scope, p['body_jaxpr'])
  appended = [s.name for s in t.sites if s.mode == 'append']
  if appended:
    raise NotImplementedError(
        f'capture: a while_loop (at {where(eqn)}) sows'
        f' {describe_names(appended)} with mode=\'append\'; its'
        ' trip count is only known at run time, so appended values cannot'
        ' have a static shape. Use mode=\'clobber\' (keeps the last value),'
        ' lax.scan or a fori_loop with static bounds, or move the sows out.'
    )
  if t.planted_sites:
    raise NotImplementedError(
        f'plant: a while_loop (at {where(eqn)}) sows'
        f' {_describe_sites(t.planted_sites)}; its trip count is only known'
        ' at run time, so a tuple of values cannot be planted there. Plant'
        ' a function instead (plant(f, {name: fn})), or use lax.scan or a'
        ' fori_loop with static bounds.'
    )
  init = [leaf for site in t.sites for leaf in _prior_value(scope, eqn, site)]
  # The clobber carries and then the occurrence indices go after the
  # original carries; the hoisted values after the constants of the body.
  n_carry, n_fns = len(eqn.outvars), len(t.fn_names)
  body_jaxpr, cond_jaxpr = _while_jaxprs(
      t.jaxpr, p['cond_jaxpr'], p['body_nconsts'], n_carry, n_fns,
      len(t.hoisted)
  )
  n_cond = p['cond_nconsts']
  consts, carry = _split(invals, n_cond + p['body_nconsts'])
  starts = t.fn_inputs(scope)[:n_fns]
  outs = interpreter.bind(
      eqn,
      [*consts, *t.hoisted, *carry, *init, *starts],
      body_jaxpr=body_jaxpr,
      cond_jaxpr=cond_jaxpr,
      body_nconsts=p['body_nconsts'] + len(t.hoisted),
  )
  return _finish(scope, eqn, outs, t, times=None)  # run-time trip count


@_jax.weakref_lru_cache(trace_context_in_key=False)
def _while_jaxprs(closed: core.ClosedJaxpr, cond: core.ClosedJaxpr,
                  n_consts: int, n_carry: int, n_fns: int, n_hoisted: int):
  """Body and condition taking the clobbered leaves, then the occurrence
  indices, as extra carries, and the hoisted values as body constants."""
  body = closed.jaxpr
  consts_in, carry_in, starts_in, hoisted_in = _split(
      body.invars, n_consts, n_carry, n_fns
  )
  _, clobber_out, _ = _split(
      body.outvars, n_carry, len(body.outvars) - n_carry - n_fns
  )
  clobber_body_in = [core.Var(v.aval) for v in clobber_out]  # never read
  # The condition reads none of the extra carries.
  extra_cond_in = [core.Var(v.aval) for v in [*clobber_out, *starts_in]]
  new_body = body.replace(
      invars=[*consts_in, *hoisted_in, *carry_in, *clobber_body_in,
              *starts_in]
  )
  new_cond = cond.jaxpr.replace(invars=[*cond.jaxpr.invars, *extra_cond_in])
  return (core.ClosedJaxpr(new_body, closed.consts),
          core.ClosedJaxpr(new_cond, cond.consts))


def _prior_value(scope: Scope, eqn, site: Site) -> list[tp.Any]:
  prior = scope.last_record(site.name)
  if prior is None or (prior[0].tree, prior[0].avals) != (site.tree,
                                                         site.avals):
    if prior is None:
      problem = ('nothing was sown under that name before the loop (in the'
                 ' same function body)')
    else:
      problem = (f'the value sown under that name before the loop,'
                 f' {_describe_sites([prior[0]])}, differs from it in'
                 ' structure, shapes or dtypes')
    raise NotImplementedError(
        f'capture: a while_loop (at {where(eqn)}) clobbers'
        f' {site.name!r} but may run zero times, and {problem}. The loop'
        f' sows {_describe_sites([site])}; a zero-trip loop has no true value'
        ' to return, so sow a value like it before the loop, e.g.'
        ' sow(init, name=..., mode=\'clobber\').'
    )
  return list(prior[1])


def _remat(scope: Scope, eqn, invals):
  """Re-binds ``checkpoint`` with a body that also returns sown leaves."""
  p = eqn.params
  t = _transformed(scope, _jax.close_jaxpr(p['jaxpr']))
  planted = [*_take_planted(scope, eqn, t.planted_sites), *t.fn_inputs(scope)]
  consts = t.jaxpr.consts
  prevent_cse = p['prevent_cse']
  if isinstance(prevent_cse, tuple):
    prevent_cse = (
        *([False] * len(consts)), *prevent_cse, *([False] * len(planted))
    )
  outs = prims.remat_p.bind(
      *consts,
      *invals,
      *planted,
      jaxpr=_jax.convert_constvars_jaxpr(t.jaxpr.jaxpr),
      prevent_cse=prevent_cse,
      differentiated=p['differentiated'],
      policy=p['policy'],
  )
  return _finish(scope, eqn, outs, t)


def _shard_map(scope: Scope, eqn, invals):
  """Sown per-shard values are assembled along the manual mesh axes.

  Each sown leaf of per-shard shape ``s`` comes out with shape
  ``(n_1, ..., n_k, *s)``, one leading axis per manual mesh axis in mesh
  order, so ``value[i, j]`` is what shard ``(i, j)`` sowed. The body is
  re-traced by ``shard_map`` itself, inside its manual-axes context, running
  this interpreter. Planting into it is refused (not implemented).
  """
  if scope.request.planted is not None:  # a planted sow is inside
    raise NotImplementedError(
        'plant: planting into a shard_map is not supported yet; plant'
        ' outside the shard_map or capture only.'
    )
  p = eqn.params
  mesh = p['mesh']
  axes = tuple(a for a in mesh.axis_names if a in p['newly_manual_axes'])
  leading = tuple(mesh.shape[a] for a in axes)
  spec = PartitionSpec(*axes)
  inner = Scope(scope.request)
  body = p['jaxpr']
  n_out = len(eqn.outvars)
  sites: list[Site] = []

  def shard_body(*args):
    outs = interpreter.evaluate(body, (), args, inner)
    sites.extend(site for site, _ in inner.records)
    sown = [
        _mark_varying(jnp.reshape(leaf, (1,) * len(axes) + jnp.shape(leaf)),
                      axes, p['check_vma'])
        for _, leaves in inner.records
        for leaf in leaves
    ]
    out_specs = (*p['out_specs'], *[spec] * len(sown))
    return _jax.FlatTree.flatten([*outs, *sown]).with_aux(out_specs)

  outs = _jax.shard_map_p.bind(
      *invals,
      subfuns=(shard_body,),
      mesh=mesh,
      in_specs=p['in_specs'],
      check_vma=p['check_vma'],
      newly_manual_axes=p['newly_manual_axes'],
      debug_info=body.debug_info,
  )
  outs = list(outs)
  recorded = [site.with_leading(*leading) for site in sites]
  for site, leaves in split_records(recorded, outs[n_out:]):
    scope.record(scope.here(site, eqn), leaves)
  return outs[:n_out]


def _mark_varying(leaf, axes, check_vma: bool):
  """Marks ``leaf`` as varying over ``axes``, as its out spec declares."""
  if not check_vma:
    return leaf
  varying = jax.typeof(leaf).mat.varying
  missing = tuple(a for a in axes if a not in varying)
  return jax.lax.pcast(leaf, missing, to='varying') if missing else leaf


RULES: dict[core.Primitive, Rule] = {
    prims.jit_p: _jit,
    prims.call_p: _inline,
    prims.closed_call_p: _inline,
    _jax.eval_jaxpr_p: functools.partial(_inline, body_param='jaxpr'),
    prims.custom_jvp_call_p: _custom_rule('call_jaxpr'),
    prims.custom_vjp_call_p: _custom_rule('call_jaxpr'),
    _jax.custom_vmap_p: _custom_rule('call'),
    prims.scan_p: _scan,
    prims.cond_p: _cond,
    prims.while_p: _while,
    prims.remat_p: _remat,
    _jax.shard_map_p: _shard_map,
}
