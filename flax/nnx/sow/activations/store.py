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
"""The on-disk layout of exported activations: a zarr group of arrays.

A store is a directory holding a zarr (v2) group, written and read with
tensorstore (which Flax already depends on through orbax; zarr-python,
tensorstore, xarray and dask read it without this package):

* ``.zattrs`` holds the :class:`Layout` under ``'flax.nnx.sow.activations'``:
  each site (its sown name, entry and leaf), each array's per-example shape,
  dtype and chunk, the examples per batch and the reductions applied; and,
  once a run has ended, its ``complete_batches`` and ``examples``;
* ``SITE/OUTPUT`` is one array per site and output (``h/values``,
  ``h[1]/norm``, ``kv[0].k/values``...), the example axis first, one chunk
  per device shard of a batch, so each process writes whole chunks of its
  own and never another's;
* ``progress/process-I.json`` says how many batches process ``I`` has
  written and committed (every process of a run has one from its start). A
  batch is *complete* once every process has committed it; the arrays are read up to the complete batches only. A
  process killed at any point leaves every complete batch intact: a chunk
  is replaced atomically (written aside, then renamed) and a progress file
  only moves after its batch's writes have finished. Surviving a crash of
  the machine itself needs each write flushed to the disk before the commit
  (``durable``), which stops the disk's flushing from overlapping the
  writes: off by default, as for ``np.save``.

While a run writes, the arrays' first axis has room for every batch to
come; a run that ends trims it to the complete batches.

Version 2 names a site as ``capture`` prints it (``h``, ``h[1]``,
``kv[0].k``); version 1 named it ``NAME/ENTRY/LEAF`` (``h/0``, ``kv/0/k``).
Both are read (a site's name, entry and leaf are in the layout either way);
only version 2 is written, and a run does not continue a version 1 store.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import typing as tp

import numpy as np

ATTRIBUTE = 'flax.nnx.sow.activations'
VERSION = 2
# The versions this one reads: 1 differs only in how its sites are named.
READS = (1, 2)
PER = ('row', 'batch')
# Room on the first axis while a run writes: zarr needs a finite shape, and
# unwritten chunks take no space.
_CAPACITY_BATCHES = 2**31
_MAX_ELEMENTS = 2**62


def _tensorstore():
  try:
    import tensorstore  # pylint: disable=g-import-not-at-top
  except ImportError as e:  # pragma: no cover - a dependency of orbax
    raise ImportError(
        'flax.nnx.sow.activations needs tensorstore: pip install tensorstore'
    ) from e
  return tensorstore


@dataclasses.dataclass(frozen=True)
class ArraySpec:
  """One array of a store.

  Attributes:
    site: the site it belongs to.
    output: what of the site it holds (``'values'``, ``'norm'``...).
    per: ``'row'`` (appended along the example axis) or ``'batch'`` (one row
      per batch).
    shape: the shape of one row.
    dtype: its NumPy dtype name.
    chunk: the chunk shape, first axis included.
  """

  site: str
  output: str
  per: str
  shape: tuple[int, ...]
  dtype: str
  chunk: tuple[int, ...]

  @property
  def path(self) -> str:
    return f'{self.site}/{self.output}'

  def row_bytes(self) -> int:
    return math.prod(self.shape) * np.dtype(self.dtype).itemsize


@dataclasses.dataclass(frozen=True)
class Layout:
  """What a store holds, independent of how many batches it has.

  Attributes:
    examples_per_batch: the examples (rows) each batch adds.
    sites: per site, ``{'name': ..., 'entry': i, 'leaf': ...}`` (the name as
      JSON: a string, or a list for a tuple name).
    arrays: the arrays, in order.
    reductions: the on-device reductions, as JSON.
    version: the store's version (see the module docstring).
  """

  examples_per_batch: int
  sites: dict[str, dict[str, tp.Any]]
  arrays: tuple[ArraySpec, ...]
  reductions: dict[str, tp.Any]
  version: int = VERSION

  def to_json(self) -> dict[str, tp.Any]:
    return {
        'version': self.version,
        'examples_per_batch': self.examples_per_batch,
        'sites': self.sites,
        'arrays': [dataclasses.asdict(a) for a in self.arrays],
        'reductions': self.reductions,
    }

  @classmethod
  def from_json(cls, data: dict[str, tp.Any]) -> Layout:
    if data.get('version') not in READS:
      raise ValueError(
          f'activations store of version {data.get("version")!r}; this'
          f' version reads versions {", ".join(map(str, READS))}.'
      )
    arrays = tuple(
        ArraySpec(**{**a, 'shape': tuple(a['shape']),
                     'chunk': tuple(a['chunk'])})
        for a in data['arrays']
    )
    return cls(examples_per_batch=data['examples_per_batch'],
               sites=data['sites'], arrays=arrays,
               reductions=data['reductions'], version=data['version'])

  def difference(self, other: Layout) -> str | None:
    """The first way ``other`` differs from this layout, or ``None``."""
    if self.examples_per_batch != other.examples_per_batch:
      return (f'{other.examples_per_batch} examples per batch, where it has'
              f' {self.examples_per_batch}')
    if self.reductions != other.reductions:
      return f'reductions {other.reductions}, where it has {self.reductions}'
    mine = {a.path: a for a in self.arrays}
    theirs = {a.path: a for a in other.arrays}
    if mine.keys() != theirs.keys():
      extra = sorted(theirs.keys() - mine.keys())
      missing = sorted(mine.keys() - theirs.keys())
      return f'arrays {extra} it lacks and not {missing} it has'
    for path, a in mine.items():
      if a != theirs[path]:
        return f'array {path!r} as {theirs[path]}, where it has {a}'
    return None

  def batch_bytes(self) -> int:
    """The bytes one batch adds to the store."""
    return sum(
        a.row_bytes() * (self.examples_per_batch if a.per == 'row' else 1)
        for a in self.arrays
    )


def is_store(path: str) -> bool:
  attrs = os.path.join(path, '.zattrs')
  if not os.path.exists(attrs):
    return False
  with open(attrs) as f:
    return ATTRIBUTE in json.load(f)


def read_layout(path: str) -> Layout:
  if not is_store(path):
    raise FileNotFoundError(
        f'{path!r} is not an activations store (no {ATTRIBUTE!r} in its'
        ' .zattrs).'
    )
  with open(os.path.join(path, '.zattrs')) as f:
    return Layout.from_json(json.load(f)[ATTRIBUTE])


def _write_json(path: str, data: tp.Any, durable: bool = False) -> None:
  """Writes ``data`` so that a reader sees the old file or the new one."""
  tmp = f'{path}.tmp-{os.getpid()}'
  with open(tmp, 'w') as f:
    json.dump(data, f, indent=1)
    if durable:
      f.flush()
      os.fsync(f.fileno())
  os.replace(tmp, path)


def _spec(path: str, a: ArraySpec, rows: int | None,
          durable: bool) -> dict[str, tp.Any]:
  spec: dict[str, tp.Any] = {
      'driver': 'zarr',
      'kvstore': {'driver': 'file', 'path': os.path.join(path, a.path)},
      'context': {'file_io_sync': durable},
  }
  if rows is not None:
    spec['metadata'] = {
        'shape': [rows, *a.shape],
        'chunks': list(a.chunk),
        'dtype': _dtype_spec(a.dtype),
        'compressor': None,
        'order': 'C',
    }
  return spec


def _dtype_spec(dtype: str) -> str:
  # bfloat16 and the other ml_dtypes have no zarr v2 typestr; tensorstore
  # spells them by name.
  np_dtype = np.dtype(dtype)
  return np_dtype.name if np_dtype.kind == 'V' else np_dtype.str


def capacity(layout: Layout) -> int:
  """Batches of room the arrays get while a run writes."""
  worst = max(
      math.prod(a.shape) * (layout.examples_per_batch if a.per == 'row' else 1)
      for a in layout.arrays
  )
  return min(_CAPACITY_BATCHES, _MAX_ELEMENTS // max(worst, 1))


class Store:
  """An open activations store: its layout, arrays and progress.

  Attributes:
    path: its directory.
    layout: what it holds.
  """

  def __init__(self, path: str, layout: Layout, arrays: dict[str, tp.Any],
               durable: bool):
    self.path = path
    self.layout = layout
    self.arrays = arrays
    self.durable = durable

  @classmethod
  def open(cls, path: str, durable: bool = False) -> Store:
    """Opens an existing store for reading and writing; ``durable``: see
    the module docstring."""
    layout = read_layout(path)
    ts = _tensorstore()
    futures = {a.path: ts.open(_spec(path, a, None, durable))
               for a in layout.arrays}
    return cls(path, layout, {k: f.result() for k, f in futures.items()},
               durable)

  @classmethod
  def create(cls, path: str, layout: Layout) -> Store:
    """Creates a store at ``path`` (absent or an empty directory); its
    metadata and progress are written durably."""
    ts = _tensorstore()
    os.makedirs(os.path.join(path, 'progress'), exist_ok=True)
    _write_json(os.path.join(path, '.zgroup'), {'zarr_format': 2})
    rows = capacity(layout)
    futures = {}
    for a in layout.arrays:
      spec = _spec(path, a, rows * (layout.examples_per_batch
                                    if a.per == 'row' else 1), True)
      futures[a.path] = ts.open(spec, create=True, delete_existing=True)
    arrays = {k: f.result() for k, f in futures.items()}
    # Written last: a directory without it is not a store yet.
    _write_json(os.path.join(path, '.zattrs'), {ATTRIBUTE: layout.to_json()},
                durable=True)
    return cls(path, layout, arrays, durable=True)

  def rows(self, spec: ArraySpec, batches: int) -> int:
    return batches * (self.layout.examples_per_batch
                      if spec.per == 'row' else 1)

  def committed(self, process: int) -> int:
    """The batches process ``process`` has committed."""
    try:
      with open(self._progress(process)) as f:
        return int(json.load(f)['batches'])
    except FileNotFoundError:
      return 0

  def complete_batches(self, processes: int = 1) -> int:
    """The batches every process has committed (see the module docstring).

    A store written by more processes than ``processes`` counts theirs too.
    """
    present = set(range(processes))
    folder = os.path.join(self.path, 'progress')
    for entry in os.listdir(folder) if os.path.isdir(folder) else ():
      if entry.startswith('process-') and entry.endswith('.json'):
        present.add(int(entry[len('process-'):-len('.json')]))
    return min(self.committed(p) for p in present)

  def expect(self, processes: int) -> None:
    """Gives each of the ``processes`` of a run a progress file (at 0
    batches where it has none), so that no batch is complete before every
    one of them has committed it, even before some has committed any."""
    for p in range(processes):
      if not os.path.exists(self._progress(p)):
        self.commit(p, 0)

  def commit(self, process: int, batches: int) -> None:
    _write_json(self._progress(process), {'batches': batches}, self.durable)

  def _progress(self, process: int) -> str:
    return os.path.join(self.path, 'progress', f'process-{process}.json')

  def reserve(self) -> None:
    """Gives every array room for the batches of a run to come."""
    rows = capacity(self.layout)
    futures = {
        a.path: self.arrays[a.path].resize(
            exclusive_max=[self.rows(a, rows), *a.shape],
            resize_metadata_only=True, expand_only=True)
        for a in self.layout.arrays
        if self.arrays[a.path].shape[0] < self.rows(a, rows)
    }
    self.arrays.update({k: f.result() for k, f in futures.items()})

  def trim(self, batches: int) -> None:
    """Trims every array's first axis to ``batches`` complete batches."""
    futures = {
        a.path: self.arrays[a.path].resize(
            exclusive_max=[self.rows(a, batches), *a.shape],
            resize_metadata_only=True)
        for a in self.layout.arrays
    }
    self.arrays = {k: f.result() for k, f in futures.items()}
    # For readers other than Dataset: what the arrays now hold.
    _write_json(os.path.join(self.path, '.zattrs'), {
        ATTRIBUTE: self.layout.to_json(), 'complete_batches': batches,
        'examples': batches * self.layout.examples_per_batch,
    }, durable=True)
