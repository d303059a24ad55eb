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
"""What is planted at sow sites: the planters, the one check of a planted
value (``check_value``), and value-transforming plants.

A ``Scope`` asks its planter for the leaves to plant at each execution of a
site: ``ValuesPlanter`` hands out the user's values (``plant(f, values)``),
``InputPlanter`` the leaves a transformed sub-jaxpr takes as extra inputs;
both compute the values of planted functions (``Counting``).

Value-transforming plants, ``plant(f, {name: fn})``:

At each execution of a sow named ``name``, ``fn(value, index)`` replaces the
sown value; ``index`` counts the executions of that name in the order they
run (a Python int where it is known while tracing, a traced int32 inside a
loop or a sub-program).

``fn`` runs where the sow is, so inside a sub-jaxpr (the body of a ``jit``,
a ``scan``, a ``cond``...) it is traced into the transformed sub-jaxpr. The
traced values it closes over (a ``jit`` argument, a ``vmap``-ed selector, a
``grad`` input) then show up there as constants that are tracers of an
enclosing trace; ``hoist_tracers`` turns them into explicit inputs, which the
rules pass from outside (loop invariants for ``scan`` and ``while``, never
stacked). This is what ``jax.closure_convert`` does, except that it hoists
only values that may carry a tangent: an integer ``jit`` argument or a value
batched by ``vmap`` would stay a tracer inside the jaxpr.

Sub-jaxprs transformed for a call with functions are memoized per call
(:class:`Functions`), not in the interpreter's global caches: they hold the
tracers of that call.
"""

from __future__ import annotations

import collections
import typing as tp

import jax
import jax.extend.core as core
import jax.numpy as jnp

from flax.nnx.sow.transform import names as names_lib
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform.sites import Site
from flax.nnx.sow.transform.sites import aval_of

Fn = tp.Callable[[tp.Any, tp.Any], tp.Any]


class Counter:
  """The occurrence index of one name in one scope.

  ``start`` is the index of the scope's first execution (``0`` at the top
  level, a traced int32 input in a sub-jaxpr). The index stays a Python int
  as long as ``start`` is one and every sub-program ran a static number of
  executions.
  """

  def __init__(self, start: tp.Any):
    self.start = start
    self.offset = 0  # executions since `start`, or since `dynamic`
    self.dynamic: tp.Any = None  # the traced index after a dynamic count
    self.seen = False

  @property
  def index(self) -> tp.Any:
    base = self.start if self.dynamic is None else self.dynamic
    if isinstance(base, int):
      return base + self.offset
    return base + self.offset if self.offset else base

  @property
  def static_count(self) -> int | None:
    """Executions in this scope if known while tracing, else ``None``."""
    return self.offset if self.dynamic is None else None

  def next(self) -> tp.Any:
    index = self.index
    self.offset += 1
    self.seen = True
    return index

  def advance(self, count: int | None, end: tp.Any):
    """After a sub-program that ran ``count`` executions (``None``: only its
    traced ``end`` index is known).

    The sub-program sows the name (it is only asked about those it does), so
    the name counts as seen even if it ran zero times: a loop of length 0
    plants nothing, as a value plant of its empty stack does.
    """
    self.seen = True
    if count is None:
      self.dynamic, self.offset = end, 0
    else:
      self.offset += count


class Counting:
  """What the planters of ``plant`` and of transformed sub-jaxprs share:
  the occurrence counters of the names functions plant, and those functions.

  Attributes:
    counters: ``{name: Counter}`` for each name a function plants.
    fns: the functions, or ``None`` where no function plants.
  """

  def __init__(self, starts: dict[primitive.Name, tp.Any],
               fns: Functions | None):
    self.counters = {name: Counter(start) for name, start in starts.items()}
    self.fns = fns

  def counter(self, name: primitive.Name) -> Counter:
    """The occurrence counter of a name planted by a function."""
    return self.counters[name]

  def computed(self, site, leaves: tp.Sequence[tp.Any] | None) -> list | None:
    """What the function of ``site``'s name plants for this execution of
    ``site``, which sows ``leaves``; ``None`` if no function plants it."""
    if site.name not in self.counters:
      return None
    assert self.fns is not None and leaves is not None, site
    return self.fns.apply(site, leaves, self.counters[site.name].next())


