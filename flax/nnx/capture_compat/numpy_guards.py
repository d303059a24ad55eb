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
"""Guards for the NumPy scalars a traced call reads from outside.

JAX inlines a NumPy scalar or 0-d array that a traced function reads as a
literal of the jaxpr, not as one of its constants, so a cached trace cannot
see that the function read it from a global or a closure; a reused trace
would keep the value it had when traced. So before tracing, the closure
cells and globals the code of the call can read are scanned for such
values, and the trace is reused only while each still holds the same value.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
import typing as tp

import numpy as np

from flax.nnx import module as module_lib

Module = module_lib.Module
_NO_VALUE = object()


# Top-level packages whose functions read no user value from their globals
# (and Python's own): they are only followed to the functions they wrap.
_LIBRARY_PACKAGES = frozenset({
    'chex', 'flax', 'jax', 'jaxlib', 'ml_dtypes', 'numpy', 'optax', 'orbax',
    'scipy', *sys.stdlib_module_names,
})
# Enough for any real model; bounds the scan of a pathological namespace.
_MAX_SCANNED = 4096


def _is_numpy_scalar(value: tp.Any) -> bool:
  return isinstance(value, np.generic) or (
      isinstance(value, np.ndarray) and value.ndim == 0
  )


def _fingerprint(value: tp.Any) -> tp.Hashable:
  """What a guard compares: the type and the exact bits of the value."""
  if not _is_numpy_scalar(value):
    return None
  array = np.asarray(value)
  return (type(value), array.dtype, array.tobytes())


@dataclasses.dataclass(frozen=True)
class Guard:
  """A global (``namespace[name]``) or a closure cell (``name`` is None)
  holding a NumPy scalar when the call was traced."""

  namespace: tp.Any  # a dict or a cell
  name: str | None
  fingerprint: tp.Hashable

  def holds(self) -> bool:
    if self.name is None:
      try:
        value = self.namespace.cell_contents
      except ValueError:  # the cell was emptied
        return False
    else:
      value = self.namespace.get(self.name, _NO_VALUE)
    return _fingerprint(value) == self.fingerprint


def _is_library(obj: tp.Any) -> bool:
  module_name: tp.Any
  if isinstance(obj, types.ModuleType):
    module_name = obj.__name__
  else:
    module_name = getattr(obj, '__module__', None)
  if not isinstance(module_name, str):
    return False
  return module_name.partition('.')[0] in _LIBRARY_PACKAGES


def _code_names(code: types.CodeType) -> set[str]:
  """The names ``code`` (and the functions defined in it) may load."""
  names = set(code.co_names)
  for const in code.co_consts:
    if isinstance(const, types.CodeType):
      names |= _code_names(const)
  return names


def numpy_guards(roots: tp.Iterable[tp.Any]) -> tuple[Guard, ...]:
  """Guards for the NumPy scalars the code of ``roots`` reads from outside.

  Follows, from ``roots`` (functions, methods, classes), the closure cells
  and the globals their code names (also a global module's attributes, for
  ``config.SCALE``), into the functions and classes found there and the
  functions decorators wrap. Values reached through other objects'
  attributes or containers are not followed.
  """
  guards: dict[tuple[int, tp.Any], Guard] = {}
  seen: set[int] = set()
  todo = list(roots)

  def watch(namespace, name, value):
    if _is_numpy_scalar(value):
      key = (id(namespace), name)
      if key not in guards:
        guards[key] = Guard(namespace, name, _fingerprint(value))
    elif callable(value) and not isinstance(value, Module):
      todo.append(value)

  while todo and len(seen) < _MAX_SCANNED:
    obj = todo.pop()
    if id(obj) in seen:
      continue
    seen.add(id(obj))
    if isinstance(obj, types.MethodType):
      todo.append(obj.__func__)
    elif isinstance(obj, functools.partial):
      todo.append(obj.func)
    elif isinstance(obj, type):
      for klass in obj.__mro__:
        if _is_library(klass):
          continue
        for attr in vars(klass).values():
          if isinstance(attr, (staticmethod, classmethod)):
            attr = attr.__func__
          elif isinstance(attr, property):
            todo.extend(f for f in (attr.fget, attr.fset) if f is not None)
            continue
          if callable(attr):
            todo.append(attr)
    elif isinstance(obj, types.FunctionType):
      library = _is_library(obj)
      for cell in obj.__closure__ or ():
        try:
          value = cell.cell_contents
        except ValueError:  # not yet bound
          continue
        if not library:
          watch(cell, None, value)
        elif callable(value):
          todo.append(value)  # the function a library decorator wraps
      if not library:
        namespace = obj.__globals__
        names = _code_names(obj.__code__)
        for name in names:
          value = namespace.get(name, _NO_VALUE)
          if isinstance(value, types.ModuleType):
            if not _is_library(value):
              attributes = vars(value)
              for attribute in names:
                if attribute in attributes:
                  watch(attributes, attribute, attributes[attribute])
          elif value is not _NO_VALUE:
            watch(namespace, name, value)
    if not isinstance(obj, type):
      try:
        wrapped = getattr(obj, '__wrapped__', None)
      except Exception:  # pylint: disable=broad-except
        wrapped = None
      if wrapped is not None:
        todo.append(wrapped)
  return tuple(guards.values())
