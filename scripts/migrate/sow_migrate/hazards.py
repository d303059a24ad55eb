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
"""Models that Flax 0.12.8's ``nnx.capture`` cannot run as a plain call does.

``nnx.capture`` stores what it collects in a ``__captures__`` attribute of
every module of the model while the call runs. Two kinds of model then
behave differently from ``y = m(x)`` followed by ``nnx.pop``:

* an ``nnx.List`` (or ``nnx.Sequential``) whose state JAX flattens during
  the call (``nnx.vmap``, ``nnx.scan``, ``jax.checkpoint`` of a split
  state...): the list's integer keys and ``'__captures__'`` cannot be
  sorted together, and the call raises ``ValueError: Comparator raised
  exception while sorting pytree dictionary keys`` (CAX's NCA models hold
  an ``nnx.List`` in their update MLP and run ``nnx.scan`` over
  themselves);
* an ``nnx.Dict``: ``'__captures__'`` is one of its keys during the call,
  so iterating it sees one more entry.

``y = m(x)`` + ``nnx.pop`` becomes a capture only where the codemod can
tell neither happens: the classes the object may hold are known, and none
holds an ``nnx.Dict``, nor an ``nnx.List`` while a transform may flatten
it.

The ``nnx.capture`` built on the sow transform (``flax.nnx.capture_compat``:
Flax's own with this contribution, or a released Flax after
``capture_compat.install()``) writes nothing on the model, so neither
happens there. Which one the migrated code will run on is the user's to say
(``--nnx-capture``); by default, the one installed where the codemod runs.
"""

from __future__ import annotations

import sys

LEGACY, TRANSFORM = 'legacy', 'transform'


def installed_capture() -> str:
  """Which ``nnx.capture`` the installed Flax runs: ``'transform'`` if it is
  ``flax.nnx.capture_compat``'s, else ``'legacy'``."""
  # pylint: disable=g-import-not-at-top
  try:
    from flax import nnx
    from flax.nnx import capture_compat
  except ImportError:  # Flax without this contribution (or no Flax at all)
    return LEGACY
  # pylint: enable=g-import-not-at-top
  delegates = getattr(capture_compat, 'delegates', None)
  if delegates is None:  # an older capture_compat: only installed or not
    return TRANSFORM if capture_compat.is_installed() else LEGACY
  # The overlay installed (nnx.capture is capture_compat's), or Flax with
  # this contribution, whose own nnx.capture hands every call to it.
  return TRANSFORM if delegates(nnx.capture) else LEGACY


_LISTS = frozenset({'flax.nnx.List', 'flax.nnx.Sequential'})
_DICTS = frozenset({'flax.nnx.Dict'})


def _holding(project, classes, containers) -> list[str]:
  """The classes among ``classes`` that make or derive from one of
  ``containers``."""
  found = []
  for name in sorted(classes):
    fact = project.classes.get(name)
    if fact is None:
      continue
    if any(q in containers for q, _ in fact.calls) or any(
        project.is_subclass(b, c) for b in fact.bases for c in containers):
      found.append(name)
  return found


# Packages whose classes are no NNX modules (a model may hold their
# objects; none holds an nnx.List). pydantic's models are data (Tunix's
# trajectories): a class deriving from one and not from an NNX Module is
# no module, whether pydantic is installed where the codemod runs or not.
_NOT_MODULES = frozenset({'jax', 'jaxlib', 'numpy', 'optax', 'chex',
                          'einops', 'ml_dtypes', 'typing_extensions',
                          'pydantic'})


def not_modules(top: str) -> bool:
  """Whether the package ``top`` holds no NNX module of its own (Flax's are
  known by name; the standard library's and numerical packages' are none)."""
  return top == 'flax' or top in _NOT_MODULES or top in getattr(
      sys, 'stdlib_module_names', ())


def _unread_name(other: str) -> bool:
  """Whether ``other`` names a class of a module the codemod could not read
  (not Flax's, the standard library's, nor a package known to hold no
  module)."""
  if '.' not in other or '<' in other:
    return False
  top, short = other.split('.', 1)[0], other.rsplit('.', 1)[-1]
  return not (not_modules(top) or not short[:1].isupper())


def _unread(project, classes) -> list[str]:
  """The classes that ``classes`` derive from or make and whose source the
  codemod could not read (a library not found on the search path): any of
  them may hold an ``nnx.List`` or an ``nnx.Dict``."""
  found = set()
  for name in classes:
    fact = project.classes.get(name)
    for other in ([*fact.bases, *(q for q, _ in fact.calls)] if fact else ()):
      if other not in project.classes and _unread_name(other):
        found.add(other)
  return sorted(found)


