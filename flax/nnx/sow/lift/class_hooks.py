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
"""Class hooks: what a call puts on its modules' classes, never on modules.

Python finds ``module(x)`` and ``module.method(x)`` through the module's
class, so a tap sees a submodule's calls only by what that class holds (see
:mod:`.taps`); without ``capture_compat.install()``, Flax's own
``Module.sow`` asks ``hasattr(module, '__captures__')``, which a class
attribute answers (see :mod:`.module_paths`). A hook is such a class
attribute, held by the calls that need it and removed when the last of them
ends, also on error: the class's own attribute (or its absence) is back.

A hook decides nothing by itself: it routes to the same behaviour as before
for every instance and thread that no running call of this thread claims
(the thread's frames decide, see :mod:`.module_paths`). So nothing is
written onto a module: its ``__dict__``, its class, ``nnx.split`` of it and
its pickle are those of a direct call, in every thread, during and after
the call; a trace another thread makes of it meanwhile is the one it makes
otherwise.
"""

from __future__ import annotations

import dataclasses
import threading
import typing as tp

_ABSENT = object()


@dataclasses.dataclass
class _Hook:
  """A class attribute held by calls: what the class had before, what the
  attribute is without any hook, and how many calls hold it."""

  own: tp.Any  # the class's own attribute, or _ABSENT
  unhooked: tp.Any
  calls: int = 0


# (class, attribute name) -> the hook held on it.
_HOOKS: dict[tuple[type, str], _Hook] = {}
_LOCK = threading.Lock()

Key = tuple[type, str]


def unhooked(cls: type, name: str) -> tp.Any:
  """``name`` as ``cls`` or a base defines it, without any hook (``None``
  if none does; not from the metaclass: NNX's ``PytreeMeta.__call__`` makes
  every Module class callable, not its instances)."""
  for klass in cls.__mro__:
    hook = _HOOKS.get((klass, name))
    if hook is not None:
      return hook.unhooked
    if name in vars(klass):
      return vars(klass)[name]
  return None


def hold(
    keys: tp.Iterable[Key],
    make: tp.Callable[[type, str, tp.Any], tp.Any],
) -> list[Key]:
  """Holds, for a call, the hook ``make(cls, name, unhooked)`` on each
  ``(cls, name)`` (made when no call holds one there yet); returns the keys
  held, for :func:`release`."""
  held = []
  with _LOCK:
    for key in dict.fromkeys(keys):
      hook = _HOOKS.get(key)
      if hook is None:
        cls, name = key
        hook = _Hook(vars(cls).get(name, _ABSENT), unhooked(cls, name))
        # Not `setattr`: a metaclass's __setattr__ would be the user's.
        type.__setattr__(cls, name, make(cls, name, hook.unhooked))
        _HOOKS[key] = hook
      hook.calls += 1
      held.append(key)
  return held


def release(keys: tp.Iterable[Key]) -> None:
  """Undoes :func:`hold`: the last call holding a hook gives the class its
  own attribute back."""
  with _LOCK:
    for key in keys:
      hook = _HOOKS[key]
      hook.calls -= 1
      if hook.calls:
        continue
      del _HOOKS[key]
      cls, name = key
      if hook.own is _ABSENT:
        type.__delattr__(cls, name)
      else:
        type.__setattr__(cls, name, hook.own)


def held() -> dict[Key, int]:
  """The hooks held now, with how many calls hold each (for tests)."""
  with _LOCK:
    return {key: hook.calls for key, hook in _HOOKS.items()}
