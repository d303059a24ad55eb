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
"""The jaxpr interpreter that harvests sows.

``evaluate`` replays a jaxpr under whatever JAX trace is current (eager
evaluation, ``jit`` staging, ``grad``, ``vmap``...). Each equation is bound as
it is, except:

* a selected ``sow`` equation, which records its values and passes them
  through, and
* a higher-order equation whose sub-jaxprs contain a selected sow, which is
  handled by its rule in ``higher_order_rules`` (filled in by ``rules.py``),
  or refused with an error naming the primitive.

Which equations need attention is decided once per (jaxpr, selection) by the
cached ``plan``; equations without selected sows inside are bound unchanged, so
a ``jit`` or a ``custom_vjp`` without sows keeps its compilation cache and its
custom rules.

Sub-jaxprs are transformed by tracing ``evaluate`` over them (``transform``),
which yields a jaxpr returning the original outputs followed by the flat sown
leaves. That result is cached by the identity of the sub-jaxpr, so a rebound
``jit`` hits JAX's compilation cache on the next call.
"""

from __future__ import annotations

import dataclasses
import typing as tp

from jax._src import api_util
from jax._src import core
from jax._src import linear_util as lu
from jax._src import source_info_util
from jax._src import util as jax_util
from jax._src.interpreters import partial_eval as pe

from flax.nnx.sow import primitive
from flax.nnx.sow.selection import Selection


@dataclasses.dataclass(frozen=True)
class Site:
  """The static description of one harvested sow site."""

  name: primitive.Name
  tag: tp.Hashable
  tree: tp.Any  # jax.tree_util.PyTreeDef

  @property
  def num_leaves(self) -> int:
    return self.tree.num_leaves


# One executed sow: its site and its flat leaf values.
Record = tuple[Site, list[tp.Any]]
# A rule for a higher-order primitive: (equation, input values, selection)
# -> (output values, records in call order).
Rule = tp.Callable[
    [core.JaxprEqn, list[tp.Any], Selection], tuple[list[tp.Any], list[Record]]
]

higher_order_rules: dict[core.Primitive, Rule] = {}


def site_of(eqn: core.JaxprEqn) -> Site:
  params = eqn.params
  return Site(name=params['name'], tag=params['tag'], tree=params['tree'])


def _harvest_sow(eqn, invals, selection):
  del selection
  return invals, [(site_of(eqn), invals)]


def _refuse(eqn, invals, selection):
  del invals
  names = sorted(map(repr, selected_names(eqn, selection)))
  raise NotImplementedError(
      f'capture: the higher-order primitive {eqn.primitive.name!r} (at'
      f' {source_info_util.summarize(eqn.source_info)}) contains sows'
      f' {", ".join(names)} and has no capture rule; move the sows out of it'
      ' or exclude them with capture(..., tag=..., names=...).'
  )


@jax_util.weakref_lru_cache(trace_context_in_key=False)
def plan(jaxpr: core.Jaxpr, selection: Selection) -> tuple[Rule | None, ...]:
  """For each equation: the rule to apply, or None to bind it unchanged."""
  return tuple(_plan_eqn(eqn, selection) for eqn in jaxpr.eqns)


def _plan_eqn(eqn: core.JaxprEqn, selection: Selection) -> Rule | None:
  if eqn.primitive is primitive.sow_p:
    return _harvest_sow if selection.matches(eqn.params) else None
  if any(contains(sub, selection) for sub in core.jaxprs_in_params(eqn.params)):
    return higher_order_rules.get(eqn.primitive, _refuse)
  return None


def contains(jaxpr: core.Jaxpr, selection: Selection) -> bool:
  """Whether ``jaxpr`` holds a selected sow, at any depth."""
  return any(rule is not None for rule in plan(jaxpr, selection))


def selected_names(eqn: core.JaxprEqn, selection: Selection) -> list[tp.Any]:
  """The names of the selected sows inside ``eqn``, in program order."""
  names = []
  for sub in core.jaxprs_in_params(eqn.params):
    for inner in sub.eqns:
      if inner.primitive is primitive.sow_p:
        if selection.matches(inner.params):
          names.append(inner.params['name'])
      else:
        names.extend(selected_names(inner, selection))
  return list(dict.fromkeys(names))


def bind(eqn: core.JaxprEqn, invals: list[tp.Any]) -> list[tp.Any]:
  """Binds ``eqn``'s primitive as it is, returning a list of outputs."""
  params = eqn.primitive.get_bind_params(eqn.params)
  outs = eqn.primitive.bind(*invals, **params)
  return outs if eqn.primitive.multiple_results else [outs]


def evaluate(
    jaxpr: core.Jaxpr,
    consts: tp.Sequence[tp.Any],
    args: tp.Sequence[tp.Any],
    selection: Selection,
) -> tuple[list[tp.Any], list[Record]]:
  """Evaluates ``jaxpr``, returning its outputs and the harvested records."""
  env: dict[core.Var, tp.Any] = {}

  def read(atom):
    return atom.val if isinstance(atom, core.Literal) else env[atom]

  env.update(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))
  records: list[Record] = []
  for eqn, rule in zip(jaxpr.eqns, plan(jaxpr, selection)):
    invals = [read(v) for v in eqn.invars]
    name_stack = (
        source_info_util.current_name_stack() + eqn.source_info.name_stack
    )
    with (
        source_info_util.user_context(
            eqn.source_info.traceback, name_stack=name_stack
        ),
        eqn.ctx.manager,
    ):
      if rule is None:
        outs = bind(eqn, invals)
      else:
        outs, new_records = rule(eqn, invals, selection)
        records.extend(new_records)
    env.update(zip(eqn.outvars, outs))
  return [read(v) for v in jaxpr.outvars], records


@dataclasses.dataclass(frozen=True)
class Transformed:
  """A sub-jaxpr rewritten to also return its sown leaves.

  Attributes:
    jaxpr: returns the original outputs followed by the flat leaves of every
      site in ``sites``, in order.
    sites: the harvested sites, in call order.
  """

  jaxpr: core.ClosedJaxpr
  sites: tuple[Site, ...]

  @property
  def num_sown_leaves(self) -> int:
    return sum(site.num_leaves for site in self.sites)


@jax_util.weakref_lru_cache
def transform(closed: core.ClosedJaxpr, selection: Selection) -> Transformed:
  """Traces ``evaluate`` over ``closed`` (cached; keyed by trace context)."""
  sites: list[Site] = []

  def body(*args):
    outs, records = evaluate(closed.jaxpr, closed.consts, args, selection)
    sites.extend(site for site, _ in records)
    return [*outs, *(leaf for _, leaves in records for leaf in leaves)]

  debug = api_util.debug_info('capture', body, closed.in_avals, {})
  jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(
      lu.wrap_init(body, debug_info=debug), closed.in_avals
  )
  return Transformed(core.ClosedJaxpr(jaxpr, consts), tuple(sites))


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
