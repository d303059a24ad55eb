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
"""Reading an activations store back: arrays, statistics, shuffled batches.

``Dataset(path)`` (what ``export`` returns) reads the complete batches of a
store only (see :mod:`~flax.nnx.sow.activations.store`), so a store being
written, or left by a killed run, reads as the batches it has completed.
"""

from __future__ import annotations

import dataclasses
import typing as tp

import numpy as np

from flax.nnx.sow.activations import store as store_lib
from flax.nnx.sow.transform import names as names_lib
from flax.nnx.sow.transform import primitive


@dataclasses.dataclass(frozen=True)
class Statistics:
  """Per-feature statistics of a site over every complete batch.

  Attributes:
    count: the rows (examples times positions) they are over.
    mean: the mean of each feature, in float64.
    var: the (population) variance of each feature, or ``None`` if the
      export did not ask for ``'var'``.
  """

  count: int
  mean: np.ndarray
  var: np.ndarray | None


class Dataset:
  """The complete batches of an activations store.

  Example::

    >>> import tempfile
    >>> import jax.numpy as jnp
    >>> from flax.nnx.sow import activations, sow
    >>> f = lambda x: sow(x * 2, name='h')
    >>> path = tempfile.mkdtemp()
    >>> _ = activations.export(f, [jnp.ones((2, 3, 4))] * 4, path,
    ...                        progress=False)
    >>> data = activations.Dataset(path)
    >>> data.examples, data.complete_batches
    (8, 4)
    >>> batch = next(data.batches(5, tokens=True, seed=0))
    >>> batch['h'].shape
    (5, 4)

  Args:
    path: the store's directory.
  """

  def __init__(self, path: str):
    self._store = store_lib.Store.open(path)
    self.path = path
    self.layout = self._store.layout
    self.complete_batches = self._store.complete_batches()

  def __repr__(self) -> str:
    return (f'Dataset({self.path!r}: {len(self.sites)} sites,'
            f' {self.examples} examples in {self.complete_batches} batches)')

  @property
  def sites(self) -> tuple[str, ...]:
    return tuple(self.layout.sites)

  @property
  def examples(self) -> int:
    return self.complete_batches * self.layout.examples_per_batch

  def name_of(self, site: str) -> primitive.Name:
    """The sow name stored site ``site`` holds a value of."""
    name = self.layout.sites[site]['name']
    return tuple(name) if isinstance(name, list) else name

  def site_of(self, site: tp.Any) -> str:
    """The one stored site ``site`` reads.

    ``site`` is a stored site itself (``'h[1]'``, ``'kv[0].k'``), or a sow
    name in any of the spellings ``capture(names=)`` takes (``('layers', 1,
    'h')``, ``'layers.1.h'``) that was exported as one site (sown once, as
    one array); else an error naming the sites it has. A pattern with a
    wildcard selects a set of sites: :meth:`sites_of` takes it.
    """
    if isinstance(site, str) and site in self.layout.sites:
      return site
    key = self._key(site, where='Dataset')
    if isinstance(key, names_lib.Pattern) and key.wild:
      raise KeyError(
          f'Dataset: {site!r} is a pattern, which selects a set of sites'
          f' ({list(self._matching(key))}), where one site is read; read'
          ' one of them, or all with sites_of or batches(sites=...).')
    stored = self._matching(key)
    if len(stored) == 1:
      return stored[0]
    if stored:
      raise KeyError(
          f'Dataset: the name {site!r} was exported as {len(stored)} sites'
          f' (one per entry and leaf): {stored}; read one of them.')
    raise self._missing(site, key)

  def sites_of(self, names: tp.Any) -> tuple[str, ...]:
    """The stored sites ``names`` selects, in the store's order.

    ``names`` is what ``capture(names=)`` takes (a name or pattern in any
    spelling, a collection of them, a predicate on names), and may hold
    stored sites too (``'h[1]'``); each name selects all of its sites. A
    name or pattern that selects none is an error naming the closest.
    """
    if callable(names) and not isinstance(names, names_lib.Pattern):
      chosen = {s for s in self.layout.sites if names(self.name_of(s))}
    else:
      if isinstance(names, (str, names_lib.Pattern)):
        items = [names]
      elif isinstance(names, (tuple, list, set, frozenset)):
        items = list(names)
      else:
        raise TypeError(
            'Dataset: sites are selected by a name, a pattern, a stored'
            ' site, a collection of them or a predicate on names, got'
            f' {names!r} of type {type(names).__name__}.')
      chosen = set()
      for item in items:
        if isinstance(item, str) and item in self.layout.sites:
          chosen.add(item)
          continue
        try:
          key = self._key(item, where='Dataset')
          found = self._matching(key)
          if not found:
            raise self._missing(item, key)
        except (TypeError, KeyError):
          if isinstance(names, tuple) and primitive.is_name(names):
            raise TypeError(
                f'Dataset: {names!r} is a tuple, which is read as a'
                ' collection of names (as capture(names=) reads it); to'
                f' select the tuple name, put it in a list: [{names!r}].'
            ) from None
          raise
        chosen.update(found)
    return tuple(s for s in self.layout.sites if s in chosen)

  def _key(self, value: tp.Any, *, where: str) -> names_lib.Key:
    if not isinstance(value, (str, tuple, names_lib.Pattern)):
      raise TypeError(
          f'{where}: a site is a stored site or a sow name (str or tuple),'
          f' got {value!r}.')
    return names_lib.key(value, where=where)

  def _matching(self, key: names_lib.Key) -> list[str]:
    names = list(dict.fromkeys(map(self.name_of, self.layout.sites)))
    chosen = set(names_lib.resolve(key, names, where='Dataset'))
    return [s for s in self.layout.sites if self.name_of(s) in chosen]

  def _missing(self, site: tp.Any, key: names_lib.Key) -> KeyError:
    names = list(dict.fromkeys(map(self.name_of, self.layout.sites)))
    close = names_lib.closest(key, names)
    hint = (f' The closest names: {", ".join(map(names_lib.spell, close))}.'
            if close else '')
    return KeyError(
        f'Dataset: no site {site!r} in {self.path!r}; its sites are'
        f' {list(self.sites)}.{hint}')

  def spec(self, site: tp.Any, output: str = 'values'
           ) -> store_lib.ArraySpec:
    """The array of ``output`` of ``site`` (see :meth:`site_of`); an error
    naming what exists."""
    site = self.site_of(site)
    for spec in self.layout.arrays:
      if spec.site == site and spec.output == output:
        return spec
    outputs = [a.output for a in self.layout.arrays if a.site == site]
    raise KeyError(
        f'Dataset: site {site!r} has no {output!r}; it has {outputs}.')

  def array(self, site: tp.Any, output: str = 'values') -> tp.Any:
    """A tensorstore view of the complete rows of ``site``'s ``output``."""
    spec = self.spec(site, output)
    rows = self._store.rows(spec, self.complete_batches)
    return self._store.arrays[spec.path][:rows]

  def read(self, site: tp.Any, output: str = 'values',
           rows: slice | tp.Sequence[int] = slice(None)) -> np.ndarray:
    """The complete rows ``rows`` of ``site``'s ``output``, in memory."""
    view = self.array(site, output)
    index = rows if isinstance(rows, slice) else np.asarray(rows)
    return view[index].read().result()

  def statistics(self, site: tp.Any) -> Statistics:
    """The per-feature statistics of ``site`` over the complete batches.

    Each batch's mean and sum of squared deviations are combined exactly
    (Chan, Golub and LeVeque's pairwise formula), in float64.
    """
    site = self.site_of(site)
    means = self.read(site, 'mean').astype(np.float64)
    per_batch = self._rows_per_statistic(site)
    count = per_batch * len(means)
    mean = means.mean(axis=0) if len(means) else means.sum(axis=0)
    var = None
    if any(a.site == site and a.output == 'm2' for a in self.layout.arrays):
      m2 = self.read(site, 'm2').astype(np.float64)
      between = per_batch * np.sum(np.square(means - mean), axis=0)
      var = (m2.sum(axis=0) + between) / max(count, 1)
    return Statistics(count=count, mean=mean, var=var)

  def _rows_per_statistic(self, site: str) -> int:
    shape = self.layout.sites[self.site_of(site)].get('reduced_shape')
    if shape is None:
      raise KeyError(f'Dataset: site {site!r} has no statistics.')
    return int(np.prod(shape[:-1], dtype=np.int64))

  def batches(
      self,
      batch_size: int,
      *,
      sites: tp.Any = None,
      output: str = 'values',
      tokens: bool = False,
      shuffle: bool = True,
      seed: int = 0,
      epochs: int | None = 1,
      window: int = 16,
  ) -> tp.Iterator[dict[str, np.ndarray]]:
    """Yields ``{site: rows}`` batches of ``batch_size`` rows, for training.

    Rows are read ``window`` exported batches at a time (whole chunks, in a
    random order of batches when ``shuffle``), shuffled within that window
    and cut into batches; rows left over at a window's end start the next,
    and only those at the end of an epoch are dropped. With ``tokens``,
    every axis but the last is flattened, so a row is one position of one
    example (what a sparse autoencoder trains on).

    Args:
      batch_size: rows per batch.
      sites: the sites to read, together (rows aligned), as
        :meth:`sites_of` takes them (names, patterns, stored sites);
        ``None``: all. The batches are keyed by stored site.
      output: which output of each site.
      tokens: flatten positions into rows.
      shuffle: shuffle (seeded by ``seed`` and the epoch).
      seed: the shuffle's seed.
      epochs: passes over the data; ``None`` repeats forever.
      window: exported batches read and shuffled together (memory:
        ``window`` batches of the sites read).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or (
        batch_size < 1):
      raise ValueError(f'Dataset.batches: batch_size must be an int >= 1,'
                       f' got {batch_size!r}.')
    if window < 1:
      raise ValueError(f'Dataset.batches: window must be >= 1, got {window}.')
    sites = list(self.sites if sites is None else self.sites_of(sites))
    specs = [self.spec(site, output) for site in sites]
    rows_per_batch = {s.site: self._flat_rows(s, tokens) for s in specs}
    if len(set(rows_per_batch.values())) > 1:
      raise ValueError(
          f'Dataset.batches: the sites read together must have as many rows'
          f' per batch; they have {rows_per_batch} (read them apart).'
      )
    if self.complete_batches == 0:
      raise ValueError(f'Dataset.batches: {self.path!r} has no complete'
                       ' batch yet.')
    per_batch = next(iter(rows_per_batch.values()))
    if per_batch * self.complete_batches < batch_size:
      raise ValueError(
          f'Dataset.batches: batch_size {batch_size} is more than the'
          f' {per_batch * self.complete_batches} rows of {self.path!r}.'
      )
    epoch = 0
    while epochs is None or epoch < epochs:
      rng = np.random.default_rng([seed, epoch])
      order = (rng.permutation(self.complete_batches) if shuffle
               else np.arange(self.complete_batches))
      carry: dict[str, np.ndarray] | None = None
      for start in range(0, len(order), window):
        chunk = self._read_batches(specs, order[start:start + window], tokens)
        if carry is not None:
          chunk = {k: np.concatenate([carry[k], v]) for k, v in chunk.items()}
        n = len(next(iter(chunk.values())))
        perm = rng.permutation(n) if shuffle else np.arange(n)
        full = n - n % batch_size
        for i in range(0, full, batch_size):
          yield {k: v[perm[i:i + batch_size]] for k, v in chunk.items()}
        carry = {k: v[perm[full:]] for k, v in chunk.items()}
      epoch += 1

  def _flat_rows(self, spec: store_lib.ArraySpec, tokens: bool) -> int:
    rows = self._store.rows(spec, 1)
    if tokens:
      rows *= int(np.prod(spec.shape[:-1], dtype=np.int64))
    return rows

  def _read_batches(self, specs, batches, tokens) -> dict[str, np.ndarray]:
    futures = {}
    for spec in specs:
      per = self._store.rows(spec, 1)
      index = np.concatenate([np.arange(b * per, (b + 1) * per)
                              for b in batches])
      futures[spec.site] = self._store.arrays[spec.path][index].read()
    out = {}
    for spec in specs:
      rows = futures[spec.site].result()
      out[spec.site] = rows.reshape(-1, rows.shape[-1]) if tokens else rows
    return out
