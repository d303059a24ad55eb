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
"""Which sows an interpretation handles: the site filters.

``Selection`` is the one users build (by tag and by name); the others narrow
a filter for a rule or a sub-interpretation.
"""

from __future__ import annotations

import dataclasses
import typing as tp

from flax.nnx.sow.transform import names as names_lib
from flax.nnx.sow.transform import deferred
from flax.nnx.sow.transform import primitive

NameFilter = tp.Union[
    None, str, tp.Collection[primitive.Name], tp.Callable[[tp.Any], bool]
]


class SiteFilter(tp.Protocol):
  """What an interpretation asks of a selection: a hashable predicate on the
  parameters of a sow equation. :class:`Selection` is the one users build;
  ``nnx.capture`` selects the exact (name, tag) pairs its modules sowed."""

  def __hash__(self) -> int:
    ...

  def matches(self, params: tp.Mapping[str, tp.Any]) -> bool:
    ...


@dataclasses.dataclass(frozen=True)
class Selection:
  """A hashable predicate on sow sites; part of every interpreter cache key.

  Attributes:
    tag: only sows with this tag are selected; ``None`` selects every tag.
    names: ``None`` (every name), a frozenset of names, or a predicate.
    patterns: patterns over spelled names (``names.Pattern``); a sow is
      selected if ``names`` holds its name or a pattern matches it.
    through: selects the sows themselves (0), or only their copies made for
      the capture at this level that sees through inner captures
      (``primitive.bind``).
  """

  tag: tp.Hashable = None
  names: tp.Union[None, frozenset, tp.Callable[[tp.Any], bool]] = None
  patterns: tuple[names_lib.Pattern, ...] = ()
  through: int = 0
  # The `names` argument as the user wrote it, for messages; not part of
  # what the selection is (caches compare selections by what they select).
  given: tp.Any = dataclasses.field(default=None, compare=False)

  @classmethod
  def make(cls, *, tag: tp.Hashable, names: NameFilter, where: str):
    tag = primitive.check_static(tag, what='tag', where=where)
    if names is None or callable(names):
      return cls(tag=tag, names=names, given=names)
    keys = _keys(names, where=where)
    return cls(
        tag=tag,
        names=frozenset(k for k in keys if not _is_pattern(k)),
        patterns=tuple(dict.fromkeys(
            k for k in keys if isinstance(k, names_lib.Pattern))),
        given=names,
    )

  def matches(self, params: tp.Mapping[str, tp.Any]) -> bool:
    """Whether the sow equation with these ``params`` is selected."""
    if primitive.through_level(params) != self.through:
      return False
    if self.tag is not None and params['tag'] != self.tag:
      return False
    if self.names is None:
      return True
    # A name predicate is matched only once `resolve` made it the set of
    # names it selects (every capture does so before interpreting).
    name = params['sow_name']
    if name in tp.cast(frozenset, self.names):
      return True
    return any(pattern.matches(name) for pattern in self.patterns)

  @property
  def by_predicate(self) -> bool:
    """Whether names are chosen by a predicate, which :meth:`resolve` asks
    about the names of a whole program."""
    return callable(self.names)

  @property
  def everything(self) -> bool:
    """Whether every sow is selected (no tag, no names)."""
    return self.tag is None and self.names is None

  def resolve(
      self,
      keys: tp.Callable[[], tp.Iterable[tuple[primitive.Name, tp.Hashable]]],
  ) -> Selection:
    """This selection over a program whose sows have the (name, tag) ``keys()``.

    A name predicate becomes the set of names it selects there, so that the
    caches keyed by the selection compare predicates by what they select: a
    new predicate object (an inline ``lambda``) selecting the same names
    reuses the transformed and compiled programs instead of adding its own.
    The predicate is asked about each name once per call. ``keys`` is only
    called for a predicate: walking a large program costs time a selection
    by tag or by names does not need.
    """
    if not callable(self.names):
      return self
    candidates = {
        name for name, tag in keys()
        if (self.tag is None or tag == self.tag)
        # A deferred sow still unnamed is refused where it is handled.
        and not isinstance(name, deferred.Deferred)
    }
    return self.answered(frozenset(filter(self.names, candidates)))

  def answered(self, names: frozenset) -> Selection:
    """This selection by a predicate as the set of ``names`` it selected
    (by :meth:`resolve`, or name by name as an eager call meets them)."""
    return dataclasses.replace(self, names=names)

  def unmatched(
      self, selected: tp.Collection[primitive.Name]
  ) -> list[names_lib.Key] | None:
    """The names and patterns of this selection that selected none of the
    names ``selected`` (those of the sows a call recorded under it): ``[]``
    if each selected some (or names are chosen by a predicate), ``None`` if
    the selection selected nothing at all (by tag, or an empty collection
    of names).

    Raises ``ValueError`` for a pattern without wildcards that spells two of
    them (see ``names.resolve``).
    """
    if self.everything or self.given is not None and callable(self.given):
      # A predicate is a filter in code, asked about the names each call
      # sows (a smaller input may sow fewer): that it selects none of them
      # is an answer, where a name or pattern that matches nothing is a typo.
      return []
    if not selected:
      return None
    missing: list[names_lib.Key] = sorted(
        tp.cast(frozenset, self.names or frozenset()) - set(selected),
        key=repr,
    )
    for pattern in self.patterns:
      if not names_lib.resolve(pattern, selected, where='names'):
        missing.append(pattern)
    return missing


def _is_pattern(key: tp.Any) -> bool:
  return isinstance(key, names_lib.Pattern)


def _keys(names: NameFilter, *, where: str) -> list[names_lib.Key]:
  if isinstance(names, str):
    return [names_lib.key(names, where=where)]
  if isinstance(names, tuple):
    try:
      return [names_lib.key(n, where=where) for n in names]
    except TypeError:
      if primitive.is_name(names):
        raise TypeError(
            f'{where}: names={names!r} is a tuple, which names= reads as a'
            ' collection of names; to select the tuple name, put it in a'
            f' list: names=[{names!r}].'
        ) from None
      raise
  if isinstance(names, (list, set, frozenset)):
    return [names_lib.key(n, where=where) for n in names]
  primitive.refuse_traced(names, where=where)
  raise TypeError(
      f'{where}: names must be None, a name, a collection of names or a'
      f' predicate, got {names!r} of type {type(names).__name__}.'
  )


@dataclasses.dataclass(frozen=True)
class Excluding:
  """The sows of ``selection`` not named in ``names``."""

  selection: SiteFilter
  names: frozenset

  def matches(self, params: tp.Mapping[str, tp.Any]) -> bool:
    return params['sow_name'] not in self.names and self.selection.matches(
        params
    )


@dataclasses.dataclass(frozen=True)
class Both:
  """The sows that ``first`` and ``second`` both match."""

  first: SiteFilter
  second: SiteFilter

  def matches(self, params: tp.Mapping[str, tp.Any]) -> bool:
    return self.first.matches(params) and self.second.matches(params)


@dataclasses.dataclass(frozen=True)
class Appends:
  """The sows of ``selection`` with mode ``'append'``."""

  selection: SiteFilter

  def matches(self, params: tp.Mapping[str, tp.Any]) -> bool:
    return params['mode'] == 'append' and self.selection.matches(params)
