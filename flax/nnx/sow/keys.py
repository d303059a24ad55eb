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
"""Hashable keys, equal for equal values, for unhashable static values."""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import typing as tp

import numpy as np


class Unkeyable(TypeError):
  """A value that :func:`freeze` cannot turn into a key."""


@dataclasses.dataclass(frozen=True)
class _Frozen:
  """A hashable snapshot of an unhashable container or dataclass."""

  kind: type
  items: tp.Any


class _ByEquality:
  """An unhashable value of no known structure, compared with ``==``.

  Hashed by its type only: keys that differ only in such values collide and
  are told apart by equality, as ``jax.jit`` tells static pytree node data.
  """

  __slots__ = ('value',)

  def __init__(self, value: tp.Any):
    self.value = value

  def __hash__(self) -> int:
    return hash(type(self.value))

  def __eq__(self, other) -> bool:
    if not isinstance(other, _ByEquality):
      return False
    if type(other.value) is not type(self.value):
      return False
    try:
      return bool(self.value == other.value)
    except Exception:  # pylint: disable=broad-except
      return False  # an array-valued or failing comparison: not a match


def freeze(value: tp.Any, *, snapshot: bool = False) -> tp.Hashable:
  """A hashable key equal for equal values, for an unhashable ``value``.

  A static configuration may hold lists, dicts or plain dataclasses (a
  module's ``features=[16, 16]``): they key a trace by value, as ``nnx.jit``
  compares graph definitions, instead of making every call a cache miss.
  Hashable values are kept as they are (taken as immutable); NumPy arrays
  become their bytes, and lists, tuples, mappings, sets and dataclasses
  tuples of their frozen items, so the key is also a snapshot, unchanged by
  a later in-place mutation of the value. Any other unhashable value is
  compared with ``==``: with ``snapshot``, as a deep copy (for a key that is
  kept), which must compare equal to the value.

  Raises:
    Unkeyable: with ``snapshot``, for a value that cannot be copied into an
      equal one.
  """
  try:
    hash(value)
    return value
  except TypeError:
    pass
  kind = type(value)
  if isinstance(value, np.ndarray):  # a NumPy array marked static
    return _Frozen(kind, (value.dtype, value.shape, value.tobytes()))
  if isinstance(value, (list, tuple)):
    return _Frozen(kind, tuple(freeze(v, snapshot=snapshot) for v in value))
  if isinstance(value, collections.abc.Mapping):
    return _Frozen(kind, tuple(
        (freeze(k, snapshot=snapshot), freeze(v, snapshot=snapshot))
        for k, v in value.items()
    ))
  if isinstance(value, (set, frozenset)):  # its items are hashable
    return _Frozen(kind, frozenset(value))
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return _Frozen(kind, tuple(
        freeze(getattr(value, field.name), snapshot=snapshot)
        for field in dataclasses.fields(value)
    ))
  if snapshot:
    try:
      copied = copy.deepcopy(value)
    except Exception as e:  # pylint: disable=broad-except
      raise Unkeyable(f'cannot copy {kind.__name__}') from e
    frozen = _ByEquality(copied)
    if frozen != _ByEquality(value):
      raise Unkeyable(f'a copy of {kind.__name__} is not equal to it')
    return frozen
  return _ByEquality(value)
