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
"""``export``: stream the values a function sows to an activations store.

``export(f, batches, path, names=...)`` runs ``capture(f)`` jitted on each
batch and appends every selected site's values to a store on disk (see
:mod:`~flax.nnx.sow.activations.store`), pipelined: the device computes a
batch while the host writes the one before (see
:mod:`~flax.nnx.sow.activations.writer`). Under ``jax.distributed`` every
process runs the same loop on its part of each global batch and writes the
shards it holds into the one store.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import typing as tp

import jax
import numpy as np

from flax import nnx
from flax.nnx.sow import render
from flax.nnx.sow.capture import capture as capture_fn
from flax.nnx.sow.activations import dataset as dataset_lib
from flax.nnx.sow.activations import progress as progress_lib
from flax.nnx.sow.activations import reductions as reductions_lib
from flax.nnx.sow.activations import store as store_lib
from flax.nnx.sow.activations import writer as writer_lib
from flax.nnx.sow.transform import names as names_lib
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform.selection import NameFilter


def export(
    f: tp.Callable[..., tp.Any],
    batches: tp.Iterable[tp.Any],
    path: str | os.PathLike,
    *,
    names: NameFilter = None,
    tag: tp.Hashable = None,
    args: tuple[tp.Any, ...] = (),
    example_axis: reductions_lib.ExampleAxis = 0,
    positions: reductions_lib.Positions = None,
    dtype: tp.Any = None,
    values: bool = True,
    statistics: tp.Iterable[str] = (),
    top_k: int | None = None,
    in_flight: int = 2,
    resume: bool = True,
    durable: bool = False,
    progress: bool | None = None,
) -> dataset_lib.Dataset:
  """Writes what ``f`` sows on each batch to an activations store.

  For each ``batch`` of ``batches`` it runs ``capture(f, names=names,
  tag=tag)(*args, batch)`` under ``nnx.jit`` (compiled once per export, on
  its first batch: every batch must have the same shapes; ``f`` and what it
  closes over are read at this call, as a direct call reads them), reduces
  each selected site on device, and appends the result along the example
  axis. A *site* is one array of what
  ``capture`` returns, named as ``capture`` prints it: the name for a name
  sown once as one array (``'h'``), else the name with the entry and leaf
  (``'h[0]'``, ``'h[1]'`` for a name sown twice, ``'kv[0].k'`` for the leaf
  ``k`` of a pytree); its arrays are ``SITE/values`` and one per statistic.
  ``Dataset.read`` takes the name itself wherever it was exported as one
  site.

  Example::

    >>> import tempfile
    >>> import jax.numpy as jnp
    >>> from flax.nnx.sow import activations, sow
    >>> def f(x):
    ...   return sow(jnp.tanh(x), name='h') * 2
    >>> batches = [jnp.full((4, 3), float(i)) for i in range(5)]
    >>> path = tempfile.mkdtemp()
    >>> data = activations.export(f, batches, path, statistics=['mean'],
    ...                           progress=False)
    >>> data.sites
    ('h',)
    >>> data.read('h').shape
    (20, 3)
    >>> stats = data.statistics('h')  # per feature, over the 20 rows
    >>> stats.count, round(float(stats.mean[0]), 3)
    (20, 0.744)

  Args:
    f: the function, called as ``f(*args, batch)``; a graph node among
      ``args`` (an ``nnx.Module``) is passed as ``nnx.jit`` passes it.
    batches: the inputs, one per step, each a pytree of arrays whose
      leaves' first axis is the example axis (global arrays under
      ``jax.distributed``, as the jitted model takes them).
    path: the store's directory: absent, empty, or a store of the same
      layout, which a run continues (see ``resume``).
    names: the sites to export, as for ``capture``: names, patterns, a
      predicate; ``None`` exports every sow of ``tag``.
    tag: only sows with this tag, as for ``capture``.
    args: the arguments before the batch (the model, say).
    example_axis: the axis of each value that indexes the batch's examples:
      an int, or ``{name or pattern: axis}`` (others 0), e.g. ``1`` for a
      sow inside ``lax.scan``, stacked along axis 0.
    positions: an index (int, slice, or sequence of ints) into axis 1 (the
      one after the example axis), taken on device.
    dtype: a floating dtype floating values are cast to on device.
    values: whether to write the values themselves.
    statistics: any of ``'mean'``, ``'var'`` (per feature, over every
      example and position of the complete batches; read with
      ``Dataset.statistics``) and ``'norm'`` (the L2 norm of each row over
      the last axis, written as rows ``SITE/norm``).
    top_k: keep the ``top_k`` largest features of each row and their
      indices (``SITE/top_k_values``, ``SITE/top_k_indices``).
    in_flight: the most batches computed and not yet written; host memory
      holds at most ``in_flight + 3`` batches of outputs (see
      :mod:`~flax.nnx.sow.activations.writer`).
    resume: continue a store of the same layout after its last complete
      batch, skipping as many batches from ``batches`` (which must then
      yield the same inputs in the same order); ``False``: an existing store
      is an error.
    durable: flush each batch to the disk before committing it, so that the
      complete batches survive a crash of the machine, not only a killed
      process (which they always do); slower, as the disk's flushing no
      longer overlaps the writes.
    progress: draw a progress bar (rich, standard error); ``None`` draws one
      when standard error is a terminal.

  Returns:
    The store, as a :class:`~flax.nnx.sow.activations.Dataset`.

  Raises:
    ValueError: a selection that sows nothing, a site without the batch's
      example axis, a destination holding something else or a store of
      another layout (nothing is written), a batch whose shapes differ from
      the first's (the batches before it are complete).
  """
  path = os.fspath(path)
  reductions = reductions_lib.Reductions.make(
      example_axis=example_axis, positions=positions, dtype=dtype,
      values=values, statistics=statistics, top_k=top_k)
  if isinstance(in_flight, bool) or not isinstance(in_flight, int) or (
      in_flight < 1):
    raise ValueError(f'export: in_flight must be an int >= 1, got {in_flight!r}.')
  if not isinstance(args, tuple):
    raise TypeError(f'export: args must be a tuple, got {type(args).__name__}.')
  process, processes = jax.process_index(), jax.process_count()
  existing = _existing(path, resume)
  done = existing.complete_batches(processes) if existing else 0
  total = (max(len(batches) - done, 0) if isinstance(batches, tp.Sized)
           else None)
  remaining = iter(batches)
  # The complete batches are skipped, not run; the last is kept, to check
  # the layout of a rerun that has nothing left to write.
  skipped = None
  for skipped in itertools.islice(remaining, done):
    pass
  # A step per export, compiled on its first batch: ``f`` and what it closes
  # over (a model's weights, a global) are read at this call, as a direct call
  # reads them, never from an earlier export of the same function.
  step = _step(f, names=names, tag=tag, reductions=reductions)
  first = next(remaining, None)
  if first is None and skipped is None:
    raise ValueError('export: batches is empty; there is nothing to write.')
  outputs = step(args, skipped if first is None else first)
  layout = step.layout(outputs)
  if existing is not None:
    difference = existing.layout.difference(layout)
    if difference is not None:
      raise ValueError(
          f'export: {path!r} holds an activations store of another layout:'
          f' this export writes {difference}. Nothing was written; write to'
          ' another path, or remove it.'
      )
  if first is None:  # every batch is complete already
    return dataset_lib.Dataset(path)
  _sync('flax.nnx.sow.activations.export:open', processes)
  if process == 0:
    if existing is None:
      target = store_lib.Store.create(path, layout)
    else:
      target = existing
      target.reserve()
    target.expect(processes)
  _sync('flax.nnx.sow.activations.export:opened', processes)
  store = store_lib.Store.open(path, durable=durable)
  with progress_lib.Progress(False if process else progress, total,
                             layout.examples_per_batch, done) as bar:
    writer = writer_lib.Writer(store, process, in_flight, bar.written)
    try:
      writer.put(done, outputs.arrays)
      for k, batch in enumerate(remaining, start=done + 1):
        outputs = step(args, batch)
        step.check(outputs, layout, k)
        writer.put(k, outputs.arrays)
    finally:
      writer.close()
  _sync('flax.nnx.sow.activations.export:written', processes)
  if process == 0:
    store.trim(store.complete_batches(processes))
  _sync('flax.nnx.sow.activations.export:trimmed', processes)
  return dataset_lib.Dataset(path)


def _existing(path: str, resume: bool) -> store_lib.Store | None:
  if not os.path.exists(path):
    return None
  if not os.path.isdir(path):
    raise ValueError(f'export: {path!r} exists and is not a directory.')
  if store_lib.is_store(path):
    if not resume:
      raise ValueError(
          f'export: {path!r} already holds an activations store and'
          ' resume=False; write to another path, or remove it.'
      )
    store = store_lib.Store.open(path)
    if store.layout.version != store_lib.VERSION:
      raise ValueError(
          f'export: {path!r} holds an activations store of version'
          f' {store.layout.version}, whose sites are named NAME/ENTRY/LEAF'
          f" ('h/0'); this version reads it but writes version"
          f" {store_lib.VERSION} (sites named as capture prints them: 'h',"
          " 'h[1]'), so it cannot continue it. Nothing was written; write"
          ' to another path.'
      )
    return store
  if os.listdir(path):
    raise ValueError(
        f'export: {path!r} is a directory that is not empty and holds no'
        ' activations store; nothing was written to it.'
    )
  return None


def _sync(name: str, processes: int) -> None:
  if processes > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top

    multihost_utils.sync_global_devices(name)


def site_id(name: primitive.Name, entry: int, leaf: str, alone: bool) -> str:
  """The site of leaf ``leaf`` (dotted, ``''`` for the entry itself) of
  entry ``entry`` of ``name``, written as ``capture`` prints it: the name's
  spelling, then the entry and leaf as ``Collected`` writes them
  (``'h[1]'``, ``'layers.0.kv[0].k'``), or the spelling alone for a name
  sown once as one array (``alone``): ``'layers.1.__call__.output'``."""
  site = names_lib.spell(name)
  if not alone:
    site += render.entry(entry, leaf)
  if '/' in site or site in ('.', '..'):
    raise ValueError(
        f'export: the site {site!r} (of the name {name!r}) is not a'
        ' directory name a store path can hold (it has a "/" or is "." or'
        ' ".."); select other names or sow it under another.'
    )
  return site


def _json_name(name: primitive.Name) -> tp.Any:
  return name if isinstance(name, str) else list(name)


def _examples(batch: tp.Any) -> int:
  sizes: dict[int, str] = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(batch)[0]:
    shape = np.shape(leaf)
    if not shape:
      raise ValueError(
          f'export: the batch leaf {jax.tree_util.keystr(path) or "(root)"}'
          ' is a scalar; every leaf of a batch needs the example axis first.'
      )
    sizes.setdefault(shape[0], jax.tree_util.keystr(path) or '(root)')
  if not sizes:
    raise ValueError('export: a batch holds no arrays.')
  if len(sizes) > 1:
    raise ValueError(
        'export: the leaves of a batch disagree on the number of examples'
        f' (their first axis): {sizes}.'
    )
  return next(iter(sizes))


def _step(f, *, names, tag, reductions) -> _Step:
  """A new step for one export of ``f``, never one kept from an earlier
  export (see ``export``)."""
  names = tuple(names) if isinstance(names, list) else names
  return _Step(f, names=names, tag=tag, reductions=reductions)


@dataclasses.dataclass(frozen=True)
class SiteInfo:
  """What the store's metadata says of a site (see ``store.Layout.sites``).

  Attributes:
    site: its id (``site_id``).
    name: the sown name.
    entry: which entry of the name.
    leaf: the leaf's path in the entry, dotted (``''`` for the entry itself).
    reduced_shape: the shape the reductions reduced (example axis first).
  """

  site: str
  name: primitive.Name
  entry: int
  leaf: str
  reduced_shape: tuple[int, ...]

  def to_json(self) -> dict[str, tp.Any]:
    return {'name': _json_name(self.name), 'entry': self.entry,
            'leaf': self.leaf, 'reduced_shape': list(self.reduced_shape)}


@jax.tree_util.register_pytree_node_class
class Outputs:
  """What a step returns: the arrays of a batch, by store path, and (as
  static data of the tree, so kept with each compiled program, whatever
  traced it) the sites they come from and the batch's examples."""

  def __init__(self, arrays: dict[str, tp.Any], sites: tuple[SiteInfo, ...],
               examples: int):
    self.arrays, self.sites, self.examples = arrays, sites, examples

  def tree_flatten(self):
    return tuple(self.arrays.values()), (tuple(self.arrays), self.sites,
                                         self.examples)

  @classmethod
  def tree_unflatten(cls, aux, children):
    paths, sites, examples = aux
    return cls(dict(zip(paths, children)), sites, examples)


