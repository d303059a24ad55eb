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
"""Which call inside a capture took the sows the capture selects.

A ``capture``, ``plant`` or ``nnx.capture`` takes the sows it selects: a
capture around it does not see them (unless it sees through, see
``primitive.bind``). So that this is never silent, each such call runs as a
:class:`Call` on a per-thread stack; when it ends, it tells every capture
around it which of the sows that capture selects it took, and the capture
names it in its error (a name selected but never seen) or its warning (a
capture of everything that missed some). Only calls whose Python runs are
seen: a call inside a ``jit`` traced earlier is not run again.

Example::

  >>> import warnings
  >>> import jax.numpy as jnp
  >>> from flax.nnx.sow import capture, sow
  >>> def f(x):
  ...   return sow(x + 1, name='h')
  >>> with warnings.catch_warnings(record=True) as caught:
  ...   warnings.simplefilter('always')
  ...   (_, inner), outer = capture(capture(f))(jnp.ones(2))
  >>> list(inner), list(outer)
  (['h'], [])
  >>> print(caught[0].message)  # doctest: +ELLIPSIS
  capture: 'h' was taken by capture(f) inside the call...
"""

from __future__ import annotations

import dataclasses
import typing as tp

from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import thread_stack

Key = tuple[primitive.Name, tp.Hashable]


class TakenByInnerCall(UserWarning):
  """Warned by a capture of every sow (or of a tag) when a capture or plant
  inside it took some of the sows it would have collected."""


@dataclasses.dataclass
class Call:
  """A running ``capture``/``plant``/``nnx.capture`` call.

  Attributes:
    description: how messages name it (``capture(f)``, say).
    matches: which sows it would take, by their parameters; ``None`` for a
      call that only reports (a ``plant``).
    taken: for each (name, tag) it selects that a call inside it took, that
      call's description, first first.
  """

  description: str
  matches: tp.Callable[[tp.Mapping[str, tp.Any]], bool] | None
  taken: dict[Key, str] = dataclasses.field(default_factory=dict)


CALLS: thread_stack.ThreadStack[Call] = thread_stack.ThreadStack()


def name_of(f: tp.Any) -> str:
  """How a message names the function ``f`` a call runs."""
  return getattr(f, '__qualname__', None) or getattr(
      f, '__name__', None) or type(f).__name__


def describe(kind: str, f: tp.Any) -> str:
  """``kind(name of f)``, as a message names a call."""
  return f'{kind}({name_of(f)})'


def running(description: str, matches) -> tp.ContextManager[Call]:
  """Runs the block as a call named ``description`` selecting ``matches``."""
  return CALLS.pushed(Call(description, matches))


def took(call: Call, keys: tp.Iterable[Key]) -> None:
  """Tells the captures around ``call`` that it took the sows ``keys``."""
  stack = CALLS.stack
  if len(stack) < 2:
    return
  keys = list(dict.fromkeys(keys))
  for outer in stack[:stack.index(call)]:
    if outer.matches is None:
      continue
    for name, tag in keys:
      if outer.matches({'sow_name': name, 'tag': tag}):
        outer.taken.setdefault((name, tag), call.description)


def missed(call: Call, seen: tp.Collection[primitive.Name]) -> dict[
    str, list[primitive.Name]]:
  """The names ``call`` selects that calls inside it took and it never saw,
  by the description of the call that took them."""
  by_call: dict[str, list[primitive.Name]] = {}
  for (name, _), inner in call.taken.items():
    if name not in seen and name not in by_call.get(inner, ()):
      by_call.setdefault(inner, []).append(name)
  return by_call


def explain(by_call: dict[str, list[primitive.Name]], what: str) -> str:
  """Says which inner call took which names, and how to reach them, for a
  message of ``what`` (``'capture'`` or ``'plant'``)."""
  parts = [
      f'{", ".join(map(repr, names))} {"was" if len(names) == 1 else "were"}'
      f' taken by {inner} inside the call' for inner, names in by_call.items()
  ]
  if what == 'plant':
    advice = (
        'Plant inside that call instead: capture(plant(f, ...),'
        ' see_through=True) plants the value and collects it.')
  else:
    advice = (
        'Pass see_through=True to this capture to collect them here too (the'
        ' inner call still gets them), or read them from what the inner call'
        ' returns.')
  return (
      f'{what}: {"; ".join(parts)} (a capture or plant takes the sows it'
      f' selects: the calls around it do not see them). {advice}'
  )


def explained(error: Exception, call: Call, what: str) -> Exception | None:
  """``error`` (``what``'s error that a name it selects was never seen)
  with the inner calls that took names from ``call`` said in its message;
  ``None`` for any other error, or if none took any."""
  message = str(error)
  if not call.taken or type(error) is not ValueError or not (
      'selected no sow' in message or 'never sows' in message):
    return None
  new = ValueError(f'{message} {explain(missed(call, ()), what)}')
  for note in getattr(error, '__notes__', ()):
    new.add_note(note)
  return new
