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
"""What a function of the file does with an object passed to it.

``train_step(cs, optimizer, key)`` before ``cs(...)`` + ``nnx.pop(cs, T)``
leaves nothing on ``cs`` for the pop when every call it makes of ``cs``
(directly, through a transform, or through another function of the file)
cannot sow, or is followed by a pop of ``cs``. The calls are recorded
without the syntax trees (:class:`FunctionFact`, made in ``earlier.py``),
so that they can be decided with the project's classes: CAX's training
steps call ``cs(state, num_steps=n)``, which leaves ``sow`` False.
"""

from __future__ import annotations

import dataclasses

from . import methods

# One event of a parameter, in the order of the function's statements:
# ('pop',); ('call', text, method, CallArgs or None); ('function', text,
# name, index); ('unknown', text).
Event = tuple


@dataclasses.dataclass(frozen=True)
class FunctionFact:
  """A top-level function: what it does with each positional parameter."""

  name: str
  # Per parameter, its events; None when the function rebinds the name.
  effects: tuple[tuple[Event, ...] | None, ...]
  # Decorated only with JAX/NNX transforms (or not at all): a decorator of
  # its own may call the object.
  plain: bool = True


def leaves_nothing(project, root: str | None, functions: dict, name: str,
                   index: int, depth: int = 0) -> bool:
  """Whether ``name(...)`` leaves no sown value on its ``index``-th
  argument, an object of class ``root`` (None: unknown, then only a pop
  after each call makes it clean)."""
  fact = functions.get(name)
  if fact is None or not fact.plain or depth > 5 or index >= len(
      fact.effects) or fact.effects[index] is None:
    return False
  dirty = False
  for event in fact.effects[index]:
    kind = event[0]
    if kind == 'pop':
      dirty = False
    elif kind == 'call':
      _, _, method, args = event
      dirty = dirty or not method or root is None or methods.may_sow(
          project, root, method, args)
    elif kind == 'function':
      _, _, called, position = event
      dirty = dirty or not leaves_nothing(project, root, functions, called,
                                          position, depth + 1)
    else:
      dirty = True
  return not dirty