class _Step:
  """``capture(f)`` reduced to the store's outputs, jitted once."""

  def __init__(self, f, *, names, tag, reductions):
    self._f = f
    self._names, self._tag = names, tag
    self._reductions = reductions
    self._jitted = nnx.jit(self._step)

  def _step(self, args, batch) -> Outputs:
    captured = capture_fn(self._f, names=self._names, tag=self._tag)
    _, collected = captured(*args, batch)
    if not collected:
      raise ValueError(
          'export: the function sows nothing the selection exports.')
    examples = _examples(batch)
    arrays, sites = {}, []
    owners: dict[tp.Any, str] = {}
    for name, entries in collected.items():
      for entry, value in enumerate(entries):
        flat = jax.tree_util.tree_flatten_with_path(value)[0]
        for path, x in flat:
          leaf = jax.tree_util.keystr(path, simple=True, separator='.')
          alone = len(entries) == 1 and len(flat) == 1 and not leaf
          site = site_id(name, entry, leaf, alone)
          if site in owners:
            raise ValueError(
                f'export: the names {owners[site]!r} and {name!r} both'
                f' give the site {site!r}; select one of them.')
          owners[site] = name
          reduced, shape = self._reductions.reduce(site, name, x, examples)
          sites.append(SiteInfo(site=site, name=name, entry=entry, leaf=leaf,
                                reduced_shape=shape))
          for out, y in reduced.items():
            arrays[f'{site}/{out}'] = y
    return Outputs(arrays, tuple(sites), examples)

  def __call__(self, args, batch) -> Outputs:
    return self._jitted(args, batch)

  def layout(self, outputs: Outputs) -> store_lib.Layout:
    """The layout of a store of these outputs (the first batch's)."""
    arrays = []
    for info in outputs.sites:
      for out in self._reductions.outputs():
        value = outputs.arrays[f'{info.site}/{out}']
        per = 'batch' if out in reductions_lib.PER_BATCH else 'row'
        chunk = tuple(value.sharding.shard_shape(value.shape))
        if per == 'row':
          shape = tuple(value.shape[1:])
        else:
          shape, chunk = tuple(value.shape), (1, *chunk)
        arrays.append(store_lib.ArraySpec(
            site=info.site, output=out, per=per, shape=shape,
            dtype=_dtype_name(value.dtype), chunk=chunk))
    return store_lib.Layout(
        examples_per_batch=outputs.examples,
        sites={info.site: info.to_json() for info in outputs.sites},
        arrays=tuple(arrays), reductions=self._reductions.describe())

  def check(self, outputs: Outputs, layout: store_lib.Layout,
            batch: int) -> None:
    """Raises if batch ``batch``'s outputs differ from the layout."""
    for spec in layout.arrays:
      value = outputs.arrays.get(spec.path)
      expected = ((layout.examples_per_batch, *spec.shape) if spec.per == 'row'
                  else spec.shape)
      if value is None or tuple(value.shape) != expected or (
          _dtype_name(value.dtype) != spec.dtype):
        got = ('nothing' if value is None else
               f'shape {tuple(value.shape)} {value.dtype}')
        raise ValueError(
            f'export: batch {batch} gives site {spec.site!r} ({spec.output})'
            f' {got}, where the store has shape {expected} {spec.dtype};'
            f' every batch must have the first\'s shapes. Batches 0 to'
            f' {batch - 1} are complete.'
        )


def _dtype_name(dtype: tp.Any) -> str:
  dtype = np.dtype(dtype)
  return dtype.name
