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
"""Appended values of a ``while_loop``: a bounded buffer and a step count.

A ``while_loop`` runs a number of steps known only at run time, so what it
appends cannot have a static shape. Given a bound (``capture(f,
max_steps=N)``), each append site inside the loop is returned as one
:class:`Steps`: its values stacked in a buffer of ``N`` steps, and how many
steps the loop ran. ``LoopBounds`` is the bound a capture asks for, part of
its request.
"""

from __future__ import annotations

import dataclasses
import typing as tp

import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow.transform import names as names_lib
from flax.nnx.sow.transform import primitive

OVERFLOW_POLICIES = ('error', 'truncate')


@dataclasses.dataclass(frozen=True)
class Steps:
  """What an append site inside a ``while_loop`` sowed, step by step.

  Attributes:
    values: the sown pytree, each leaf with a step axis of ``max_steps``
      entries (after the axes of any ``vmap`` or loop around the capture's
      loop, as for ``scan``): entry ``i`` is what step ``i`` sowed; entries at
      or after ``count`` are zeros.
    count: how many steps the loop ran (an int32 array: one per example under
      ``vmap``, one per step of a loop around this one). With
      ``on_overflow='truncate'`` it may exceed ``max_steps``: the steps past
      the bound ran but were not kept (see :attr:`truncated`).

  Example: ``capture(decode, max_steps=5)`` of a ``decode`` whose
  ``while_loop`` sows ``'h'`` (of shape ``(2,)``) at each of its 3 steps
  gives ``collected['h'] == [steps]`` with::

    >>> import jax.numpy as jnp
    >>> from flax.nnx.sow import Steps
    >>> steps = Steps(values=jnp.zeros((5, 2)).at[:3].set(1.0),
    ...               count=jnp.int32(3))
    >>> steps.values.shape, int(steps.count)
    ((5, 2), 3)
    >>> steps.mask.tolist()
    [True, True, True, False, False]
    >>> steps.filled().shape
    (3, 2)
  """

  values: tp.Any
  count: tp.Any

  @property
  def axis(self) -> int:
    """The step axis of each leaf of ``values``: after the axes of ``count``
    (the vmaps and loops around the loop)."""
    return np.ndim(self.count)

  @property
  def max_steps(self) -> int:
    """How many steps the buffer holds."""
    leaves = jax.tree_util.tree_leaves(self.values)
    if not leaves:
      raise ValueError('Steps: the sown value has no leaves.')
    return np.shape(leaves[0])[self.axis]

  @property
  def mask(self) -> jax.Array:
    """Which entries were sown: ``count``'s shape plus the step axis."""
    count = jnp.asarray(self.count)
    # Of equal ranks (no implicit rank promotion, which Flax's CI refuses).
    steps = jnp.arange(self.max_steps).reshape(
        (1,) * count.ndim + (self.max_steps,))
    return steps < jnp.expand_dims(count, -1)

  @property
  def truncated(self) -> jax.Array:
    """Whether the loop ran more steps than the buffer holds."""
    return jnp.asarray(self.count) > self.max_steps

  def filled(self) -> tp.Any:
    """The values of the steps that ran, with concrete ``count``.

    Raises:
      ValueError: ``count`` is traced, or there is one count per example or
        step of an outer loop (use :attr:`mask` there), or steps were
        truncated.
    """
    problem = ValueError(
        'Steps.filled: needs one concrete count (outside jit, vmap and outer'
        f' loops); this one is {self.count!r}. Use Steps.mask, or index'
        ' Steps.values by step.'
    )
    if np.ndim(self.count):
      raise problem
    try:
      count = int(self.count)
    except jax.errors.ConcretizationTypeError:
      raise problem from None
    if count > self.max_steps:
      raise ValueError(
          f'Steps.filled: the loop ran {count} steps, more than the'
          f' {self.max_steps} kept (on_overflow=\'truncate\').'
      )
    return jax.tree_util.tree_map(lambda v: v[:count], self.values)


