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
and ``while_loop`` (clobbered values carried; appended values, whose number
is only known at run time, in a buffer of a bound the capture gives, with
the count of steps run: ``steps.Steps``)."""

from __future__ import annotations

import dataclasses
import itertools
import typing as tp

import jax
import jax.extend.core as core
from jax import lax
import jax.numpy as jnp
from jax.extend.core import primitives as prims
import numpy as np

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform import runtime_checks
from flax.nnx.sow.transform import selection
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.rules import support
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.sites import Site
from flax.nnx.sow.transform.sites import describe_names
from flax.nnx.sow.transform.sites import split_records
from flax.nnx.sow.transform.sites import where
from flax.nnx.sow.transform.steps import Steps


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
  appends = Request(selection.Appends(scope.request.selection),
                    bounds=scope.request.bounds)
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
  """Clobbered values become extra carries; appended values extra buffers.

  The trip count is only known at run time, so an appended value needs a
  bound from the capture (``max_steps``): each append site gets a buffer of
  that many steps, which step ``i`` writes at ``i``, and the loop one step
  count; the site is recorded as a ``Steps`` of the two. Past the bound,
  steps leave the buffer as it is, and the capture's
  ``on_overflow`` says whether that is an error. A clobber carry starts from
  the last value collected under the same name before the loop, so a loop
  that runs zero times leaves it unchanged; without such a value there is
  nothing true to return for zero trips, so the loop is refused. A planted
  value is one entry of per-step values (a ``Steps``, as ``capture``
  returns, or a stack along the loop axis), an extra constant of the body
  that step ``i`` reads at ``i``; a loop that runs more steps than it holds
  raises. A name planted by a function takes its occurrence index as an
  extra carry, and the values its function closes over as extra constants
  of the body.
  """
  p = eqn.params
  if interpreter.contains(p['cond_jaxpr'].jaxpr, scope.request):
    raise NotImplementedError(
        f'capture: the condition of a while_loop (at {where(eqn)})'
        ' sows; move the sows into the body or out of the loop.'
    )
  t = support.transformed(scope, p['body_jaxpr'])
  bounds = tuple(
      scope.request.bounds.bound(s.name) if s.mode == 'append' else None
      for s in t.sites
  )
  unbounded = [
      s.name for s, bound in zip(t.sites, bounds)
      if s.mode == 'append' and bound is None
  ]
  if unbounded:
    call = scope.request.bounds.where
    raise NotImplementedError(
        f'{call}: a while_loop (at {where(eqn)}) sows'
        f' {describe_names(unbounded)} with mode=\'append\'; its'
        ' trip count is only known at run time, so appended values need a'
        f' bound: {call}(f, max_steps=N) (or max_steps={{name or pattern:'
        ' N}) keeps N steps of each, with the count of steps run. Or use'
        " mode='clobber' (keeps the last value), lax.scan or a fori_loop"
        ' with static bounds.'
    )
  _check_predicate_leads(eqn, t.sites, p['cond_jaxpr'])
  planted = _planted_steps(scope, eqn, t.planted_sites)
  stacked = [leaf for values, _, _ in planted for leaf in values]
  lengths = tuple(length for _, _, length in planted)
  clobbered = [s for s in t.sites if s.mode == 'clobber']
  init = [leaf for site in clobbered for leaf in _prior_value(scope, eqn, site)]
  # The clobber carries, the buffers, the step count and then the
  # occurrence indices go after the original carries; the hoisted values
  # after the constants of the body.
  n_carry, n_fns = len(eqn.outvars), len(t.fn_names)
  body_jaxpr, cond_jaxpr = _while_jaxprs(
      t.jaxpr, p['cond_jaxpr'], p['body_nconsts'], n_carry, n_fns,
      len(t.hoisted), t.sites, bounds,
      _count_shape(eqn, t.sites, bounds, p['cond_jaxpr']),
      scope.request.bounds.on_overflow == 'truncate',
      t.planted_sites, lengths
  )
  counted = _counts_steps(bounds, t.planted_sites)
  buffers, count = [], None
  if counted:
    buffers, count = _buffers(
        body_jaxpr,
        p['body_nconsts'] + len(t.hoisted) + len(stacked) + n_carry
        + len(init),
        len(_buffer_avals(t.sites, bounds)),
    )
  n_cond = p['cond_nconsts']
  consts, carry = support.split(invals, n_cond + p['body_nconsts'])
  starts = scope.start_indices(t.fn_names)
  steps = [count] if counted else []
  outs = interpreter.bind(
      eqn,
      [*consts, *t.hoisted, *stacked, *carry, *init, *buffers, *steps,
       *starts],
      body_jaxpr=body_jaxpr,
      cond_jaxpr=cond_jaxpr,
      body_nconsts=p['body_nconsts'] + len(t.hoisted) + len(stacked),
  )
  carry, clobbered_out, buffers_out, steps, ends = support.split(
      outs, n_carry, len(init), len(buffers), len(steps)
  )
  clobbered_leaves, written = iter(clobbered_out), iter(buffers_out)
  for site, bound in zip(t.sites, bounds):
    if bound is None:
      leaves = [next(clobbered_leaves) for _ in range(site.num_leaves)]
      scope.record(scope.here(site, eqn), leaves)
    else:
      values = [next(written) for _ in range(site.num_leaves)]
      scope.record(scope.here(_steps_site(site, bound), eqn),
                   [*values, steps[0]])
  if any(b is not None for b in bounds) and (
      scope.request.bounds.on_overflow == 'error'):
    _check_overflow(eqn, steps[0], t.sites, bounds)
  for site, (_, held, _) in zip(t.planted_sites, planted):
    _check_planted(eqn, steps[0], held, site)
  t.fn_finish(scope, ends, None)  # run-time trip count
  return carry


def _planted_steps(scope: Scope, eqn, sites):
  """For each planted site: its per-step values (leaves stacked along the
  loop axis), how many steps they hold (an int32 of the count's shape), and
  the length of their loop axis.

  Raises:
    NotImplementedError: the planter has no per-step values there (the
      planted perturbations of ``nnx.capture``'s ``init``).
  """
  planted = []
  for site in sites:
    entry_of = getattr(scope.planter, 'entry', None)
    entry = None if entry_of is None else entry_of(site)
    if entry is None:
      raise NotImplementedError(
          f'plant: a while_loop (at {where(eqn)}) sows'
          f' {support.describe_sites([site])}; its trip count is only known'
          ' at run time, so only per-step values (a Steps, or a stack along'
          ' the loop axis) or a function can be planted there'
          ' (plant(f, {name: fn})).'
      )
    at = site.outer_vmaps
    if isinstance(entry, Steps):
      length = entry.max_steps
      leaves = _plant(scope, scope.here(_steps_site(site, length), eqn))
      values, held = leaves[:-1], leaves[-1]
    else:
      shapes = [np.shape(leaf) for leaf in jax.tree_util.tree_leaves(entry)]
      length = shapes[0][at] if shapes and len(shapes[0]) > at else 0
      values = _plant(scope, scope.here(site.with_loop_axis(length), eqn))
      held = jnp.full(site.lead, length, jnp.int32)
    if length < 1:
      raise ValueError(
          f'plant: the values planted into {site.name!r} in a while_loop (at'
          f' {where(eqn)}) hold no step.'
      )
    planted.append((values, held, length))
  return planted


def _plant(scope: Scope, site: Site) -> list[tp.Any]:
  planted = scope.plant(site)
  assert planted is not None, site  # the planter had an entry for it
  return planted


def _check_planted(eqn, count, held, site: Site) -> None:
  """Raises if the loop ran more steps than the planted values hold
  (``runtime_checks``)."""
  at = where(eqn)

  def check(count, held):
    ran = np.asarray(count)
    short = ran > np.asarray(held)
    if np.any(short):
      raise ValueError(
          f'plant: a while_loop (at {at}) ran {int(np.max(ran))} steps, but'
          f' the values planted into {site.name!r} hold'
          f' {int(np.min(np.asarray(held)))}: plant a value for every step.'
      )

  runtime_checks.when_known(check, count, held)


def _counts_steps(bounds, planted_sites) -> bool:
  """Whether the loop carries a step count: a site appends (a sown value
  without leaves too) or is planted."""
  return any(b is not None for b in bounds) or bool(planted_sites)


def _buffers(body: core.ClosedJaxpr, at: int, n_buffers: int):
  """Zero buffers of each bound's steps, and the step count: of the types
  the body takes them with (inputs ``at`` on), as a carry must be."""
  zeros = [_jax.zeros_like_aval(aval)
           for aval in body.in_avals[at : at + n_buffers + 1]]
  return zeros[:n_buffers], zeros[n_buffers]


def _check_predicate_leads(eqn, sites, cond: core.ClosedJaxpr) -> None:
  """Refuses a loop whose batched predicate may not lead the sown values.

  A batched predicate (one per example) makes the loop keep the carries of
  the examples that stopped: each carry, so each value the capture adds to
  the loop (a clobbered value, a buffer, the step count), must have the
  predicate's axes first. JAX's while batching puts the axis of a vmap
  that does not batch the predicate (``jax.jacfwd``'s, over a tangent
  basis) after the predicate's, while a sown value has the axes of the
  vmaps around the loop outermost first. The two agree where the vmaps that
  batch the predicate are the outermost: the leading axes of the values
  then start with the predicate's shape, and no other choice of them has
  it. Otherwise which axes are the predicate's cannot be told, and the
  loop refuses rather than guess.
  """
  shape = tuple(cond.out_avals[0].shape)
  if not shape:
    return
  for site in sites:
    lead = site.lead
    places = [
        chosen for chosen in itertools.combinations(range(len(lead)),
                                                    len(shape))
        if tuple(lead[i] for i in chosen) == shape
    ]
    if places == [tuple(range(len(shape)))]:
      continue
    raise NotImplementedError(
        f'capture: a while_loop (at {where(eqn)}) stops each example at its'
        f' own step (its predicate has shape {shape}), but the leading axes'
        f' of the values of sow {site.name!r}, {tuple(lead)}, do not show'
        ' which are the predicate\'s: a vmap that does not batch the'
        ' predicate (jax.jacfwd, say) may be applied around one that does.'
        ' Capture inside the outer transform instead.'
    )


def _count_shape(eqn, sites, bounds, cond: core.ClosedJaxpr) -> tuple:
  """The shape of the step count: the leading axes of the vmaps around the
  loop (those of the sown leaves), as the sown values have them.

  Under a batched predicate (a vmap around the loop inside the capture)
  each example stops at its own step and the loop keeps its carries, the
  count among them: one count per example.
  """
  leads = {site.lead for site, bound in zip(sites, bounds) if bound is not None}
  if len(leads) > 1:
    raise NotImplementedError(
        f'capture: the sows of a while_loop (at {where(eqn)}) differ in'
        f' their vmapped axes: {support.describe_sites(sites)}.'
    )
  return leads.pop() if leads else tuple(cond.out_avals[0].shape)


def _buffer_avals(sites, bounds) -> list[tuple[tuple[int, ...], tp.Any]]:
  return [
      ((*shape[:site.outer_vmaps], bound, *shape[site.outer_vmaps:]),
       dtype)
      for site, bound in zip(sites, bounds) if bound is not None
      for shape, dtype in site.avals
  ]


def _steps_site(site: Site, bound: int) -> Site:
  """The record of an append site of a while_loop: a ``Steps`` of its values
  stacked along the loop axis and of the count."""
  stacked = site.with_loop_axis(bound)
  values = jax.tree_util.tree_unflatten(site.tree, [0] * site.num_leaves)
  lead = site.lead
  return dataclasses.replace(
      stacked,
      tree=jax.tree_util.tree_structure(Steps(values, 0)),
      avals=(*stacked.avals, (tuple(lead), np.dtype(np.int32))),
  )


def _check_overflow(eqn, count, sites, bounds) -> None:
  """Raises if the loop ran more steps than a site keeps
  (``runtime_checks``)."""
  smallest = min(b for b in bounds if b is not None)
  names = [s.name for s, b in zip(sites, bounds) if b == smallest]
  at = where(eqn)

  def check(count):
    ran = int(np.max(np.asarray(count), initial=0))
    if ran > smallest:
      raise ValueError(
          f'capture: a while_loop (at {at}) ran {ran} steps, more than the'
          f' {smallest} kept of {describe_names(names)}'
          ' (max_steps). Raise max_steps, or pass on_overflow=\'truncate\''
          ' to keep the first steps (Steps.count says how many ran).'
      )

  runtime_checks.when_known(check, count)


@_jax.weakref_lru_cache(trace_context_in_key=False)
def _while_jaxprs(closed: core.ClosedJaxpr, cond: core.ClosedJaxpr,
                  n_consts: int, n_carry: int, n_fns: int, n_hoisted: int,
                  sites: tuple[Site, ...], bounds: tuple[int | None, ...],
                  count_shape: tuple[int, ...], truncate: bool,
                  planted_sites: tuple[Site, ...],
                  lengths: tuple[int, ...]):
  """Body and condition taking the clobbered leaves, the buffers and the
  step count (if any site appends or is planted), then the occurrence
  indices, as extra carries, and the hoisted values and the planted values
  of every step as body constants."""
  n_stacked = sum(s.num_leaves for s in planted_sites)
  if _counts_steps(bounds, planted_sites):
    new_body = _appending_body(closed, sites, bounds, n_consts, n_carry,
                               n_fns, n_hoisted, count_shape, truncate,
                               planted_sites, lengths)
  else:
    body = closed.jaxpr
    consts_in, carry_in, starts_in, hoisted_in = support.split(
        body.invars, n_consts, n_carry, n_fns
    )
    clobber_in = [  # never read
        core.Var(v.aval) for v in body.outvars[n_carry:len(body.outvars)
                                               - n_fns]
    ]
    new_body = core.ClosedJaxpr(
        body.replace(invars=[*consts_in, *hoisted_in, *carry_in,
                             *clobber_in, *starts_in]),
        closed.consts,
    )
  # The condition reads none of the extra carries.
  extra = new_body.in_avals[n_consts + n_hoisted + n_stacked + n_carry:]
  # Its argument names are kept, and named '' for the extra carries, as
  # JAX's own while rules do: `replace` drops them, which JAX 0.10.0 and
  # 0.10.1 cannot differentiate (their while JVP appends to the names).
  debug = cond.jaxpr.debug_info
  names = debug.arg_names
  if names is None:
    names = ('',) * len(cond.jaxpr.invars)
  new_cond = cond.jaxpr.replace(
      invars=[*cond.jaxpr.invars, *map(core.Var, extra)],
      debug_info=debug._replace(arg_names=(*names, *('',) * len(extra))),
  )
  return new_body, core.ClosedJaxpr(new_cond, cond.consts)


def _appending_body(closed: core.ClosedJaxpr, sites, bounds, n_consts,
                    n_carry, n_fns, n_hoisted, count_shape, truncate: bool,
                    planted_sites, lengths) -> core.ClosedJaxpr:
  """The body (see ``_while_jaxprs``) writing each appended value into its
  buffer at the step count. Past the bound, with ``truncate`` the buffer is
  left as it is; else the last entry is overwritten, which is harmless: the
  loop then raises (``_check_overflow``). Each step reads the planted
  values at its index (past their length the loop raises,
  ``_check_planted``)."""
  body = closed.jaxpr
  n_planted = sum(s.num_leaves for s in planted_sites)
  consts_in, carry_in, planted_in, starts_in, hoisted_in = support.split(
      body.invars, n_consts, n_carry, n_planted, n_fns
  )
  stacked_avals = [
      jax.ShapeDtypeStruct(shape, dtype)
      for site, length in zip(planted_sites, lengths)
      for shape, dtype in site.with_loop_axis(length).avals
  ]
  reads = [(site.outer_vmaps, length)
           for site, length in zip(planted_sites, lengths)
           for _ in range(site.num_leaves)]
  n_clobbered = sum(s.num_leaves for s, b in zip(sites, bounds) if b is None)
  buffer_avals = _buffer_avals(sites, bounds)
  run = core.jaxpr_as_fun(closed)

  def step(*args):
    (consts, hoisted, stacked, carry, _, buffers, (count,),
     starts) = support.split(
         args, n_consts, n_hoisted, n_planted, n_carry, n_clobbered,
         len(buffer_avals), 1
     )
    # Every running example is at the same step (the others keep their
    # carries), so the step is the largest count.
    index = jnp.max(count) if count.ndim else count
    planted = [
        lax.dynamic_index_in_dim(leaf, jnp.minimum(index, length - 1), at,
                                 keepdims=False)
        for leaf, (at, length) in zip(stacked, reads)
    ]
    outs = run(*consts, *carry, *planted, *starts, *hoisted)
    carry_out, sown, ends = support.split(
        outs, n_carry, len(outs) - n_carry - n_fns
    )
    clobbered, written, buffers = [], [], iter(buffers)
    for (site, leaves), bound in zip(split_records(sites, sown), bounds):
      if bound is None:
        clobbered.extend(leaves)
        continue
      at = site.outer_vmaps
      last = jnp.minimum(index, bound - 1)
      for leaf in leaves:
        buffer = next(buffers)
        if truncate:
          # In place: past the bound, the last entry is written with itself
          # (an entry read, not the whole buffer copied).
          kept = lax.dynamic_index_in_dim(buffer, last, at, keepdims=False)
          leaf = jnp.where(index < bound, leaf, kept)
        written.append(lax.dynamic_update_index_in_dim(buffer, leaf, last, at))
    return [*carry_out, *clobbered, *written, count + 1, *ends]

  per_site = split_records(sites, body.outvars[n_carry:len(body.outvars)
                                                - n_fns])
  clobbered_avals = [
      v.aval for (_, vs), b in zip(per_site, bounds) if b is None for v in vs
  ]
  # A buffer has the type of the values written into it, its step axis
  # added: inside a shard_map, their varying manual axes too (a carry's
  # type must not change from step to step).
  written_avals = [
      v.aval for (_, vs), b in zip(per_site, bounds) if b is not None
      for v in vs
  ]
  buffer_in = [
      aval.update(shape=shape, weak_type=False)
      for aval, (shape, _) in zip(written_avals, buffer_avals)
  ]
  # The abstract values themselves (not ShapeDtypeStructs, which drop the
  # varying manual axes).
  avals = [
      *(v.aval for v in [*consts_in, *hoisted_in]),
      *stacked_avals,
      *(v.aval for v in carry_in),
      *clobbered_avals,
      *buffer_in,
      jax.ShapeDtypeStruct(count_shape, jnp.int32),
      *(v.aval for v in starts_in),
  ]
  return jax.make_jaxpr(step)(*avals)


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
