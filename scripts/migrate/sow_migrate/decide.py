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
"""Phase 2: the decision for every site, from the facts of the whole project.

Who reads what: a reader (``nnx.capture``/``nnx.pop``) reaches the sows of
the classes its object may be an instance of (the class it is constructed
from, and every class that class instantiates); when the object's class is
not known, it may reach every sow of the project. Sows made outside any
class (``module.sow(...)`` in a helper function) may be reached by every
reader.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

from . import earlier, hazards
from . import names as nm
from . import reexports
from .facts import ClassFact, OtherUse, Site
from .flags import shorten

OK, REWRITE = 'ok', 'rewrite'


@dataclasses.dataclass
class Decision:
  action: str  # OK (nothing to do), REWRITE, or 'flag'
  code: str = ''
  detail: str = ''


class Project:
  """The classes, sites and other uses of a whole project."""

  def __init__(self, sites: list[Site], classes: list[ClassFact],
               others: list[OtherUse],
               state_names: dict[str, set[str]] | None = None,
               aliases: dict[str, str] | None = None):
    state_names = state_names or {}
    # Names re-exported by a package __init__ are followed to the class.
    resolve = reexports.resolver(aliases or {})
    classes = [dataclasses.replace(
        c, bases=tuple(resolve(b) for b in c.bases),
        calls=[(resolve(q), loop) for q, loop in c.calls]) for c in classes]
    for site in sites:
      site.root = resolve(site.root)
      site.types = tuple(resolve(t) for t in site.types)
    self.classes = {c.qualified: c for c in classes}
    self.others = [o for o in others if o.code != 'attribute-read'
                   or o.receiver not in state_names.get(o.path, ())]
    self.sites = [s for s in sites if self.is_nnx(s)]
    self.linen = [s for s in sites if not self.is_nnx(s)]
    self.sows = [s for s in self.sites if s.kind in ('sow', 'perturb')]
    self.readers = [s for s in self.sites if s.kind in ('capture', 'pop')]
    for reader in self.readers:
      # Calls before the captured one: do they call a method that sows?
      if reader.earlier and not any(code == 'earlier-call'
                                    for code, _ in reader.pop_reasons):
        reason = earlier.reason(self, reader)
        if reason:
          reader.pop_reasons.insert(0, reason)
      if reader.between and not reader.pop_reasons:
        reason = earlier.between_reason(self, reader)
        if reason:
          reader.pop_reasons.insert(0, reason)

  @functools.cache
  def kind(self, qualified: str | None, depth: int = 0) -> str:
    """'nnx', 'linen' or 'other' for a class."""
    fact = self.classes.get(qualified) if qualified else None
    if fact is None or depth > 20 or (
        qualified.startswith('flax.nnx.')
        and qualified.rsplit('.', 1)[-1] in nm.NOT_MODULES):
      return 'other'
    kinds = set()
    for base in fact.bases:
      if nm.is_linen(base):
        kinds.add('linen')
      elif base == nm.MODULE:
        kinds.add('nnx')
      elif base.startswith('flax.nnx.') and base not in self.classes:
        # A class of the installed flax.nnx: a Module unless it is one of
        # the Variable or Pytree classes.
        if base.rsplit('.', 1)[-1] not in nm.NOT_MODULES:
          kinds.add('nnx')
      else:
        kinds.add(self.kind(base, depth + 1))
    for kind in ('linen', 'nnx'):
      if kind in kinds:
        return kind
    return 'other'

  def is_nnx(self, site: Site) -> bool:
    if site.kind in ('capture', 'pop'):
      # A reader of sown values: it names nnx.Intermediate or a subclass
      # (nnx.pop(m, nnx.RngState) and the library's own calls are not).
      return any(self.is_subclass(t, nm.INTERMEDIATE) for t in site.types) or (
          site.kind == 'capture' and any(
              code in ('perturbation', 'method-outputs')
              for code, _ in site.reasons))
    kind = self.kind(site.owner)
    if kind == 'linen':
      return False
    if kind == 'nnx':
      return True
    # A sow outside an NNX class: NNX if it names an NNX Variable type.
    if site.kind == 'sow':
      return any(t.startswith('flax.nnx.') for t in site.types)
    return False

  @functools.cache
  def is_subclass(self, qualified: str, base: str, depth: int = 0) -> bool:
    if qualified == base:
      return True
    if qualified == nm.PERTURBATION and base == nm.INTERMEDIATE:
      return True
    fact = self.classes.get(qualified)
    if fact is None or depth > 20:
      return False
    return any(self.is_subclass(b, base, depth + 1) for b in fact.bases)

  @functools.cache
  def closure(self, root: str | None) -> frozenset[str] | None:
    """The classes an instance of ``root`` may contain (None: unknown)."""
    if root is None or root not in self.classes:
      return None
    seen, todo = set(), [root]
    while todo:
      current = todo.pop()
      if current in seen:
        continue
      seen.add(current)
      fact = self.classes.get(current)
      if fact is None:
        continue
      if self.opaque(fact):
        return None
      # Submodules: the NNX Module classes it calls (a Variable or helper
      # class made in a method holds no sow).
      todo.extend(b for b in fact.bases if b in self.classes
                  and b != nm.MODULE)  # flax's own Module, when run on flax
      todo.extend(q for q, _ in fact.calls
                  if q in self.classes and self.kind(q) == 'nnx')
    return frozenset(seen)

  def opaque(self, fact: ClassFact) -> bool:
    """Whether an attribute of ``fact``'s instances may hold a module passed
    in: one set from an unannotated parameter, or annotated with a Module
    class or ``Any``. A parameter annotated with a plain type (``int``,
    ``jax.Array``, ``Callable``, a dataclass) holds no module."""
    for name in fact.opaque:
      if name in _MAYBE_MODULES or name == nm.MODULE:
        return True
      if name.startswith('flax.nnx.') and name.rsplit(
          '.', 1)[-1] not in nm.NOT_MODULES:
        return True  # nnx.Linear, nnx.List: modules
      if name in self.classes and self.kind(name) == 'nnx':
        return True
    return False

  def reached(self, reader: Site) -> list[Site]:
    classes = self.closure(reader.root)
    return [s for s in self.sows if _importable(s, reader) and (
        classes is None or s.owner is None or s.owner in classes)
            and self.type_reaches(reader, s)]

  def run_by(self, reader: Site) -> list[Site]:
    """The sows and perturbs the call ``reader`` captures may run, of any
    type (``reached`` keeps those whose values it collects)."""
    classes = self.closure(reader.root)
    return [s for s in self.sows if _importable(s, reader) and (
        classes is None or s.owner is None or s.owner in classes)]

  def type_reaches(self, reader: Site, sow: Site) -> bool:
    """Whether the types ``reader`` names may collect what ``sow`` sows.

    ``nnx.pop`` takes a type and its subclasses; flax 0.12.8's
    ``nnx.capture`` takes the exact types (a sow of another type inside it
    is dropped). A type the codemod cannot resolve may be anything.
    """
    if not reader.types or not sow.types:
      return True

    def known(name):
      return name in self.classes or name in _NNX_VARIABLES

    sown = sow.types[0]
    if not known(sown) or not all(known(t) for t in reader.types):
      return True
    if reader.kind == 'pop':
      return any(self.is_subclass(sown, t) for t in reader.types)
    return sown in reader.types

  def nearness(self, reader: Site, sow: Site) -> tuple[int, str, int]:
    """Orders the readers of ``sow``: the most certain first."""
    classes = self.closure(reader.root)
    if classes is not None and sow.owner in classes:
      rank = 0  # it pops an object known to hold the class
    elif reader.path == sow.path:
      rank = 1
    elif not reader.path.endswith(_DOCS):
      rank = 2
    else:
      rank = 3
    return rank, reader.path, reader.line

  def filters(self, other: OtherUse, sow: Site) -> bool:
    """Whether the filter ``other`` may select the values of ``sow``."""
    if other.owner is not None:
      return sow.owner == other.owner  # a filter inside the class itself
    if other.path != sow.path and sow.path.endswith(_DOCS):
      return False  # a notebook's or page's classes are its own
    classes = self.closure(other.root)
    return classes is None or sow.owner is None or sow.owner in classes

  def others_reached(self, reader: Site) -> list[OtherUse]:
    classes = self.closure(reader.root)
    return [o for o in self.others
            if classes is None or o.owner is None or o.owner in classes]

  @functools.cache
  def instance_counts(self, root: str) -> dict[str, int]:
    """How many instances of each class one ``root`` may hold (2 = many).

    Transitive: a class made once by a class that is itself made in a loop
    (an attention module in each block of an ``nnx.List``) has as many
    instances as its holder. The methods of a base class run for its
    subclasses' instances, so a base counts as its most numerous subclass.
    """
    members = self.closure(root) or frozenset({root})
    counts = {root: 1}
    for _ in range(len(members) + 1):  # to a fixed point (cycles saturate)
      new = collections.Counter({root: 1})
      for member in sorted(members):
        fact = self.classes.get(member)
        times = max([counts.get(member, 0)] + [
            counts.get(other, 0) for other in members
            if other != member and self.is_subclass(other, member)])
        for called, in_loop in (fact.calls if fact and times else ()):
          if called in self.classes:
            new[called] = min(2, new[called] + times * (2 if in_loop else 1))
      new = dict(new)
      if new == counts:
        break
      counts = new
    return counts

  def multi_instance(self, sow: Site) -> str | None:
    """Where the code shows several instances sowing ``sow.name`` in one
    model."""
    for root in self.classes:
      classes = self.closure(root)
      if not classes or sow.owner not in classes:
        continue
      counts = self.instance_counts(root)
      same = [s for s in self.sows if s.name == sow.name and s.owner in classes]
      owners = {s.owner for s in same}
      # A class and a base it is not instantiated as are one instance
      # (CustomLife(Life) overriding the method that sows).
      owners = {o for o in owners if counts.get(o, 0) or not any(
          other != o and self.is_subclass(other, o) for other in owners)}
      times = max([counts.get(sow.owner, 0)] + [
          n for c, n in counts.items() if self.is_subclass(c, sow.owner)])
      if len(owners) > 1 or times > 1:
        return (f"'{sow.name}' is sown by several instances in "
                f"{root.rsplit('.', 1)[-1]} "
                f"({shorten(sorted(o.rsplit('.', 1)[-1] for o in owners))}); "
                'a free sow would merge them: keep Module.sow (capture '
                'names each by its module path)')
    return None


_DOCS = ('.ipynb', '.md')
# What an attribute may hold when the codemod cannot tell: a module too.
_MAYBE_MODULES = frozenset({'unknown', 'unannotated', 'typing.Any',
                            'builtins.object'})
# flax.nnx's own Variable types: their hierarchy is known.
_NNX_VARIABLES = frozenset(f'flax.nnx.{n}' for n in nm.NOT_MODULES)


def discards(reader: Site) -> bool:
  """An ``nnx.pop(...)`` statement whose result is thrown away."""
  return reader.kind == 'pop' and any(
      code == 'pop-discarded' for code, _ in reader.pop_reasons)


def _importable(sow: Site, reader: Site) -> bool:
  # What a notebook or a Markdown page defines is seen only inside it; a
  # notebook or page sees the modules it imports (and their submodules).
  if sow.path == reader.path:
    return True
  if sow.path.endswith(_DOCS):
    return False
  if reader.path.endswith(_DOCS) and reader.imports is not None:
    return any(sow.module == m or sow.module.startswith(m + '.')
               for m in reader.imports)
  return True


def decide(project: Project, target: str,
           nnx_capture: str = hazards.LEGACY,
           given: set[str] | None = None) -> dict[int, Decision]:
  """The decision for every NNX site, keyed by ``id(site)``.

  ``nnx_capture``: which ``nnx.capture`` the migrated code will run on
  (``hazards.LEGACY`` or ``hazards.TRANSFORM``); only the legacy one has
  hazards. ``given``: the paths the run rewrites (None: all); a site of
  another file of the project stays as it is, and so does what is linked
  to it.
  """
  outside = [] if given is None else [
      s for s in project.sites if s.path not in given and not s.library]
  if target == 'capture':
    return _decide_capture(project, nnx_capture == hazards.LEGACY, outside)
  for site in outside:
    site.block(*_OUTSIDE)
  try:
    return _decide_functional(project, nnx_capture == hazards.LEGACY)
  finally:
    for site in outside:
      site.reasons.remove(_OUTSIDE)


def reader_flags(project: Project,
                 target: str) -> list[tuple[OtherUse, str, str]]:
  """(use, code, detail) of every reader of sown values that is no site.

  The codemod rewrites none of them, and once the calls run inside a
  capture (or Variables are Hijax) they find nothing: a sown value read as a
  module attribute (``model.h.value``, ``getattr(model, 'h')``), a filter
  of ``nnx.Intermediate`` that may select a sown value (``nnx.state``,
  ``nnx.split``, ``isinstance``), and ``__captures__``. A filter or
  attribute that no sow of the project may reach reads nothing sown, and is
  not reported. ``StateAxes({nnx.Intermediate: ...})`` is reported with
  ``target='functional'`` only: with the default target the sows stay
  ``Module.sow`` and Flax 0.12.8's ``nnx.capture`` carries their values
  through the transform by it.
  """
  by_name = {}
  for sow in project.sows:
    by_name.setdefault(sow.name, sow)
  found = []
  for other in project.others:
    if other.code == 'captures-read':
      found.append((other, other.code, other.detail))
    elif other.code == 'attribute-read' and other.name in by_name:
      sow = by_name[other.name]
      found.append((other, other.code, (
          f"{other.detail.removesuffix(',')} reads '{other.name}' (sown at "
          f'{sow.where}) off the module: it is there only after a call '
          'outside nnx.capture; capture the call and read the State')))
    elif (other.code == 'may-read'
          # In a Linen module's method: a Linen attribute, never NNX's.
          and project.kind(other.owner) != 'linen'):
      # The sown names the computed name may be (f'layer_{i}' is none of
      # 'h', 'out').
      spelling = other.spelling
      names = sorted(n for n in by_name if n is not None and (
          spelling is None or spelling.admits(n)))
      if not names:
        continue
      found.append((other, other.code, (
          f'{other.detail}: it may read '
          f'{shorten([repr(n) for n in names], 6)} (sown at '
          f'{by_name[names[0]].where}) off the module, where it is only after '
          'a call outside nnx.capture; capture the call and read the State')))
    elif other.code == 'filter-use':
      sows = [s for s in project.sows if project.filters(other, s)]
      if not sows:
        continue
      if 'StateAxes' in other.detail:
        if target != 'functional':
          continue
        why = ('carries the values sown on the model through the transform; '
               'a free sow is no state of the model')
      else:
        why = ('selects the values sown on the model; they are there only '
               'after a call outside nnx.capture (and never with Hijax '
               'Variables): capture the call and read the State it returns')
      found.append((other, other.code, (
          f'{other.detail} (it may select the sow at {sows[0].where}) '
          f'{why}')))
  return found


# The reason of a site in a file the run does not rewrite.
_OUTSIDE = ('outside-paths', 'not among the PATHs given: left as it is (run '
            'the codemod over it too)')


def _pop_to_capture_reason(project: Project, pop: Site):
  """Why ``nnx.pop`` -> ``nnx.capture`` would change what is collected."""
  # nnx.pop(m, nnx.Perturbation) -> nnx.capture(m, nnx.Perturbation) keeps
  # the legacy workflow as it is: 'perturbation' concerns the functional API.
  if discards(pop):
    return pop.pop_reasons[0]
  reasons = [r for r in pop.reasons if r[0] != 'perturbation']
  if reasons:
    return reasons[0]
  if pop.pop_reasons:
    return pop.pop_reasons[0]
  popped = pop.types[0]
  for other in project.others_reached(pop):
    if other.code == 'direct-intermediate' and other.owner is not None:
      return ('direct-intermediate', f'it may pop the Variable created at '
              f'{other.path}:{other.line}, which nnx.capture does not collect')
  for sow in project.reached(pop):
    if sow.types == (popped,):
      continue
    sown = sow.types[0] if sow.types else '?'
    if not project.is_subclass(sown, popped) and (
        sown in project.classes or sown in _NNX_VARIABLES):
      continue  # neither pop nor capture collects it
    short = sown.rsplit('.', 1)[-1]
    if sow.kind == 'perturb':
      return ('perturbation', f'{pop.node and "nnx.pop"} also collects the '
              f'Perturbation of perturb() at {sow.where}; nnx.capture(m, '
              f'{popped.rsplit(".", 1)[-1]}) would not')
    if project.is_subclass(sown, popped):
      return ('subclass', f'it may pop {short} sown at {sow.where}, a '
              f'subclass of {popped.rsplit(".", 1)[-1]}: nnx.capture of the '
              'exact type would not collect it')
    return ('unknown-type', f'it may pop the values sown at {sow.where} with '
            f'type {short}, which the codemod cannot resolve')
  for other in project.others_reached(pop):
    if other.code == 'direct-intermediate':
      return ('direct-intermediate', f'it may pop the Variable created at '
              f'{other.path}:{other.line}, which nnx.capture does not collect')
  return None


def _unread_reason(project: Project, pop: Site):
  """Why a pop of a model holding a class the codemod could not read stays
  (None: it holds none). After the other reasons: for Flax 0.12.8's
  ``nnx.capture`` the hazard of such a class is said first."""
  if pop.kind != 'pop':
    return None
  unread = hazards.unread(project, pop)
  if unread is None:
    return None
  # Its sows are not known: a subclass of the popped type or a
  # perturbation, which the pop collects and the capture would not.
  return ('unknown-type', f'it may pop what {unread} sows, a class the '
          'codemod could not read (a library not installed where it runs): '
          'a subclass of the type or a perturbation there is collected by '
          'nnx.pop, not by nnx.capture')


def _not_in_module(project: Project, sow: Site) -> str:
  """What the class holding a sow is, when it is not an NNX Module."""
  fact = project.classes.get(sow.owner)
  short = sow.owner.rsplit('.', 1)[-1]
  unknown = [b for b in (fact.bases if fact else ())
             if b not in project.classes and not b.startswith('flax.')]
  if fact is None or unknown:
    return (f'in {short}, whose base {shorten(unknown) or "?"} is not '
            'resolved: not known to be an NNX Module; rewrite by hand')
  return (f'in {short}, not an NNX Module: it sows on {sow.receiver}, a '
          'module passed in, under that module\'s path (a functional sow has '
          'no module path): rewrite by hand')


def _decide_capture(project: Project, legacy: bool,
                    outside=()) -> dict[int, Decision]:
  decisions = {}
  outside = {id(s) for s in outside}
  for reader in project.readers:
    if reader.kind == 'capture':
      decisions[id(reader)] = Decision(OK)
      continue
    if id(reader) in outside:
      decisions[id(reader)] = Decision('flag', *_OUTSIDE)
      continue
    reason = _pop_to_capture_reason(project, reader) or (
        hazards.reason(project, reader) if legacy else None) or (
            _unread_reason(project, reader))
    decisions[id(reader)] = (Decision(REWRITE) if reason is None
                             else Decision('flag', *reason))
  attribute_reads = collections.defaultdict(list)
  for other in project.others:
    if other.code == 'attribute-read':
      attribute_reads[other.name].append(other)
  legacy = collections.defaultdict(list)
  for reader in project.readers:
    # A pop whose result is discarded reads nothing: it keeps no sow legacy.
    if decisions[id(reader)].action == 'flag' and not discards(reader):
      for sow in project.reached(reader):
        legacy[id(sow)].append(reader)
  for sow in project.sows:
    readers = legacy.get(id(sow))
    if sow.name in attribute_reads and not readers:
      other = attribute_reads[sow.name][0]
      decisions[id(sow)] = Decision('flag', 'attribute-read', (
          f'{other.detail} at {other.path}:{other.line}: the model runs '
          'outside nnx.capture there; capture it instead'))
      continue
    if not readers:
      decisions[id(sow)] = Decision(OK)
      continue
    first = min(readers, key=lambda r: project.nearness(r, sow))
    more = f' and {len(readers) - 1} more' if len(readers) > 1 else ''
    decisions[id(sow)] = Decision('flag', 'legacy-reader', (
        f'may be read by nnx.pop at {first.where}{more}, which stays '
        f'({decisions[id(first)].code}); the model runs outside nnx.capture'))
  return decisions


def _decide_functional(project: Project,
                       legacy: bool = True) -> dict[int, Decision]:
  """``legacy``: the code will run on Flax 0.12.8's own ``Module.sow``
  (``capture_compat`` not installed), which raises inside the functional
  ``capture``: a reader that would become one must run no ``Module.sow``
  or ``Module.perturb`` that stays."""
  parent = {id(s): id(s) for s in project.sites}
  by_id = {id(s): s for s in project.sites}

  def find(key):
    while parent[key] != key:
      parent[key] = parent[parent[key]]
      key = parent[key]
    return key

  def union(a, b):
    parent[find(a)] = find(b)

  own: dict[int, tuple[str, str]] = {}
  readers_of = collections.defaultdict(list)
  for reader in project.readers:
    if not discards(reader):
      for sow in project.reached(reader):
        readers_of[id(sow)].append(reader)
  for site in project.sites:
    if site.reasons:
      own[id(site)] = site.reasons[0]
  for sow in project.sows:
    if id(sow) in own:
      continue
    if sow.kind == 'sow' and sow.types != (nm.INTERMEDIATE,):
      own[id(sow)] = ('subclass', f'sows {sow.types[0].rsplit(".", 1)[-1]}, '
                      "not nnx.Intermediate: use sow(x, name=..., tag='...') "
                      'and capture(f, tag=...)')
    elif sow.owner is not None and project.kind(sow.owner) != 'nnx':
      own[id(sow)] = ('not-in-module', _not_in_module(project, sow))
    elif sow.name is not None and (multi := project.multi_instance(sow)):
      own[id(sow)] = ('multi-instance', multi)
    elif (path := _module_path(project, sow, readers_of.get(id(sow), []))):
      own[id(sow)] = ('module-path', path)
  for reader in project.readers:
    # A reader with a reason of its own still links the sows it may reach:
    # they stay legacy with it.
    if discards(reader):
      own[id(reader)] = reader.pop_reasons[0]
      continue  # it reads nothing: the sows it clears may still migrate
    if reader.kind == 'pop' and id(reader) not in own:
      if reader.pop_reasons:
        own[id(reader)] = reader.pop_reasons[0]
      elif (reason := _pop_to_capture_reason(project, reader)
            or _unread_reason(project, reader)):
        own[id(reader)] = reason
    if reader.types and reader.types[0] != nm.INTERMEDIATE and id(
        reader) not in own:
      own[id(reader)] = ('subclass', f'captures {reader.types[0]}: use '
                         "capture(f, tag='...') with sow(..., tag='...')")
    consumer = reader.consumer
    if consumer is not None and consumer.reason and id(reader) not in own:
      own[id(reader)] = consumer.reason
    names = consumer.names if consumer is not None else None
    reached = project.reached(reader)
    # Every sow the reader may reach migrates with it: the legacy State
    # holds them all, whatever names the reader reads.
    for sow in reached:
      union(id(reader), id(sow))
    if names is not None and id(reader) not in own:
      missing = sorted(n for n in names
                       if not any(s.name == n for s in reached))
      if missing:
        own[id(reader)] = ('no-sow-found', f'reads {shorten(missing)}, which '
                           'no sow it may reach makes (a module path, or a '
                           "library's sow?)")
  for other in project.others:
    if other.code == 'attribute-read':
      for sow in project.sows:
        if sow.name == other.name and id(sow) not in own:
          own[id(sow)] = ('attribute-read', f'{other.detail} at {other.path}:'
                          f'{other.line}; capture it instead')
      continue
    if other.code != 'filter-use':
      continue
    for sow in project.sows:
      if project.filters(other, sow) and id(sow) not in own:
        own[id(sow)] = ('filter-use', f'{other.detail} at {other.path}:'
                        f'{other.line} may select it; delete that filter '
                        'once the values are captured')
  while True:
    decisions = _settle(project, own, find, by_id)
    if not legacy:
      return decisions
    # A reader kept for this reason keeps the sows it reaches, which other
    # readers may run: to a fixed point (``own`` only grows).
    kept = {id(r): reason for r in project.readers
            if decisions[id(r)].action == REWRITE
            and (reason := _runs_kept(project, r, decisions))}
    if not kept:
      return decisions
    own.update(kept)


def _runs_kept(project: Project, reader: Site,
               decisions: dict[int, Decision]) -> tuple[str, str] | None:
  """Why the functional ``capture`` that ``reader`` would become raises
  on Flax 0.12.8's own ``Module.sow`` (None: it runs no such sow).

  Flax 0.12.8's ``Module.sow``/``Module.perturb`` inside a functional
  ``capture`` raise (they would write on the module, which the capture
  never reads): every ``Module.sow`` or ``Module.perturb`` the captured
  call may run, of any type, must be one that becomes a free sow, and
  every class it may run must be one the codemod has read.
  """
  head = (f'the functional capture that nnx.{reader.kind} would become '
          'runs')
  tail = ("; on Flax 0.12.8's own Module.sow (capture_compat not installed) "
          'a Module.sow or Module.perturb inside a functional capture '
          f'raises: keep nnx.{reader.kind}, or migrate with '
          '--nnx-capture=transform where the code runs with '
          'capture_compat installed')
  kept = sorted((s for s in project.run_by(reader)
                 if decisions[id(s)].action != REWRITE),
                key=lambda s: project.nearness(reader, s))
  if kept:
    sow = kept[0]
    more = f' (and {len(kept) - 1} more)' if len(kept) > 1 else ''
    return ('kept-module-sow', (
        f'{head} the Module.{sow.kind} at {sow.where}{more}, which stays '
        f'({decisions[id(sow)].code}){tail}'))
  unread = hazards.unread(project, reader)
  if unread is not None:
    return ('kept-module-sow', (
        f'{head} {unread}, a class the codemod could not read (a library '
        'not installed where it runs), whose Module.sow stays{tail}'))
  return None


def _settle(project: Project, own: dict[int, tuple[str, str]], find,
            by_id: dict[int, Site]) -> dict[int, Decision]:
  """The decisions, from the sites' own reasons: every site linked to a
  site with a reason stays with it."""
  decisions: dict[int, Decision] = {}
  blocked = collections.defaultdict(list)
  for key in own:
    blocked[find(key)].append(key)
  for site in project.sites:
    key = id(site)
    if key in own:
      decisions[key] = Decision('flag', *own[key])
      continue
    culprits = blocked.get(find(key))
    if not culprits:
      decisions[key] = Decision(REWRITE)
      continue
    culprit = by_id[culprits[0]]
    code = 'legacy-reader' if site.kind in ('sow', 'perturb') else 'legacy-sow'
    if culprit.kind in ('sow', 'perturb'):
      code = 'legacy-sow' if site.kind in ('capture', 'pop') else code
    decisions[key] = Decision('flag', code, (
        f'linked to the {culprit.kind} at {culprit.where}, which stays '
        f'({own[culprits[0]][0]}); both must migrate together'))
  return decisions


def _module_path(project: Project, sow: Site, readers: list[Site]) -> str:
  """Why ``sow``'s values may sit below the root of a legacy State ('' if
  they cannot).

  A legacy State, and the functional ``capture`` of a ``Module.sow``, name a
  value by the module path of the module that sowed it
  (``blocks/0/attn/attn_weights``); a free ``sow(x, name=...)`` names it
  ``attn_weights`` alone, so several modules' values merge and a reader by
  path finds nothing. The free sow keeps every name only for a sow on
  ``self`` in a class that no class of the project holds and that every
  reader reaching it (whose object's class is known) captures or pops
  itself.
  """
  if sow.receiver != 'self' or sow.owner is None:
    return (f'sown on {sow.receiver}, a module passed in: its values are '
            'named by that module\'s path, which a free sow does not have; '
            'keep Module.sow (capture names it by path)')
  short = sow.owner.rsplit('.', 1)[-1]
  for root in sorted(project.classes):
    if root == sow.owner or project.is_subclass(root, sow.owner):
      continue
    classes = project.closure(root)
    if classes and sow.owner in classes:
      return (f'{short} is a submodule of {root.rsplit(".", 1)[-1]}: its '
              'values are named by their module path, which a free sow '
              'loses; keep Module.sow (capture names it by path)')
    holder = project.classes[root]
    if classes is None and project.kind(root) == 'nnx' and not (
        sow.path.endswith(_DOCS) and holder.path != sow.path):
      return (f'{root.rsplit(".", 1)[-1]} holds modules passed in, which '
              f'may be a {short}: its values would then be named by their '
              'module path, which a free sow loses; keep Module.sow')
  for reader in readers:
    # A reader of an object whose class is not known reads, of this class
    # that no class holds, only instances at the root.
    if reader.root is None or project.closure(reader.root) is None:
      continue
    if not project.is_subclass(reader.root, sow.owner):
      return (f'{short} is a submodule of what nnx.{reader.kind} at '
              f'{reader.where} reads: its values are named by their module '
              'path, which a free sow loses; keep Module.sow')
  return ''
