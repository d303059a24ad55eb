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
"""Capture rules for higher-order primitives whose sub-jaxprs sow.

A rule is only consulted for an equation that holds a selected sow somewhere
inside; every other equation is bound unchanged. A higher-order primitive
missing from ``RULES`` is refused by the interpreter with an error naming it.
The table at the bottom of this file is the complete list.
"""

from __future__ import annotations

import typing as tp

from jax._src import core
from jax._src import sharding_impls
from jax._src import source_info_util
from jax.extend.core import primitives as prims

from flax.nnx.sow import interpreter
from flax.nnx.sow.interpreter import Record
from flax.nnx.sow.selection import Selection


def _jit(eqn, invals, selection):
  """Re-binds ``jit`` with a body that also returns the sown leaves.

  The transformed body is cached by the identity of the original one, so an
  eager ``capture(jax.jit(f))`` runs compiled code and compiles only once.
  """
  transformed = interpreter.transform(eqn.params['jaxpr'], selection)
  n_extra = transformed.num_sown_leaves
  params = dict(
      eqn.params,
      jaxpr=transformed.jaxpr,
      out_shardings=(
          *eqn.params['out_shardings'],
          *[sharding_impls.UNSPECIFIED] * n_extra,
      ),
      out_layouts=(*eqn.params['out_layouts'], *[None] * n_extra),
  )
  outs = prims.jit_p.bind(*invals, **params)
  return _split(eqn, outs, transformed.sites)


def _inline(eqn, invals, selection):
  """Evaluates a call primitive's body in place (``call_jaxpr``)."""
  body = eqn.params['call_jaxpr']
  if isinstance(body, core.ClosedJaxpr):
    return interpreter.evaluate(body.jaxpr, body.consts, invals, selection)
  return interpreter.evaluate(body, (), invals, selection)


def _scan(eqn, invals, selection):
  """Sown values become extra ``ys``: stacked along the scan axis."""
  transformed = interpreter.transform(eqn.params['jaxpr'], selection)
  outs = prims.scan_p.bind(
      *invals, **dict(eqn.params, jaxpr=transformed.jaxpr)
  )
  return _split(eqn, outs, transformed.sites)


def _cond(eqn, invals, selection):
  """Sown values become extra branch outputs; every branch must agree."""
  branches = [
      interpreter.transform(branch, selection)
      for branch in eqn.params['branches']
  ]
  _check_branches_agree(eqn, branches)
  outs = prims.cond_p.bind(
      *invals,
      **dict(eqn.params, branches=tuple(b.jaxpr for b in branches)),
  )
  return _split(eqn, outs, branches[0].sites)


def _while(eqn, invals, selection):
  del invals
  names = sorted(map(repr, interpreter.selected_names(eqn, selection)))
  raise NotImplementedError(
      'capture: a while_loop (at'
      f' {source_info_util.summarize(eqn.source_info)}) sows'
      f' {", ".join(names)}; its trip count is only known at run time, so'
      ' appended values cannot have a static shape. Use lax.scan or a'
      ' fori_loop with static bounds, or move the sows out of the loop.'
  )


def _split(eqn, outs, sites) -> tuple[list[tp.Any], list[Record]]:
  n = len(eqn.outvars)
  return list(outs[:n]), interpreter.split_records(sites, outs[n:])


def _sown_avals(transformed: interpreter.Transformed):
  n = transformed.num_sown_leaves
  avals = transformed.jaxpr.out_avals[len(transformed.jaxpr.out_avals) - n :]
  return [(a.shape, a.dtype) for a in avals]


def _check_branches_agree(eqn, branches: list[interpreter.Transformed]):
  first = branches[0]
  if all(
      b.sites == first.sites and _sown_avals(b) == _sown_avals(first)
      for b in branches
  ):
    return
  lines = []
  for i, b in enumerate(branches):
    sown = ', '.join(
        f'{site.name!r}: {site.tree}' for site in b.sites
    ) or 'nothing'
    shapes = ', '.join(f'{dtype}{list(shape)}' for shape, dtype in
                       _sown_avals(b)) or '-'
    lines.append(f'  branch {i} sows {sown} with leaves {shapes}')
  raise ValueError(
      'capture: the branches of a cond/switch (at'
      f' {source_info_util.summarize(eqn.source_info)}) must sow the same'
      ' names, structures, shapes and dtypes in the same order:\n'
      + '\n'.join(lines)
  )


RULES: dict[core.Primitive, interpreter.Rule] = {
    prims.jit_p: _jit,
    prims.closed_call_p: _inline,
    prims.custom_jvp_call_p: _inline,
    prims.custom_vjp_call_p: _inline,
    prims.scan_p: _scan,
    prims.cond_p: _cond,
    prims.while_p: _while,
}

interpreter.higher_order_rules.update(RULES)
