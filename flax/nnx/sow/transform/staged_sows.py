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
"""Sows a capture collects as they are staged, without a marker equation.

``capture`` traces ``f`` into a jaxpr of its own. A sow it selects that is
staged straight into that trace (the common case: a sow in ``f``'s own code,
not inside a ``scan`` body or a ``jit``) needs no equation: the staging rule
of ``sow_p`` hands its value back unchanged and keeps it aside, and the
traced function returns it as an extra output. The jaxpr is then the program
``f`` would give if it returned its intermediates by hand, with nothing for
the interpreter to rewrite: many sows cost no more to stage than ``f``.

The other sows stay equations for the interpreter: those inside sub-jaxprs,
those the capture does not select, every ``'clobber'`` sow (the interpreter
drops the values a clobber supersedes as it goes, where an output would keep
them all alive), and every sow of a capture that plants or selects names
with a predicate. Records must come out in program order, so
where the jaxpr keeps sow equations too (the sow effect marks them, and the
equations holding them), :func:`materialize` puts the collected sows back as
equations, each before the first marked equation staged after it, and the
interpreter handles them all as usual.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import typing as tp

import jax.extend.core as core

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import deferred
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import thread_stack
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.sites import Site
from flax.nnx.sow.transform.sites import site_at


@dataclasses.dataclass(frozen=True)
class Taken:
  """A sow taken at staging time; static, no tracers.

  Attributes:
    params: the sow's parameters.
    site: its site, as ``sites.site_of`` would describe its equation.
    before: how many equations with the sow effect were staged before it.
    source_info: where it was staged, for an equation put back in its place.
  """

  params: dict[str, tp.Any]
  site: Site
  before: int
  source_info: tp.Any


@dataclasses.dataclass(frozen=True)
class Harvested:
  """What :func:`collecting` took: the sows, in program order.

  Their leaves are the last ``num_leaves`` outputs of the traced jaxpr.
  ``marked`` counts the jaxpr's equations with the sow effect; if there are
  any, :func:`materialize` puts these sows back among them to keep the
  order.
  """

  sows: tuple[Taken, ...]
  marked: int

  @property
  def num_leaves(self) -> int:
    return sum(sow.site.num_leaves for sow in self.sows)


class _Harvest:
  """The sows being collected from one trace; holds tracers while it runs."""

  def __init__(self, request: Request, trace: tp.Any):
    self.request = request
    self.trace = trace
    self.taken: list[tuple[dict[str, tp.Any], list[tp.Any], int, tp.Any]] = []

  def take(self, params, tracers, source_info) -> None:
    position = len(_jax.staged_eqns(self.trace))
    self.taken.append((params, tracers, position, source_info))

  def leaves(self) -> list[tp.Any]:
    return [leaf for _, tracers, _, _ in self.taken for leaf in tracers]

  def finish(self) -> Harvested:
    """The static outcome; reads the trace's equations, so call it inside."""
    marked = [
        i
        for i, entry in enumerate(_jax.staged_eqns(self.trace))
        if (eqn := _jax.kept_eqn(entry)) is not None
        and primitive.sow_effect in eqn.effects
    ]
    sows = tuple(
        Taken(
            params=params,
            site=site_at(params, tracers, source_info),
            before=bisect.bisect_left(marked, position),
            source_info=source_info,
        )
        for params, tracers, position, source_info in self.taken
    )
    return Harvested(sows, marked=len(marked))


# The harvests of the traces being staged on this thread, innermost last.
_LOCAL: thread_stack.ThreadStack[_Harvest] = thread_stack.ThreadStack()


def eligible(request: Request) -> bool:
  """Whether sows of ``request`` may be collected at staging time: it
  collects, plants nothing and selects names without a predicate (which is
  resolved on the names of the whole program)."""
  return (
      request.collect
      and request.planted is None
      and not request.fn_names
      and not getattr(request.selection, 'by_predicate', False)
  )


@contextlib.contextmanager
def collecting(
    request: Request,
) -> tp.Iterator[_Harvest]:
  """Collects the sows ``request`` handles that are staged into the current
  trace while the block runs. Enter it inside the traced function."""
  trace = _jax.trace_ctx.trace
  if type(trace) is not _jax.DynamicJaxprTrace:
    raise AssertionError(f'collecting: not staging, but under {trace}')
  harvest = _Harvest(request, trace)
  with _LOCAL.pushed(harvest):
    yield harvest


def _stage_sow(trace, source_info, *tracers, **params):
  """The staging rule of ``sow_p``: a sow staged into a collecting trace
  is taken; any other is an equation, as without the rule."""
  stack = _LOCAL.stack
  if stack:
    harvest = stack[-1]
    if (
        harvest.trace is trace
        and params['mode'] == 'append'
        # A deferred sow is named once the trace is done (`deferred`).
        and not deferred.is_deferred(params)
        and harvest.request.handles(params)
    ):
      harvest.take(params, list(tracers), source_info)
      return list(tracers)
  return trace.default_process_primitive(
      primitive.sow_p, tracers, params, source_info
  )


_jax.custom_staging_rules[primitive.sow_p] = _stage_sow


def materialize(
    closed: core.ClosedJaxpr, harvested: Harvested
) -> core.ClosedJaxpr:
  """``closed`` with the collected sows back as equations in program order,
  without their extra outputs.

  A collected sow goes before the first equation with the sow effect that
  was staged after it. Its value was staged before it, so it is defined
  there; equations without the effect may sit on either side of it, and
  nothing reads its result (``f`` used the value itself).
  """
  jaxpr = closed.jaxpr
  num_outs = len(jaxpr.outvars) - harvested.num_leaves
  values = iter(jaxpr.outvars[num_outs:])
  pending = []
  for sow in harvested.sows:
    invars = [next(values) for _ in range(sow.site.num_leaves)]
    outvars = [core.Var(atom.aval) for atom in invars]
    pending.append((sow.before, core.new_jaxpr_eqn(
        invars, outvars, primitive.sow_p, sow.params,
        {primitive.sow_effect}, sow.source_info,
    )))
  pending.reverse()  # popped from the end, in order
  eqns = []
  marked = 0
  for eqn in jaxpr.eqns:
    if primitive.sow_effect in eqn.effects:
      while pending and pending[-1][0] <= marked:
        eqns.append(pending.pop()[1])
      marked += 1
    eqns.append(eqn)
  if marked != harvested.marked:
    raise AssertionError(
        f'capture: the traced jaxpr has {marked} equations with the sow'
        f' effect where {harvested.marked} were staged; JAX reordered or'
        ' dropped equations with effects, which this version does not'
        ' expect.'
    )
  eqns.extend(eqn for _, eqn in reversed(pending))
  debug = jaxpr.debug_info
  if debug.result_paths is not None and not callable(debug.result_paths):
    debug = debug._replace(result_paths=debug.result_paths[:num_outs])
  rebuilt = core.Jaxpr(
      constvars=jaxpr.constvars,
      invars=jaxpr.invars,
      outvars=jaxpr.outvars[:num_outs],
      eqns=eqns,
      effects=jaxpr.effects | {primitive.sow_effect},
      debug_info=debug,
  )
  return core.ClosedJaxpr(rebuilt, closed.consts)
