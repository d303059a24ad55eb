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
"""What the rules share: a sub-jaxpr transformed for the scope's request,
its planted leaves, and its sown outputs recorded (with the occurrence
counters of planted functions advanced past its runs).

Every rule works on a ``Transformed`` sub-jaxpr (see ``interpreter.py``):
inputs ``[*original, *planted leaves, *start indices, *hoisted]``, outputs
``[*original, *sown leaves, *end indices]``, and re-binds its primitive with
it, adapting the parameters.
"""

from __future__ import annotations

import typing as tp

import jax.extend.core as core
import jax.numpy as jnp

from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.sites import Site
from flax.nnx.sow.transform.sites import split_records


def transformed(
    scope: Scope, closed: core.ClosedJaxpr
) -> interpreter.Transformed:
  """``closed``, a sub-jaxpr of ``scope``, transformed for its request."""
  return interpreter.transform(closed, scope.request, scope.fns)


def take_planted(
    scope: Scope, eqn, sites: tp.Sequence[Site]
) -> list[tp.Any]:
  """The planted leaves for ``sites`` (of ``eqn``'s sub-jaxpr), in order."""
  leaves = []
  for site in sites:
    planted = scope.plant(scope.here(site, eqn))
    assert planted is not None, site
    leaves.extend(planted)
  return leaves


def finish(
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


def split(values: tp.Sequence[tp.Any], *sizes: int) -> list[list[tp.Any]]:
  """Splits ``values`` into consecutive chunks of ``sizes`` and the rest."""
  chunks, start = [], 0
  for size in sizes:
    chunks.append(list(values[start : start + size]))
    start += size
  chunks.append(list(values[start:]))
  return chunks


def describe_sites(sites: tp.Sequence[Site]) -> str:
  if not sites:
    return 'nothing'
  return ', '.join(
      f'{s.name!r} ({s.mode}, {s.tree}, '
      + ', '.join(f'{jnp.dtype(d).name}{list(shape)}' for shape, d in s.avals)
      + ')'
      for s in sites
  )
