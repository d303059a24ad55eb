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
"""Names as researchers write them: dotted spellings and patterns.

A sow name is a ``str`` or a tuple of ``str``/``int`` (``primitive.Name``).
Its *spelling* joins the parts of a tuple with ``'.'``, so
``('layers', 1, 'mlp', '__call__', 'output')`` is spelled
``'layers.1.mlp.__call__.output'``; a ``str`` name is spelled as itself.

A *pattern* is a spelling in which a component may be ``'*'`` (exactly one
component), ``'**'`` (any number of components, none included) or hold
``*`` among other characters (``'hook_*'``: any component so beginning): as
a string (``'layers.*.mlp.__call__.output'``) or as a tuple
(``('layers', '*', 'mlp')``, the form ``tap`` always took).

Where a key may be a name or a pattern (``capture(names=...)``, the keys of
``plant``, the items of what ``capture`` returns), it is read so:

* a tuple without ``'*'``/``'**'`` components is the tuple name itself;
* a ``str`` without ``'.'`` or ``'*'`` is the ``str`` name itself;
* any other key is a pattern, matched against the spellings of the names a
  call sows. A pattern without wildcards spells exactly one name, unless a
  call sows two names of the same spelling (``'a.b'`` and ``('a', 'b')``,
  or ``('layers', 1)`` and ``('layers', '1')``): such a key is refused as
  ambiguous, never resolved by a guess.

Example::

  >>> from flax.nnx.sow.transform import names
  >>> names.spell(('layers', 1, 'mlp', '__call__', 'output'))
  'layers.1.mlp.__call__.output'
  >>> pattern = names.key('layers.*.mlp.**')
  >>> pattern.matches(('layers', 3, 'mlp', '__call__', 'output'))
  True
  >>> pattern.matches(('layers', 3, 'attn', '__call__', 'output'))
  False
  >>> names.key(('layers', 1))  # a tuple name stays a name
  ('layers', 1)
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import typing as tp

from flax.nnx.sow.transform import primitive

ONE = '*'
ANY = '**'

@functools.lru_cache(maxsize=65536)
def spell(name: primitive.Name) -> str:
  """The dotted spelling of a sow name (a ``str`` name is its own)."""
  if isinstance(name, str):
    return name
  return '.'.join(map(str, name))


@functools.lru_cache(maxsize=65536)
def _parts(name: primitive.Name) -> tuple[str, ...]:
  return tuple(spell(name).split('.'))


@dataclasses.dataclass(frozen=True)
class Pattern:
  """A pattern over spelled names (see the module docstring).

  Attributes:
    parts: the components, spelled; ``'*'`` matches one, ``'**'`` any number.
    text: the pattern as it was written, for messages.
  """

  parts: tuple[str, ...]
  text: str

  @property
  def wild(self) -> bool:
    """Whether the pattern has a wildcard (else it spells one name)."""
    return any(ONE in part for part in self.parts)

  def matches(self, name: primitive.Name) -> bool:
    return _match(self.parts, _parts(name))

  def __repr__(self):
    return repr(self.text)


@functools.lru_cache(maxsize=65536)
def _match(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
  if not pattern:
    return not parts
  head, rest = pattern[0], pattern[1:]
  if head == ANY:
    return any(_match(rest, parts[i:]) for i in range(len(parts) + 1))
  if not parts:
    return False
  return component_matches(head, parts[0]) and _match(rest, parts[1:])


@functools.lru_cache(maxsize=4096)
def _glob(component: str) -> re.Pattern[str]:
  return re.compile('.*'.join(map(re.escape, component.split(ONE))))


def component_matches(pattern: str, part: str) -> bool:
  """Whether the component ``part`` matches a pattern's component."""
  if pattern == part:
    return True
  return ONE in pattern and _glob(pattern).fullmatch(part) is not None


Key = tp.Union[primitive.Name, Pattern]


def key(value: tp.Any, *, where: str = 'names') -> Key:
  """A name or pattern as a user wrote it, read as the module docstring
  says: a name stays a name, anything else becomes a :class:`Pattern`."""
  if isinstance(value, Pattern):
    return value
  if isinstance(value, str):
    if not value or '.' not in value and ONE not in value:
      return primitive.check_name(value, where=where)
    parts = tuple(value.split('.'))
    if '' in parts:
      raise ValueError(
          f'{where}: {value!r} has an empty component; components are'
          " separated by one '.'."
      )
    return Pattern(parts=parts, text=value)
  name = primitive.check_name(value, where=where)
  if isinstance(name, tuple) and any(
      isinstance(part, str) and ONE in part for part in name
  ):
    return Pattern(parts=tuple(map(str, name)), text=spell(name))
  return name


def matches(k: Key, name: primitive.Name) -> bool:
  """Whether the key ``k`` (a name or a pattern) selects ``name``."""
  if isinstance(k, Pattern):
    return k.matches(name)
  return k == name


def resolve(
    k: Key, candidates: tp.Iterable[primitive.Name], *, where: str
) -> list[primitive.Name]:
  """The names among ``candidates`` that ``k`` selects, in their order.

  A key without wildcards that spells two of them is refused as ambiguous.
  """
  found = [name for name in candidates if matches(k, name)]
  if isinstance(k, Pattern) and not k.wild and len(found) > 1:
    raise ValueError(
        f'{where}: {k.text!r} spells {len(found)} names this call sows:'
        f' {", ".join(map(repr, found))}. Use the name itself (a tuple or a'
        ' str) to select one.'
    )
  return found


def closest(k: tp.Any, candidates: tp.Iterable[primitive.Name],
            n: int = 5) -> list[primitive.Name]:
  """The names among ``candidates`` closest to ``k`` in spelling (for
  messages)."""
  text = k.text if isinstance(k, Pattern) else spell(k)
  by_spelling: dict[str, primitive.Name] = {}
  for name in candidates:
    by_spelling.setdefault(spell(name), name)
  close = difflib.get_close_matches(text, list(by_spelling), n=n, cutoff=0.4)
  return [by_spelling[s] for s in close]

