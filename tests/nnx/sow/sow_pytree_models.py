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
"""Modules holding immutable pytrees of arrays, for the write-back tests.

A module may hold a tuple, a NamedTuple or a frozen dataclass of arrays as
data (``nnx.data``), as CAX's Lenia holds its bounds; a call that updates it
replaces the whole pytree. Used by ``capture_graph_nodes_test.py`` (functional
``capture``) and ``compat_transforms_test.py`` (``nnx.capture``).
"""

import dataclasses
import typing

import jax
import jax.numpy as jnp

from flax import nnx
from flax.nnx.sow import sow


class Pair(typing.NamedTuple):
  lo: jax.Array
  hi: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Bounds:
  lo: jax.Array
  hi: jax.Array


# Immutable pytrees of arrays, from (lo, hi).
PYTREES = {
    'namedtuple': Pair,
    'tuple': lambda lo, hi: (lo, hi),
    'frozen_dataclass': Bounds,
}

TRANSFORMS = {
    'jit': nnx.jit,
    'remat': nnx.remat,
}


def lo_hi(bounds):
  if isinstance(bounds, Bounds):
    return bounds.lo, bounds.hi
  return bounds


def clip(x, lo, hi):
  # Bounds of one example, for a batch: broadcast explicitly.
  lo, hi = jnp.broadcast_to(lo, x.shape), jnp.broadcast_to(hi, x.shape)
  return jnp.clip(x, lo, hi)


class Clipped(nnx.Module):
  """Holds an immutable pytree of arrays (``nnx.data``) that it updates.

  Sows its clipped features as ``'h'`` with the functional ``sow``; a
  subclass may record them otherwise (``record``).
  """

  def __init__(self, kind, rngs, *, transform=None, update=True):
    self.kind = kind
    self.transform = transform  # run `forward` under this NNX transform
    self.update = update
    self.linear = nnx.Linear(3, 3, rngs=rngs)
    self.bounds = nnx.data(PYTREES[kind](jnp.full(3, -0.5), jnp.full(3, 0.5)))

  def record(self, h):
    return sow(h, name='h')

  def forward(self, x):
    lo, hi = lo_hi(self.bounds)
    h = self.record(clip(self.linear(x), lo, hi))
    if self.update:  # widen the bounds, as a running statistic would
      self.bounds = nnx.data(PYTREES[self.kind](lo - 0.25, hi + 0.25))
    return h

  def __call__(self, x):
    if self.transform is None:
      return self.forward(x)
    return TRANSFORMS[self.transform](type(self).forward)(self, x)
