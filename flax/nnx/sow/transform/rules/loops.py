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
"""Rules for loops: ``scan`` (appended values stacked along the loop axis)
and ``while_loop`` (clobbered values only: its trip count is only known at
run time)."""

from __future__ import annotations

import typing as tp

import jax.extend.core as core
import jax.numpy as jnp
from jax.extend.core import primitives as prims

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform import selection
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.rules import support
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.sites import Site
from flax.nnx.sow.transform.sites import describe_names
from flax.nnx.sow.transform.sites import split_records
from flax.nnx.sow.transform.sites import where


@interpreter.register(prims.scan_p)
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
  t = support.transformed(scope, p['jaxpr'])
  planted = support.take_planted(
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
  consts, carry, xs = support.split(invals, n_consts, n_carry)
  starts = scope.start_indices(t.fn_names)
  outs = interpreter.bind(
      eqn,
      [*consts, *hoisted, *carry, *starts,
       *map(_jax.zeros_like_aval, clobber_avals), *xs, *planted],
      jaxpr=new_jaxpr,
      num_consts=n_consts + len(hoisted),
      num_carry=n_carry + n_fns + len(clobber_avals),
  )
  carry, ends, clobbered_leaves, ys, appended_leaves = support.split(
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
  appends = Request(selection.Appends(scope.request.selection))
  for site in interpreter.transform(eqn.params['jaxpr'], appends).sites:
    stacked = scope.here(site.with_loop_axis(0), eqn)
    scope.record(
        stacked, [jnp.zeros(shape, dtype) for shape, dtype in stacked.avals]
    )


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
  consts_in, carry_in, xs_in, planted_in, starts_in, hoisted_in = support.split(
      body.invars, n_consts, n_carry, n_xs, n_planted, n_fns
  )
  carry_out, ys_out, sown_out, ends_out = support.split(
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


@interpreter.register(prims.while_p)
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
  if interpreter.contains(p['cond_jaxpr'].jaxpr, scope.request):
    raise NotImplementedError(
        f'capture: the condition of a while_loop (at {where(eqn)})'
        ' sows; move the sows into the body or out of the loop.'
    )
  t = support.transformed(scope, p['body_jaxpr'])
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
        f' {support.describe_sites(t.planted_sites)}; its trip count is only'
        ' known at run time, so a tuple of values cannot be planted there.'
        ' Plant a function instead (plant(f, {name: fn})), or use lax.scan or'
        ' a fori_loop with static bounds.'
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
  consts, carry = support.split(invals, n_cond + p['body_nconsts'])
  starts = scope.start_indices(t.fn_names)
  outs = interpreter.bind(
      eqn,
      [*consts, *t.hoisted, *carry, *init, *starts],
      body_jaxpr=body_jaxpr,
      cond_jaxpr=cond_jaxpr,
      body_nconsts=p['body_nconsts'] + len(t.hoisted),
  )
  return support.finish(scope, eqn, outs, t, times=None)  # run-time trip count


@_jax.weakref_lru_cache(trace_context_in_key=False)
def _while_jaxprs(closed: core.ClosedJaxpr, cond: core.ClosedJaxpr,
                  n_consts: int, n_carry: int, n_fns: int, n_hoisted: int):
  """Body and condition taking the clobbered leaves, then the occurrence
  indices, as extra carries, and the hoisted values as body constants."""
  body = closed.jaxpr
  consts_in, carry_in, starts_in, hoisted_in = support.split(
      body.invars, n_consts, n_carry, n_fns
  )
  _, clobber_out, _ = support.split(
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
                 f' {support.describe_sites([prior[0]])}, differs from it in'
                 ' structure, shapes or dtypes')
    raise NotImplementedError(
        f'capture: a while_loop (at {where(eqn)}) clobbers'
        f' {site.name!r} but may run zero times, and {problem}. The loop'
        f' sows {support.describe_sites([site])}; a zero-trip loop has no true'
        ' value to return, so sow a value like it before the loop, e.g.'
        ' sow(init, name=..., mode=\'clobber\').'
    )
  return list(prior[1])