def as_index(index: tp.Any) -> jax.Array:
  """An index as the int32 scalar a sub-jaxpr takes."""
  return jnp.asarray(index, dtype=jnp.int32)


class Functions:
  """The functions of one ``plant`` call, and its transformed sub-jaxprs.

  Attributes:
    fns: ``{name: fn}``.
  """

  def __init__(self, fns: dict[primitive.Name, Fn]):
    self.fns = fns
    self._memo: dict[tp.Any, tuple[tp.Any, tp.Any]] = {}

  def memo(self, closed, request, make: tp.Callable[[], tp.Any]):
    """``make()``, once per (``closed``, ``request``) in this call."""
    key = (id(closed), request)
    if key not in self._memo:
      # `closed` is kept alive with its entry: its id cannot be reused.
      self._memo[key] = (closed, make())
    return self._memo[key][1]

  def apply(self, site, leaves: tp.Sequence[tp.Any], index: tp.Any) -> list:
    """The leaves ``fn(value, index)`` plants at ``site`` (its sown leaves).

    ``fn`` sees the value as the sow in ``f`` sees it: the leading axes of
    the vmaps inside ``f`` (``site.vmapped``) are mapped over, with ``index``
    and ``fn``'s closure unbatched.
    """
    fn = self.fns[site.name]
    n = site.vmapped
    example = [(shape[n:], dtype) for shape, dtype in site.avals]

    def one(*value_leaves):
      value = jax.tree_util.tree_unflatten(site.tree, value_leaves)
      new = fn(value, index)
      return check_value(
          new, site.tree, example,
          where=f'plant: the function planted at {site.name!r}',
          returned=True,
      )

    mapped = one
    for _ in range(n):
      mapped = jax.vmap(mapped)
    return list(mapped(*leaves))


def check_value(
    value: tp.Any,
    tree: tp.Any,
    avals: tp.Sequence[tuple[tuple[int, ...], tp.Any]],
    *,
    where: str,
    site_has: str = 'the sow has',
    returned: bool = False,
) -> list[jax.Array]:
  """The leaves of ``value``, planted where a sow of ``tree`` and ``avals``
  is, checked against them: the one check of every planted value.

  Args:
    value: a planted value (or what a planted function returned).
    tree: the tree structure the sow has.
    avals: the (shape, dtype) of each of its leaves.
    where: what ``value`` is, to start the message with.
    site_has: who has ``tree`` and ``avals``, for the message.
    returned: ``value`` is what a planted function returned.

  Raises:
    ValueError: ``value`` has another structure, shape or dtype.
  """
  has = 'returned a value of' if returned else 'has'
  has_leaf = 'returned a leaf of' if returned else 'has a leaf of'
  advice = (
      '; it must return a value like the one it receives.'
      if returned else '.'
  )
  leaves, got_tree = jax.tree_util.tree_flatten(value)
  if got_tree != tree:
    raise ValueError(
        f'{where} {has} structure {got_tree}, but {site_has} structure'
        f' {tree}{advice}'
    )
  checked = []
  for leaf, (shape, dtype) in zip(leaves, avals):
    leaf = leaf if isinstance(leaf, jax.Array) else jnp.asarray(leaf)
    got_shape, got_dtype = aval_of(leaf)
    # `dtype` is a site's: a NumPy dtype, or an extended one (a PRNG key's).
    if (got_shape, got_dtype) != (tuple(shape), dtype):
      raise ValueError(
          f'{where} {has_leaf} {got_dtype}{list(got_shape)}, but {site_has}'
          f' {dtype}{list(shape)}{advice}'
      )
    checked.append(leaf)
  return checked


