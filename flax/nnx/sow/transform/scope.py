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
"""The state of one interpretation of a jaxpr: what it records and plants.

A ``Scope`` is created per ``evaluate`` call (and per sub-jaxpr a rule
transforms); it keeps the records of the sites it meets in program order,
and hands out the values its ``Planter`` plants.
"""

from __future__ import annotations

import contextlib
import typing as tp

import jax
import jax.core
import jax.extend.core as core

from flax.nnx.sow.transform import planting
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform.sites import Record
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.sites import Site
from flax.nnx.sow.transform.sites import vmaps_of


class Planter(tp.Protocol):

  def take(
      self, site: Site, leaves: tp.Sequence[tp.Any] | None
  ) -> list[tp.Any]:
    """The planted leaves for this execution of ``site``, which sows
    ``leaves`` (``None`` from a rule: a site that takes a tuple entry)."""


class FnPlanter(Planter, tp.Protocol):
  """A planter of ``Request.fn_names``: it counts their executions."""

  def counter(self, name: primitive.Name) -> planting.Counter:
    """The occurrence counter of a name planted by a function."""


class Scope:
  """The mutable state of one ``evaluate`` call."""

  def __init__(
      self,
      request: Request,
      planter: Planter | None = None,
      fns: planting.Functions | None = None,
  ):
    self.request = request
    self.planter = planter
    # The functions of `request.fn_names` (plant(f, {name: fn})).
    self.fns = fns
    # Superseded records become None (see `record`); `records` skips them.
    self._records: list[Record | None] = []
    # Per name: where its first live record is, and how many it has (ints,
    # not a list per name: a program may sow thousands of names).
    self._first: dict[primitive.Name, int] = {}
    self._count: dict[primitive.Name, int] = {}
    # vmaps on the call equations whose bodies are being evaluated in place
    # (see `inlined`): for the sites found there, they are inner vmaps.
    self.inline_vmaps = 0
    # The (name, tag) of the sows an eager interpretation met and did not
    # handle, and the parameters of the higher-order primitives it met, for
    # a message naming what a call sows (a staged one reads its jaxpr).
    self.passed: set[tuple[primitive.Name, tp.Hashable]] = set()
    self.passed_params: list[dict[str, tp.Any]] = []
    # Eagerly: `on_names(scope, keys)` is told the (name, tag) of the sows
    # the call meets, before they are handled, and may widen the request
    # (an eager plant by pattern selects names as they are met).
    self.on_names: tp.Callable[
        [Scope, tp.Sequence[tuple[primitive.Name, tp.Hashable]]], None
    ] | None = None

  def passed_keys(self) -> set[tuple[primitive.Name, tp.Hashable]]:
    """The (name, tag) of every sow an eager interpretation met."""
    keys = set(self.passed)
    for params in self.passed_params:
      for sub in core.jaxprs_in_params(params):
        keys.update(primitive.sow_keys(sub))
    return keys

  def here(self, site: Site, via: core.JaxprEqn | None = None) -> Site:
    """``site`` as seen from this scope's root jaxpr.

    Args:
      site: a site as seen from the jaxpr it was found in: the jaxpr being
        evaluated, or (``via``) a sub-jaxpr of the equation ``via``.
      via: the equation whose sub-jaxpr holds the site, if any.
    """
    vmaps = self.inline_vmaps + (0 if via is None else vmaps_of(via))
    return site.seen_through(vmaps)

  @contextlib.contextmanager
  def inlined(self, eqn: core.JaxprEqn):
    """While the body of the call ``eqn`` is evaluated in this scope."""
    vmaps = vmaps_of(eqn)
    self.inline_vmaps += vmaps
    try:
      yield
    finally:
      self.inline_vmaps -= vmaps

  @property
  def records(self) -> list[Record]:
    """The records of this scope, in program order."""
    return [record for record in self._records if record is not None]

  def record(self, site: Site, leaves: tp.Sequence[tp.Any]):
    if not self.request.collect:
      return
    # A higher-order primitive bound eagerly may return a literal of its
    # body as a raw literal value (checkpoint does): record arrays.
    self.record_arrays(site, list(map(as_array, leaves)))

  def record_arrays(self, site: Site, leaves: list[tp.Any]):
    """``record``, for leaves known to be arrays or tracers, in a list of
    their own (which the record keeps)."""
    if not self.request.collect:
      return
    record = (site, leaves)
    name = site.name
    if site.mode == 'clobber' and name in self._first:
      live = self._live(name)
      if {r[0].tag for _, r in live} == {site.tag}:
        # The values it supersedes are dropped now, so that an eager
        # capture frees them as `f` itself would. It takes the place of the
        # first of them, which fixes the order of the names. Under several
        # tags, which `capture` (by name) and `nnx.capture` (by name and tag)
        # supersede differently, every record stays.
        for i, _ in live[1:]:
          self._records[i] = None
        self._records[live[0][0]] = record
        self._count[name] = 1
        return
    self._first.setdefault(name, len(self._records))
    self._count[name] = self._count.get(name, 0) + 1
    self._records.append(record)

  def _live(self, name: primitive.Name) -> list[tuple[int, Record]]:
    """The live records of ``name`` with their positions, first first."""
    first = self._first[name]
    if self._count[name] == 1:  # a loop of clobbers: found at once
      record = self._records[first]
      assert record is not None
      return [(first, record)]
    live = []
    for i in range(first, len(self._records)):  # no copy of the list
      record = self._records[i]
      if record is not None and record[0].name == name:
        live.append((i, record))
    return live

  def counter(self, name: primitive.Name) -> planting.Counter:
    """The occurrence counter of ``name``, planted by a function."""
    return tp.cast(FnPlanter, self.planter).counter(name)

  def start_indices(
      self, names: tp.Sequence[primitive.Name]
  ) -> list[jax.Array]:
    """Where the occurrences of each of ``names`` (planted by functions)
    start here: the int32 inputs a sub-jaxpr that sows them takes."""
    return [planting.as_index(self.counter(name).index) for name in names]

  def plant(
      self, site: Site, leaves: tp.Sequence[tp.Any] | None = None
  ) -> list[tp.Any] | None:
    if self.planter is None or not self.request.plants(site.params):
      return None
    if site.mode == 'clobber':
      raise ValueError(
          f'plant: {site.name!r} is sown with mode=\'clobber\', so capture'
          ' keeps only its last value and there is no value per sow to plant;'
          ' sow it with mode=\'append\' to plant it.'
      )
    return self.planter.take(site, leaves)

  def last_record(self, name: primitive.Name) -> Record | None:
    for record in reversed(self._records):
      if record is not None and record[0].name == name:
        return record
    return None


def as_array(value: tp.Any) -> tp.Any:
  """A value read from a jaxpr literal as the JAX array ``f`` would give.

  Literals are read as JAX's typed Python/NumPy scalars (``TypedInt``,
  ``TypedNdArray``, a plain ``bool``...), which must not reach the caller:
  ``np.asarray(TypedInt(3))`` is an int64, for instance.
  """
  if isinstance(value, (jax.Array, jax.core.Tracer)):
    return value
  return jax.numpy.asarray(value)
