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
sees too. Here, only the module copies the capture runs on (private to it)
change: for the duration of the call, each copy's class is a *watching*
subclass of its own, whose methods call the class's and sow what they return.
One watching subclass is made per class, the first time one is captured; the
classes themselves, and every other instance, are left as they are, and no
profile or trace function is installed.

Inside the call, ``type(copy)`` is therefore the subclass (``isinstance``
holds, and it has the class's name), and a ``super().method()`` call into a
base class is not sown, whereas legacy wraps the base class too when a
module of it is captured.
"""

from __future__ import annotations

import functools
import inspect
import threading
import types
import typing as tp
import weakref

from flax.nnx import module as module_lib
from flax.nnx.capture_compat import frames
from flax.nnx.capture_compat import module_methods
from flax.nnx.sow import primitive

Module = module_lib.Module

_NOT_PLAIN = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
)


def _wrapped_methods(cls: type) -> dict[str, tp.Any]:
  """The callables legacy ``method_outputs`` wraps in ``cls``, by name.

  Those are the public callables and ``__call__`` defined in the class itself
  (not inherited ones): functions, also decorated ones (a decorator's
  wrapper, ``nnx.remat``), and objects that bind like methods (``nnx.jit``'s).
  Nested classes, static and class methods, properties and generator
  functions are left out (legacy wrapping breaks them).
  """
  methods = {}
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
    takes_module = code.co_argcount > module_arg or bool(
        code.co_flags & inspect.CO_VARARGS
    )
    if not code.co_flags & _NOT_PLAIN and takes_module:
      methods[name] = attr
  return methods


def _watching(name: str, attr: tp.Any) -> tp.Callable[..., tp.Any]:
  """``attr`` as a method that also sows its result under ``name``."""

  def method(self, *args, **kwargs):
    # Called as legacy calls it: the class attribute, with the module first.
    result = attr(self, *args, **kwargs)
    frame = _frame_of(self)
    if frame is not None and primitive.is_sowable(result):
      assert frame.method_outputs is not None
      module_methods.sow(self, frame.method_outputs, name, result)
    return result

  if isinstance(attr, types.FunctionType):
    functools.update_wrapper(method, attr)
  return method


def _frame_of(module: Module) -> frames.Frame | None:
  """The innermost capture with ``method_outputs`` that holds ``module``."""
  for frame in reversed(frames.FRAMES.stack):
    if frame.method_outputs is not None and frame.path_of(module) is not None:
      return frame
  return None


# Class -> its watching subclass; the subclass's entry holds its class.
_WATCHING: weakref.WeakKeyDictionary[type, type] = (
    weakref.WeakKeyDictionary()
)
_WATCHED_BY: weakref.WeakKeyDictionary[type, type] = (
    weakref.WeakKeyDictionary()
)
_LOCK = threading.Lock()


def _watching_class(cls: type) -> type:
  """The subclass of ``cls`` whose methods sow their results (made once)."""
  if cls in _WATCHED_BY:  # already watching: a copy of a copy
    return cls
  with _LOCK:
    watching = _WATCHING.get(cls)
    if watching is None:
      namespace: dict[str, tp.Any] = {
          name: _watching(name, attr)
          for name, attr in _wrapped_methods(cls).items()
      }
      namespace.update(
          __module__=cls.__module__,
          __qualname__=cls.__qualname__,
          __doc__=cls.__doc__,
      )
      # The same metaclass and pytree setting as the class: a copy of the
      # subclass flattens, merges and prints as one of the class would.
      watching = type(cls)(
          cls.__name__, (cls,), namespace,
          pytree=getattr(cls, '_pytree__is_pytree'),
      )
      _WATCHING[cls] = watching
      _WATCHED_BY[watching] = cls
    return watching


def watch(modules: tp.Iterable[Module]) -> list[tuple[Module, type]]:
  """Gives each module copy its watching class; returns what to restore."""
  changed = []
  for module in modules:
    cls = type(module)
    watching = _watching_class(cls)
    if watching is not cls:
      _set_class(module, watching)
      changed.append((module, cls))
  return changed


def restore(changed: tp.Iterable[tuple[Module, type]]) -> None:
  """Gives the modules :func:`watch` changed their own classes back."""
  for module, cls in changed:
    _set_class(module, cls)


def _set_class(module: Module, cls: type) -> None:
  # Not through the module's __setattr__, which would record `__class__` as
  # an attribute of the module.
  object.__setattr__(module, '__class__', cls)
