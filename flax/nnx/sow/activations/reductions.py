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
"""What an export keeps of each sown value, computed on device.

An export reduces every selected site before anything leaves the device, so
only what is kept crosses to the host: the example axis is moved first, a
position slice is taken, floating values are cast, and each requested
output is computed (the values themselves, their L2 norms, their top-k
along the last axis, and the batch's mean and sum of squared deviations per
feature, from which :mod:`~flax.nnx.sow.activations.dataset` combines the
statistics of every complete batch).

Outputs are of two kinds: *rows* have the example axis first and are
appended along it; *per-batch* outputs (the statistics) get one row per
batch.
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow.transform import names as names_lib
from flax.nnx.sow.transform import primitive

STATISTICS = ('mean', 'var', 'norm')
# The per-batch outputs of the 'mean' and 'var' statistics: a batch's mean
# and sum of squared deviations per feature, in float32, combined exactly
# (Chan et al.) when read; 'var' needs both.
PER_BATCH = ('mean', 'm2')

Positions = tp.Union[None, int, slice, tp.Sequence[int]]
ExampleAxis = tp.Union[int, tp.Mapping[tp.Any, int]]


@dataclasses.dataclass(frozen=True)
class Reductions:
  """The on-device reductions of an export (see ``export``'s arguments)."""

  example_axis: tuple[tuple[names_lib.Key, int], ...] | int = 0
  positions: Positions = None
  dtype: tp.Any = None
  values: bool = True
  statistics: tuple[str, ...] = ()
  top_k: int | None = None

  @classmethod
  def make(cls, *, example_axis: ExampleAxis, positions: Positions,
           dtype: tp.Any, values: bool, statistics: tp.Iterable[str],
           top_k: int | None) -> Reductions:
    where = 'export'
    axes: tuple[tuple[names_lib.Key, int], ...] | int
    if isinstance(example_axis, tp.Mapping):
      axes = tuple(
          (names_lib.key(k, where=f'{where}(example_axis=)'),
           _axis(v, where)) for k, v in example_axis.items()
      )
    else:
      axes = _axis(example_axis, where)
    if isinstance(statistics, str):
      statistics = (statistics,)
    statistics = tuple(statistics)
    for s in statistics:
      if s not in STATISTICS:
        raise ValueError(
            f'{where}: unknown statistic {s!r}; choose from {STATISTICS}.'
        )
    if top_k is not None and (
        isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1
    ):
      raise ValueError(f'{where}: top_k must be a positive int, got {top_k!r}.')
    if dtype is not None:
      dtype = jnp.dtype(dtype)
      if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(
            f'{where}: dtype casts floating values and must be floating, got'
            f' {dtype}.'
        )
    if positions is not None and not isinstance(positions, (int, slice)):
      positions = tuple(int(p) for p in positions)
    if not values and not statistics and top_k is None:
      raise ValueError(
          f'{where}: values=False with no statistics and no top_k keeps'
          ' nothing of the selected sites.'
      )
    return cls(example_axis=axes, positions=positions, dtype=dtype,
               values=values, statistics=tuple(dict.fromkeys(statistics)),
               top_k=top_k)

  def axis_of(self, name: primitive.Name) -> int:
    """The example axis of the values sown under ``name``."""
    if isinstance(self.example_axis, int):
      return self.example_axis
    for k, axis in self.example_axis:
      if names_lib.matches(k, name):
        return axis
    return 0

  def outputs(self) -> tuple[str, ...]:
    """The outputs kept of every site, rows first."""
    out = ['values'] if self.values else []
    if 'norm' in self.statistics:
      out.append('norm')
    if self.top_k is not None:
      out += ['top_k_values', 'top_k_indices']
    if {'mean', 'var'} & set(self.statistics):
      out += ['mean'] + (['m2'] if 'var' in self.statistics else [])
    return tuple(out)

  def reduce(self, site: str, name: primitive.Name, value: jax.Array,
             examples: int) -> tuple[dict[str, jax.Array], tuple[int, ...]]:
    """The outputs of one site's value (traced, in the export's step), and
    the shape they reduce (example axis first, after ``positions``)."""
    axis = self.axis_of(name)
    if not hasattr(value, 'ndim') or value.ndim == 0:
      raise ValueError(
          f'export: site {site!r} is a scalar; an exported site needs an'
          ' example axis (sow per example, or select other names).'
      )
    if not -value.ndim <= axis < value.ndim:
      raise ValueError(
          f'export: example_axis {axis} of site {site!r} is out of range for'
          f' its shape {tuple(value.shape)}.'
      )
    if value.shape[axis] != examples:
      raise ValueError(
          f'export: site {site!r} has shape {tuple(value.shape)}, whose axis'
          f' {axis} has {value.shape[axis]} entries where the batch has'
          f' {examples} examples; pass example_axis={{{site.split("/")[0]!r}:'
          ' <its example axis>}} (a sow inside lax.scan is stacked along'
          ' axis 0).'
      )
    x = jnp.moveaxis(value, axis, 0)
    if self.positions is not None:
      if x.ndim < 2:
        raise ValueError(
            f'export: positions= slices axis 1 (after the example axis) and'
            f' site {site!r} has shape {tuple(value.shape)}.'
        )
      index = self.positions
      x = x[:, np.asarray(index) if isinstance(index, tuple) else index]
    if self.dtype is not None and jnp.issubdtype(x.dtype, jnp.floating):
      x = x.astype(self.dtype)
    out = {}
    if self.values:
      out['values'] = x
    numeric = jnp.issubdtype(x.dtype, jnp.floating) or jnp.issubdtype(
        x.dtype, jnp.integer)
    needs_features = 'norm' in self.statistics or self.top_k is not None or {
        'mean', 'var'} & set(self.statistics)
    if needs_features and (x.ndim < 2 or not numeric):
      raise ValueError(
          f'export: statistics and top_k reduce the last (feature) axis;'
          f' site {site!r} has shape {tuple(x.shape)} and dtype {x.dtype}.'
      )
    f32 = x.astype(jnp.float32) if needs_features else x
    if 'norm' in self.statistics:
      out['norm'] = jnp.sqrt(jnp.sum(jnp.square(f32), axis=-1))
    if self.top_k is not None:
      if self.top_k > x.shape[-1]:
        raise ValueError(
            f'export: top_k={self.top_k} is more than the {x.shape[-1]}'
            f' features of site {site!r}.'
        )
      top_values, top_indices = jax.lax.top_k(_features_whole(x),
                                              self.top_k)
      out['top_k_values'] = top_values
      out['top_k_indices'] = top_indices.astype(jnp.int32)
    if {'mean', 'var'} & set(self.statistics):
      flat = f32.reshape(-1, f32.shape[-1])
      mean = jnp.mean(flat, axis=0, keepdims=True)
      out['mean'] = mean[0]
      if 'var' in self.statistics:
        out['m2'] = jnp.sum(jnp.square(flat - mean), axis=0)
    return out, tuple(x.shape)

  def describe(self) -> dict[str, tp.Any]:
    """The reductions as JSON, for the store's metadata."""
    positions: tp.Any = self.positions
    if isinstance(positions, slice):
      positions = {'slice': [positions.start, positions.stop, positions.step]}
    elif isinstance(positions, tuple):
      positions = list(positions)
    axes: tp.Any = self.example_axis
    if not isinstance(axes, int):
      axes = [[repr(k), v] for k, v in axes]
    return {
        'example_axis': axes,
        'positions': positions,
        'dtype': None if self.dtype is None else str(self.dtype),
        'outputs': list(self.outputs()),
        'top_k': self.top_k,
    }


def _features_whole(x: jax.Array) -> jax.Array:
  """``x`` with its last axis whole on each device, as ``top_k`` needs it:
  resharded if its type shards it (Explicit mesh axes); under Auto axes XLA
  gathers it itself."""
  spec = tuple(jax.typeof(x).sharding.spec)
  if len(spec) < x.ndim or spec[-1] is None:
    return x
  return jax.sharding.reshard(x, jax.sharding.PartitionSpec(*spec[:-1], None))


def _axis(value: tp.Any, where: str) -> int:
  if isinstance(value, bool) or not isinstance(value, int):
    raise TypeError(f'{where}: example_axis must be an int, got {value!r}.')
  return value
