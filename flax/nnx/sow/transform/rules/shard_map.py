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
"""The rule for ``shard_map``: sown per-shard values assembled along the
manual mesh axes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.sites import Site
from flax.nnx.sow.transform.sites import split_records


@interpreter.register(_jax.shard_map_p)
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
  manual = _jax.shard_map_manual_axes_key(p)
  axes = tuple(a for a in mesh.axis_names if a in p[manual])
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
      **{manual: p[manual]},
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