jax.tree_util.register_dataclass(
    Steps, data_fields=['values', 'count'], meta_fields=[]
)


def holds_steps(tree: tp.Any) -> bool:
  """Whether the pytree structure ``tree`` has a :class:`Steps` node."""
  value = jax.tree_util.tree_unflatten(tree, [0] * tree.num_leaves)

  def is_steps(x):
    return isinstance(x, Steps)

  return any(
      is_steps(x) for x in jax.tree_util.tree_leaves(value, is_leaf=is_steps)
  )


@dataclasses.dataclass(frozen=True)
class LoopBounds:
  """How many steps of a ``while_loop`` a capture keeps per append site.

  Attributes:
    default: the bound of every name not in ``by_name``, or ``None``.
    by_name: ``(key, bound)`` pairs, a key being a name or a pattern as
      ``capture(names=...)`` reads it (``names.key``).
    on_overflow: ``'error'``: a loop that runs more steps raises (at run
      time, under ``jit``); ``'truncate'``: the first steps are kept and the
      count says how many ran.
    where: the call that takes ``max_steps`` (``'capture'``,
      ``'discover'``), for messages; not part of what the bounds are.
  """

  default: int | None = None
  by_name: tuple[tuple[names_lib.Key, int], ...] = ()
  on_overflow: str = 'error'
  where: str = dataclasses.field(default='capture', compare=False)

  @classmethod
  def make(cls, max_steps: tp.Any, on_overflow: tp.Any, *,
           where: str) -> LoopBounds:
    if on_overflow not in OVERFLOW_POLICIES:
      raise ValueError(
          f'{where}: on_overflow must be one of {OVERFLOW_POLICIES}, got'
          f' {on_overflow!r}.'
      )
    if max_steps is None:
      return cls(on_overflow=on_overflow, where=where)
    if isinstance(max_steps, tp.Mapping):
      pairs = tuple(
          (names_lib.key(name, where=f'{where}: max_steps'),
           _check_bound(bound, where=f'{where}: max_steps[{name!r}]'))
          for name, bound in max_steps.items()
      )
      if not pairs:
        raise ValueError(
            f'{where}: max_steps is an empty mapping; give a bound, a'
            ' mapping {name: bound}, or None.'
        )
      return cls(by_name=pairs, on_overflow=on_overflow, where=where)
    return cls(default=_check_bound(max_steps, where=f'{where}: max_steps'),
               on_overflow=on_overflow, where=where)

  def bound(self, name: primitive.Name) -> int | None:
    """The bound of ``name``, or ``None`` if the capture gave none; raises
    if two keys that give it different bounds select it."""
    found = [(k, bound) for k, bound in self.by_name
             if names_lib.matches(k, name)]
    if not found:
      return self.default
    if len({bound for _, bound in found}) > 1:
      raise ValueError(
          f'capture: max_steps gives {name!r} two bounds:'
          f' {", ".join(f"{k!r}: {b}" for k, b in found)}; give each name'
          ' one.'
      )
    return found[0][1]

  def check_used(self, names: tp.Collection[primitive.Name], *,
                 where: str) -> None:
    """Raises if a name of ``by_name`` is not in ``names``, those the
    capture returned as :class:`Steps`: a bound that bounded nothing."""
    unused = [k for k, _ in self.by_name
              if not any(names_lib.matches(k, name) for name in names)]
    if unused:
      raise ValueError(
          f'{where}: max_steps bounds {", ".join(map(repr, unused))}, which'
          ' no while_loop of the call sowed with mode=\'append\' (returned'
          f' as Steps: {", ".join(map(repr, names)) or "none"}).'
      )


def _check_bound(bound: tp.Any, *, where: str) -> int:
  if isinstance(bound, (bool, np.bool_)) or not isinstance(
      bound, (int, np.integer)
  ) or bound < 1:
    raise ValueError(
        f'{where} must be a positive int (the steps kept), got {bound!r}.'
    )
  return int(bound)
