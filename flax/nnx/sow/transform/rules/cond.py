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
"""The rule for ``cond``/``switch``: sown values become extra branch
outputs, and every branch must sow alike."""

from __future__ import annotations

import typing as tp

import jax
import jax.extend.core as core
import jax.numpy as jnp
from jax.extend.core import primitives as prims

from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform.rules import support
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.sites import where


@interpreter.register(prims.cond_p)
def _cond(scope: Scope, eqn, invals):
  """Sown values become extra branch outputs; every branch must agree.

  Names planted by a function may be sown by some branches only: each
  branch takes the occurrence indices of them all (returning those it does
  not sow unchanged) and the values every branch's functions close over.
  """
  branches = [
      support.transformed(scope, branch) for branch in eqn.params['branches']
  ]
  _check_branches_agree(eqn, branches)
  planted = support.take_planted(scope, eqn, branches[0].planted_sites)
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
  starts = scope.start_indices(fn_names)
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
  return support.finish(scope, eqn, outs, agreed)


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
  head, own_starts, own_hoisted = support.split(
      jaxpr.invars, len(jaxpr.invars) - n_own - len(t.hoisted), n_own
  )
  outs, own_ends = support.split(jaxpr.outvars, len(jaxpr.outvars) - n_own)
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
      f'  branch {i} sows {support.describe_sites(b.sites)}'
      for i, b in enumerate(branches)
  ]
  raise ValueError(
      f'capture: the branches of a cond/switch (at {where(eqn)})'
      ' must sow the same names, modes, structures, shapes and dtypes in the'
      ' same order:\n' + '\n'.join(lines)
  )