def _transforms(project, classes) -> list[str]:
  """The flattening transforms the methods of ``classes`` (and of their
  bases) use, and 'self passed on' when a method passes the module to a
  function the codemod does not follow (a method that only sows on it is
  followed: methods.passes_self_only_to_sow)."""
  from . import methods  # pylint: disable=g-import-not-at-top
  seen, found = set(), set()
  for name in classes:
    for cls in methods.ancestors(project, name):
      if cls in seen:
        continue
      seen.add(cls)
      fact = project.classes.get(cls)
      for method in (fact.methods.values() if fact else ()):
        found |= method.transforms
        if method.passes_self and not methods.passes_self_only_to_sow(
            project, method):
          found.add('~a function it passes self to')  # sorted last
  return [f.lstrip('~') for f in sorted(found)]


def _short(name: str) -> str:
  if name.startswith('flax.nnx.'):
    return 'nnx.' + name[len('flax.nnx.'):]
  return name if name.startswith('jax.') else name.rsplit('.', 1)[-1]


def unread(project, pop) -> str | None:
  """A class the popped object may be or hold that the codemod could not
  read (short name), or None."""
  if pop.root is not None and pop.root not in project.classes and (
      _unread_name(pop.root)):
    return _short(pop.root)
  classes = (project.closure(pop.root) if pop.root in project.classes
             else None)
  if classes is None:
    classes = _suspects(project, pop)
  found = _unread(project, classes)
  return _short(found[0]) if found else None


def _suspects(project, pop) -> frozenset[str]:
  """Any class the code at ``pop`` can see that is a Module, or may be one:
  a class deriving from a class the codemod could not read (GrowingNCA of a
  project on CAX, run where CAX is not installed) is not known to be
  anything, so it is kept among the suspects."""
  return frozenset(
      name for name, fact in project.classes.items()
      if _visible(fact, pop) and (project.kind(name) == 'nnx' or (
          project.kind(name) == 'other' and any(
              b not in project.classes and _unread_name(b)
              for b in fact.bases))))


def reason(project, pop) -> tuple[str, str] | None:
  """Why ``nnx.capture`` of Flax 0.12.8 may not run ``pop``'s call as the
  call runs without it (None: it does).

  The classes the popped object may hold are those of its class; when that
  class is not known, or holds modules passed in, any NNX class of the
  project that the code can see.
  """
  known = pop.root is not None and pop.root in project.classes
  if not known and pop.root is not None and _unread_name(pop.root):
    return ('capture-hazard', _unread_message(
        f'the popped object is a {_short(pop.root)}, which'))
  classes = project.closure(pop.root) if known else None
  if classes is None:
    classes = _suspects(project, pop)
    head = (f'{_short(pop.root)} holds modules passed in' if known else
            'the class of the popped object is not known')
    found = _hazard(project, classes, pop.pop_through, head)
  else:
    found = _hazard(project, classes, pop.pop_through)
  return ('capture-hazard', found) if found else None


def _visible(fact, pop) -> bool:
  """Whether code at ``pop`` may hold an instance of the class ``fact``."""
  if fact.path == pop.path:
    return True
  if fact.path.endswith(_DOCS):
    return False  # a notebook's or page's classes are its own
  if pop.path.endswith(_DOCS) and pop.imports is not None:
    return any(fact.qualified.startswith(m + '.') for m in pop.imports)
  return True


_DOCS = ('.ipynb', '.md')


def _hazard(project, classes, through: bool,
            unknown: str = '') -> str | None:
  """What in ``classes`` (the classes the model may hold) breaks
  ``nnx.capture``; ``through``: the call goes through ``nnx.vmap``;
  ``unknown``: why ``classes`` are all those of the project (then what is
  found may be there)."""
  dicts = _holding(project, classes, _DICTS)
  if dicts:
    what = (f'{unknown}; it may hold the project\'s {_short(dicts[0])}, '
            'which holds an nnx.Dict' if unknown else
            f'{_short(dicts[0])} holds an nnx.Dict')
    return (f'{what}: inside Flax 0.12.8\'s nnx.capture its keys include '
            '__captures__')
  lists = _holding(project, classes, _LISTS)
  if not lists:
    return _unread_hazard(project, classes, unknown)
  used = (['nnx.vmap'] if through else []) + [
      _short(t) for t in _transforms(project, classes)]
  if not used:
    return _unread_hazard(project, classes, unknown)
  what = (f'{unknown}; it may hold the project\'s {_short(lists[0])}, '
          f'which holds an nnx.List, under {used[0]}' if unknown else
          f'{_short(lists[0])} holds an nnx.List and the model runs under '
          f'{used[0]}')
  return (f'{what}: Flax 0.12.8\'s nnx.capture fails there (its '
          '__captures__ key cannot be sorted with the list\'s integer keys)')


def _unread_hazard(project, classes, unknown: str) -> str | None:
  """The hazard of a class the codemod has not read (None if none)."""
  unread = _unread(project, classes)
  if not unread:
    return None
  what = f'{unknown}; it' if unknown else 'the model'
  return _unread_message(f'{what} may hold {_short(unread[0])}, which')


def _unread_message(head: str) -> str:
  return (f'{head} the codemod could not resolve to a class it has read (a '
          'library not installed where it runs, or an alias): an nnx.List '
          "or nnx.Dict there would break Flax 0.12.8's nnx.capture")
