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
"""``capture(..., method_outputs=T)`` without touching any class.

Flax 0.12.8 wraps the methods of the captured modules' classes while the
capture runs, which every other instance of those classes (in other threads)
sees too. Here the methods' code is watched instead, by a profile hook of the
capturing thread, and only calls on the capture's own module copies are
sown.
"""

from __future__ import annotations

import dataclasses
import dis
import inspect
import types
import typing as tp

from flax.nnx import module as module_lib
from flax.nnx.capture_compat import frames
from flax.nnx.capture_compat import module_methods
from flax.nnx.sow import primitive

Module = module_lib.Module


_RETURN_OPCODES = frozenset(
    dis.opmap[op] for op in ('RETURN_VALUE', 'RETURN_CONST') if op in dis.opmap
)
_NOT_PLAIN = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
)


_NO_VALUE = object()


@dataclasses.dataclass(frozen=True)
class _Method:
  """A callable class attribute legacy ``method_outputs`` wraps.

  Attributes:
    name: its name in the class.
    attr: the attribute: a function (which a decorator may have returned), or
      a callable object that binds like a method (``nnx.jit``'s), whose
      ``__call__`` receives the module after the object itself.
    module_arg: the position, in the frame of the code that runs first, of
      the module the method is called on.
  """

  name: str
  attr: tp.Any
  module_arg: int

  def runs_in(self, code: types.CodeType, local: dict[str, tp.Any]) -> bool:
    """Whether a frame of ``code`` with locals ``local`` is a call of it.

    Functions wrapped by one decorator (with ``functools.wraps``, or
    ``nnx.remat``) share its wrapper's code: each has its own closure. A
    callable object shares its type's ``__call__``: it is that call's first
    argument.
    """
    if self.module_arg:
      return _positional(code, local, 0) is self.attr
    for name, cell in zip(code.co_freevars, self.attr.__closure__ or ()):
      try:
        if local.get(name, _NO_VALUE) is not cell.cell_contents:
          return False
      except ValueError:  # an empty cell
        return False
    return True


def _positional(code: types.CodeType, local, index: int) -> tp.Any:
  """The ``index``-th positional argument of a frame, also from ``*args``."""
  if index < code.co_argcount:
    return local.get(code.co_varnames[index], _NO_VALUE)
  if code.co_flags & inspect.CO_VARARGS:
    rest = local.get(
        code.co_varnames[code.co_argcount + code.co_kwonlyargcount], ()
    )
    index -= code.co_argcount
    if isinstance(rest, tuple) and index < len(rest):
      return rest[index]
  return _NO_VALUE


def _takes_positional(code: types.CodeType, index: int) -> bool:
  return code.co_argcount > index or bool(code.co_flags & inspect.CO_VARARGS)


def method_entries(
    modules: tp.Iterable[Module],
) -> dict[types.CodeType, list[_Method]]:
  """The methods legacy ``method_outputs`` wraps, by the code they run first.

  Those are the public callables and ``__call__`` defined in the class of a
  captured module itself (not inherited ones): functions, also decorated
  ones (a decorator's wrapper, ``nnx.remat``), and objects that bind like
  methods (``nnx.jit``). Legacy wraps them in the class, so a call through
  the class attribute is sown under its name; here the code that such a
  call runs first is watched instead, and several methods may share it.
  Nested classes, static and class methods and properties are left out
  (legacy wrapping breaks them).
  """
  entries: dict[types.CodeType, list[_Method]] = {}
  for cls in dict.fromkeys(type(m) for m in modules):
    for name, attr in vars(cls).items():
      if name.startswith('_') and name != '__call__':
        continue
      if isinstance(attr, types.FunctionType):
        code, module_arg = attr.__code__, 0
      elif (
          not isinstance(attr, type)
          and hasattr(type(attr), '__get__')
          and isinstance(getattr(type(attr), '__call__', None),
                         types.FunctionType)
      ):
        code, module_arg = type(attr).__call__.__code__, 1
      else:
        continue
      if code.co_flags & _NOT_PLAIN or not _takes_positional(code,
                                                             module_arg):
        continue
      methods = entries.setdefault(code, [])
      if all(m.attr is not attr for m in methods):  # an alias: first name
        methods.append(_Method(name, attr, module_arg))
  return entries


@dataclasses.dataclass
class MethodOutputs:
  """A per-thread profile hook that sows the result of captured methods."""

  frame: frames.Frame
  entries: dict[types.CodeType, list[_Method]]

  def __call__(self, py_frame, event, arg):
    if event != 'return':
      return
    code = py_frame.f_code
    methods = self.entries.get(code)
    if methods is None:
      return
    if code.co_code[py_frame.f_lasti] not in _RETURN_OPCODES:
      return  # the method raised
    local = py_frame.f_locals
    for method in methods:
      if method.runs_in(code, local):
        break
    else:
      return  # the shared code, run for something else
    module = _positional(code, local, method.module_arg)
    if not isinstance(module, Module) or not primitive.is_sowable(arg):
      return
    if self.frame.path_of(module) is None:
      return
    module_methods.sow(module, self.frame.method_outputs, method.name, arg)


# ---------------------------------------------------------------------------