def hoist_tracers(
    jaxpr: core.Jaxpr, consts: tp.Sequence[tp.Any]
) -> tuple[core.Jaxpr, list[tp.Any], list[tp.Any]]:
  """Moves the constants of ``jaxpr`` that are tracers to its last inputs.

  Returns the new jaxpr, its remaining constants and the hoisted values (to
  pass as its last arguments, in order).
  """
  is_tracer = [isinstance(c, jax.core.Tracer) for c in consts]
  if not any(is_tracer):
    return jaxpr, list(consts), []
  kept = [v for v, t in zip(jaxpr.constvars, is_tracer) if not t]
  moved = [v for v, t in zip(jaxpr.constvars, is_tracer) if t]
  new = jaxpr.replace(constvars=kept, invars=[*jaxpr.invars, *moved])
  return (
      new,
      [c for c, t in zip(consts, is_tracer) if not t],
      [c for c, t in zip(consts, is_tracer) if t],
  )


# The planters: what each ``Scope`` asks for the values a site plants.


class InputPlanter(Counting):
  """Hands out planted leaves that arrive as extra jaxpr inputs, and the
  values the functions of ``fns`` compute, counting from input indices."""

  def __init__(
      self,
      leaves: tp.Sequence[tp.Any],
      starts: dict[primitive.Name, tp.Any],
      fns: Functions | None,
  ):
    super().__init__(starts, fns)
    self.leaves = list(leaves)
    self.sites: list[Site] = []

  def take(self, site: Site, leaves: tp.Sequence[tp.Any] | None):
    computed = self.computed(site, leaves)
    if computed is not None:
      return computed
    self.sites.append(site)
    taken, self.leaves = (
        self.leaves[: site.num_leaves],
        self.leaves[site.num_leaves :],
    )
    return taken


class ValuesPlanter(Counting):
  """Hands out the user's values, one entry per sow, checking each, or what
  their functions compute."""

  def __init__(
      self,
      values: dict[primitive.Name, tp.Any],
      fns: Functions,
  ):
    super().__init__(dict.fromkeys(fns.fns, 0), fns)
    self.values = values
    self.used: collections.Counter = collections.Counter()

  def take(
      self, site: Site, leaves: tp.Sequence[tp.Any] | None
  ) -> list[tp.Any]:
    computed = self.computed(site, leaves)
    if computed is not None:
      return computed
    entries = self.values[site.name]
    index = self.used[site.name]
    if index >= len(entries):
      raise ValueError(
          f'plant: values[{site.name!r}] has {len(entries)} entries but the'
          f' function sows {site.name!r} more often.'
      )
    self.used[site.name] += 1
    return check_value(
        entries[index], site.tree, site.avals,
        where=f'plant: values[{site.name!r}][{index}]',
    )

  def entry(self, site: Site) -> tp.Any | None:
    """The value :meth:`take` would check next for ``site``, unconsumed:
    ``None`` for a name a function plants, or past the last entry (where
    ``take`` says so)."""
    entries = self.values.get(site.name)
    if site.name in self.counters or entries is None or callable(entries):
      return None
    index = self.used[site.name]
    return entries[index] if index < len(entries) else None

  def check_all_used(
      self, tag: tp.Hashable,
      sown: tp.Callable[[], tp.Iterable[primitive.Name]] = lambda: (),
  ):
    """Raises if a name of the plant was sown another number of times than
    it has entries (or never); ``sown()`` gives the names the call sows, for
    the message."""
    for name, entries in self.values.items():
      used = self.used[name]
      if name in self.counters:
        used = int(self.counters[name].seen)
        entries = None
      if used == 0:
        with_tag = '' if tag is None else f' with tag={tag!r}'
        names = sorted(set(sown()), key=names_lib.spell)
        close = names_lib.closest(name, names) if names else []
        raise ValueError(
            f'plant: the function never sows {name!r}{with_tag}'
            + (f'; closest names it sows: {", ".join(map(repr, close))}'
               if close else '')
            + '.'
        )
      if entries is not None and used != len(entries):
        raise ValueError(
            f'plant: values[{name!r}] has {len(entries)} entries but the'
            f' function sows {name!r} {used} time{"" if used == 1 else "s"}.'
        )
