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
"""Sow sites: what one sow is, as one scope of a program sees it.

A ``Site`` is the static description of one sow: its parameters, the shapes
of its leaves, and the vmaps around it; a ``Record`` pairs a site with its
values. ``where`` names the user's line that sowed it. What an
interpretation does with the sites it selects is its ``Request``
(``request.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing as tp

import jax
import jax.extend.core as core
import jax.extend.source_info_util as source_info_util
import numpy as np

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import primitive


Aval = tuple[tuple[int, ...], np.dtype]


@dataclasses.dataclass(frozen=True)
class Site:
  """The static description of one sow site as seen from one scope.

  Attributes:
    name, tag, mode, tree: the sow's parameters.
    avals: (shape, dtype) of each leaf, as seen from this scope.
    vmapped: how many leading axes of the sown leaves come from ``vmap``s
      (outermost first), as counted by the sow's batching rule.
    inner_vmaps: how many of those vmaps were applied inside this scope's
      jaxpr (on the sow itself or on an equation between it and this scope);
      the others were applied outside, to an equation holding this jaxpr.
    sizes: for a sow of a value with no leaves, the leading axes its
      leaves would have (the sizes of the vmaps its batching rule counted,
      outermost first, and of the loops and maps around it since), which
      no leaf carries. Empty otherwise.
    meta: the static data of the marker (``primitive.sow_with_meta``), or
      ``None``: what a library built on ``sow`` needs of the site.
    ambiguous: the transform stack the sow was staged under, when it reads
      as more than one count of ``inner_vmaps`` that agrees with
      ``vmapped``, or as a count above it (see ``_inner_vmaps``): a loop
      around it then refuses to place its axis rather than guess. ``None``
      otherwise.
  """

  name: primitive.Name
  tag: tp.Hashable
  mode: str
  tree: tp.Any  # jax.tree_util.PyTreeDef
  avals: tuple[Aval, ...]
  vmapped: int = 0
  inner_vmaps: int = 0
  sizes: tuple[int, ...] = ()
  meta: tp.Hashable = None
  ambiguous: str | None = None

  @property
  def num_leaves(self) -> int:
    return self.tree.num_leaves

  @property
  def params(self) -> dict[str, tp.Any]:
    """The parameters a site filter reads (``SiteFilter.matches``)."""
    return {'sow_name': self.name, 'tag': self.tag, 'meta': self.meta}

  @property
  def outer_vmaps(self) -> int:
    """The leading axes from vmaps applied outside this scope's jaxpr: a loop
    of this scope adds its axis after them."""
    if self.ambiguous is not None and self.inner_vmaps <= self.vmapped:
      raise NotImplementedError(
          f'capture: cannot tell where a loop puts its axis in the values of'
          f' sow {self.name!r}: {self.vmapped} vmap(s) batch it, and the'
          f' transforms it was staged under, {self.ambiguous}, read as more'
          ' than one count of them applied inside the loop. Capture inside'
          ' the loop body (or around the vmaps) instead.'
      )
    outer = self.vmapped - self.inner_vmaps
    if not 0 <= outer <= self.vmapped:
      # JAX's name stacks (what `inner_vmaps` is read from) disagree with the
      # count of the sow's own batching rule: rather than put a loop axis in
      # a guessed place, refuse.
      raise NotImplementedError(
          f'capture: cannot tell where a loop puts its axis in the values of'
          f' sow {self.name!r}: {self.vmapped} vmap(s) batch it, of which'
          f' {self.inner_vmaps} were counted inside the loop from the'
          f' transforms it was staged under, {self.ambiguous}. Please report'
          ' this program; capturing inside the loop body avoids it.'
      )
    return outer

  @property
  def lead(self) -> tuple[int, ...]:
    """The leading axes of the sown leaves from the vmaps applied outside
    this scope's jaxpr (``outer_vmaps``): what a loop's step count has one
    entry for. Read from the first leaf, or from ``sizes`` with no leaf."""
    shape = self.avals[0][0] if self.avals else self.sizes
    return tuple(shape[:self.outer_vmaps])

  def with_leading(self, *dims: int) -> Site:
    """This site seen from outside a map that adds leading axes."""
    avals = tuple(((*dims, *shape), dtype) for shape, dtype in self.avals)
    sizes = (*dims, *self.sizes) if not self.avals else self.sizes
    return dataclasses.replace(self, avals=avals, sizes=sizes)

  def with_loop_axis(self, length: int) -> Site:
    """This site seen from outside a loop that stacks its values: the loop
    axis comes after the axes of the vmaps applied outside the loop."""
    at = self.outer_vmaps
    avals = tuple(
        ((*shape[:at], length, *shape[at:]), dtype)
        for shape, dtype in self.avals
    )
    sizes = self.sizes
    if not self.avals and sizes:
      sizes = (*sizes[:at], length, *sizes[at:])
    return dataclasses.replace(self, avals=avals, sizes=sizes)

  def seen_through(self, vmaps: int) -> Site:
    """This site seen from the jaxpr holding an equation that ``vmaps``
    vmaps were applied to."""
    if not vmaps:
      return self
    return dataclasses.replace(self, inner_vmaps=self.inner_vmaps + vmaps)


def vmaps_of(eqn: core.JaxprEqn) -> int:
  """How many ``vmap``s were applied to ``eqn`` at its own level.

  JAX records each transformation in the name stack of the equations it
  emits, relative to their jaxpr: a scan batched by a vmap outside it reads
  ``vmap()`` while its body does not; a vmap inside the body marks the
  body's equations instead.
  """
  return vmaps_in(eqn.source_info)


def vmaps_in(source_info: tp.Any) -> int:
  """``vmaps_of`` an equation staged with ``source_info``."""
  return _readings(source_info.name_stack.stack)[0]


# Every executed sow of an eager capture asks; a program has few stacks.
@functools.lru_cache(maxsize=256)
def _readings(stack: tuple[tp.Any, ...]) -> tuple[int, frozenset[int]]:
  """How many vmaps ``stack`` holds without the copies JAX makes of it under
  ``transpose`` (the reading counted), and every count it reads as when each
  copy may also be kept (a copy and the user's own repetition of the same
  transforms look alike).

  The backward pass stages a transposed equation under the name stack
  ``context + transpose + recorded``, where ``recorded`` is the stack of the
  linear equation relative to the linearization that emitted it (it starts
  with that linearization's ``jvp`` marker). Two paths of JAX record more
  than that, and would count the vmaps around ``jax.grad`` (and in it)
  twice:

  - the linearization of a ``custom_vjp`` call records its ``custom_lin``
    equation under the whole stack, so what its backward rule stages (a
    sow there) reads ``context + transpose + context + relative``:
    ``vmap(transpose(vmap(jvp())))`` for ``jax.vmap(jax.grad(f))``. (A
    ``perturb``'s sow, bound by the transpose rule of a linear primitive,
    reads the plain ``vmap(transpose(jvp()))``.)
  - partial evaluation of a linear ``checkpoint`` appends the whole stack
    of its equation to the relative one: ``context + transpose + relative +
    context + relative``, ``vmap(transpose(jvp(vmap(jvp()))))``.

  Each copy is removed, so every vmap counts once.
  """

  def readings(i: int, kept: tuple[tp.Any, ...]) -> tp.Iterator[int]:
    # The counts of every reading of stack[i:] after `kept`, the preferred
    # first: a copy removed where one is recognised, the longest first.
    if i == len(stack):
      yield sum(1 for part in kept if _is(part, 'vmap'))
      return
    part = stack[i]
    kept += (part,)
    if _is(part, 'transpose'):
      context, rest = kept[:-1], stack[i + 1:]
      if context and rest[: len(context)] == context:
        # custom_lin: the context, then the relative stack
        yield from readings(i + 1 + len(context), kept)
      for n in range(len(rest) // 2, 0, -1):
        relative = rest[:n]
        copy = context + relative
        if _is(relative[0], 'jvp') and rest[n : n + len(copy)] == copy:
          # checkpoint: the relative stack, then context + relative again
          yield from readings(i + 1 + n + len(copy), kept + relative)
    yield from readings(i + 1, kept)

  counts = list(readings(0, ()))
  return counts[0], frozenset(counts)


def _inner_vmaps(params: tp.Mapping[str, tp.Any],
                 source_info: tp.Any) -> tuple[int, str | None]:
  """``inner_vmaps`` of a sow, and the stack if it is ambiguous.

  The count from the stack without its copies must not exceed the vmaps
  applied to the sow (those its own batching rule counted, ``vmapped``, and
  those it noted as skipped); the vmaps inside are those of the first
  ``count`` applied that it counted. If the count exceeds them, or another
  reading of the stack (a copy kept) fits too and gives another number
  inside, the site is marked ambiguous: a loop around it refuses rather
  than guesses.
  """
  inner, counts = _readings(source_info.name_stack.stack)
  # The stack records every vmap applied around the equation; the sow's
  # rule counted those that batched it, and noted the positions of those
  # that did not (`primitive.with_vmap_skipped`, innermost first: a vmap
  # inside a loop runs before one applied to the loop).
  skipped = params.get('skipped', ())
  applied = params['vmapped'] + len(skipped)

  def counted(n: int) -> int:
    return n - sum(1 for at in skipped if at < n)

  if inner > applied or any(
      count <= applied and counted(count) != counted(inner)
      for count in counts):
    return counted(inner), str(source_info.name_stack) or '(none)'
  return counted(inner), None


def _is(part: tp.Any, transform: str) -> bool:
  return isinstance(part, _jax.Transform) and part.name == transform


def aval_of(value: tp.Any) -> Aval:
  aval = jax.typeof(value)
  return tuple(aval.shape), _dtype(aval.dtype)


def _dtype(dtype: tp.Any) -> tp.Any:
  # A PRNG key's dtype (`key<fry>`) is one of JAX's extended dtypes, which
  # NumPy cannot represent: it is kept as it is.
  if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):
    return dtype
  return np.dtype(dtype)


@functools.lru_cache(maxsize=256)
def _avals(jax_avals: tuple[tp.Any, ...]) -> tuple[Aval, ...]:
  # Shared between sites: a program with thousands of sows of a few shapes
  # then allocates no tuples per sow (fewer garbage collections).
  return tuple((tuple(a.shape), _dtype(a.dtype)) for a in jax_avals)


def site_of(eqn: core.JaxprEqn) -> Site:
  return site_at(eqn.params, eqn.invars, eqn.source_info)


def site_at(
    params: tp.Mapping[str, tp.Any],
    values: tp.Sequence[tp.Any],
    source_info: tp.Any,
) -> Site:
  """The site of a sow with ``params`` of ``values`` (variables or tracers),
  staged with ``source_info``."""
  inner, ambiguous = _inner_vmaps(params, source_info)
  return Site(
      name=params['sow_name'],
      tag=params['tag'],
      mode=params['mode'],
      tree=params['tree'],
      avals=_avals(tuple(v.aval for v in values)),
      vmapped=params['vmapped'],
      inner_vmaps=inner,
      sizes=params.get('sizes', ()),
      meta=params.get('meta'),
      ambiguous=ambiguous,
  )


# One executed sow site: its site and its flat leaf values.
Record = tuple[Site, list[tp.Any]]


def split_records(
    sites: tp.Sequence[Site], leaves: tp.Sequence[tp.Any]
) -> list[Record]:
  """Pairs each site with its slice of a flat list of sown leaves."""
  records, start = [], 0
  for site in sites:
    records.append((site, list(leaves[start : start + site.num_leaves])))
    start += site.num_leaves
  assert start == len(leaves), (start, len(leaves))
  return records


def describe_names(names: tp.Iterable[tp.Any]) -> str:
  return ', '.join(sorted(map(repr, names))) or '(none)'


# The files of the library whose frames an equation's location skips (a sow
# is bound by `primitive.sow`, a module's sow by `Module.sow`), to name user
# code: this package's, and those each layer above adds (`skip_frames_in`).
_LIBRARY_DIRS: list[str] = [os.path.dirname(os.path.abspath(__file__))]


def skip_frames_in(directory: str) -> None:
  """Makes ``where`` skip the frames of files under ``directory`` too."""
  directory = os.path.abspath(directory)
  if directory not in _LIBRARY_DIRS:
    _LIBRARY_DIRS.append(directory)


def where(eqn: core.JaxprEqn) -> str:
  """Where ``eqn`` was traced: the first frame outside JAX and this
  library."""
  return where_bound(eqn.source_info)


def where_bound(source_info: tp.Any) -> str:
  """Where a primitive bound with ``source_info`` was bound (see
  :func:`where`)."""
  dirs = tuple(_LIBRARY_DIRS)
  for frame in _jax.user_frames(source_info.traceback):
    if not frame.file_name.startswith(dirs):
      return f'{frame.file_name}:{frame.start_line} ({frame.function_name})'
  return source_info_util.summarize(source_info)
