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
"""Staging a call ``f(*args, **kwargs)`` to a jaxpr for the interpreter.

Array leaves of the arguments are traced; every other leaf reaches ``f``
unchanged, as in a direct call. The trace runs while ``harvesting`` is on, so
sow markers carry their effect and survive dead-code elimination.
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax
import numpy as np
from jax._src import core

from flax.nnx.sow import primitive


@dataclasses.dataclass(frozen=True)
class StagedCall:
  """A call staged to a jaxpr, ready to be evaluated on ``inputs``.

  Attributes:
    jaxpr: the closed jaxpr of the call, over ``inputs``.
    inputs: the traced (array) leaves of the arguments, in order.
    out_tree: the pytree structure of ``f``'s result.
  """

  jaxpr: core.ClosedJaxpr
  inputs: list[tp.Any]
  out_tree: tp.Any

  def unflatten_out(self, out_flat: tp.Sequence[tp.Any]) -> tp.Any:
    return jax.tree_util.tree_unflatten(self.out_tree, out_flat)


def _is_traced(leaf: tp.Any) -> bool:
  return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


def stage(f: tp.Callable[..., tp.Any], args, kwargs) -> StagedCall:
  """Traces ``f(*args, **kwargs)`` to a jaxpr over its array leaves."""
  leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
  traced = [_is_traced(leaf) for leaf in leaves]
  inputs = [leaf for leaf, t in zip(leaves, traced) if t]

  def flat_f(*input_values):
    values = iter(input_values)
    full = [next(values) if t else leaf for leaf, t in zip(leaves, traced)]
    call_args, call_kwargs = jax.tree_util.tree_unflatten(treedef, full)
    return f(*call_args, **call_kwargs)

  with primitive.harvesting(True):
    closed, out_shape = jax.make_jaxpr(flat_f, return_shape=True)(*inputs)
  return StagedCall(
      jaxpr=closed,
      inputs=inputs,
      out_tree=jax.tree_util.tree_structure(out_shape),
  )
