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
"""The classes that may hold the analysed ones, wherever they are defined.

Whether a sow keeps its name under the functional target (``module-path``,
``multi-instance``) and how many instances a reader sees depend on every
class that holds the sowing class, not only on those in files that sow or
pop: ``model.py`` holding two ``Block`` s of ``block.py`` has no API of its
own. Analysing every file with libcst's metadata would cost the run several
times over (Flax's repository: 68 of 478 files mention the APIs), so every
other file is parsed once with ``ast`` (a few milliseconds a file) for what
its classes name, and a file is analysed when one of its classes may hold a
class that sows: it names one (as a base or anywhere in its body), or it
keeps an object passed in as an attribute (which may be one) and derives
from a Module. The classes it adds are followed in turn, to a fixed point.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import typing as tp

from . import documents

_CLASS_RE = re.compile(rb'^\s*class\s', re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class ClassNames:
  """What the cheap pass keeps of one class."""

  name: str
  bases: frozenset[str]  # the last part of each base (`Module`, `Block`)
  names: frozenset[str]  # every name and attribute its body mentions
  # The annotations (their names; UNANNOTATED) of the parameters a method
  # keeps as attributes (`self.attn = attn`): objects passed in, which may
  # be modules.
  kept: frozenset[str]
  # The names in the file's imports (modules, their parts, what they
  # import): a class named in another file is that file's only if imported.
  imports: frozenset[str] = frozenset()
  # The top-level packages of what its body names from the file's imports
  # (`fuzzlib` of `from fuzzlib.block0 import Block0`): a library's class
  # may sow, unknown until the library is read.
  imported_from: frozenset[str] = frozenset()


def _last(node: ast.expr) -> str | None:
  if isinstance(node, ast.Name):
    return node.id
  if isinstance(node, ast.Attribute):
    return node.attr
  if isinstance(node, ast.Subscript):  # Generic[T], nnx.Module[...]
    return _last(node.value)
  return None


_CONTAINERS = frozenset({'List', 'Dict', 'Sequential', 'list', 'tuple',
                         'dict'})


# Annotations of what holds no module (decide.Project.opaque decides the
# others with the project's classes; here only which files to read is at
# stake, and an unknown name is taken for a class that is no Module).
_PLAIN = frozenset({'int', 'float', 'str', 'bool', 'bytes', 'complex',
                    'None', 'Callable', 'Optional', 'Union', 'Sequence',
                    'Tuple', 'tuple', 'list', 'List', 'dict', 'Dict',
                    'Mapping', 'Iterable', 'Literal', 'type', 'Array',
                    'ndarray', 'dtype', 'DType', 'DTypeLike', 'Rngs'})
UNANNOTATED = '<unannotated>'


def _passed_in(value: ast.expr, params: set[str]) -> set[str]:
  """The parameters ``value`` is, a field of (``config.block``) or a
  container of (``nnx.List(layers)``, ``[*layers]``)."""
  if isinstance(value, ast.Name):
    return {value.id} & params
  if isinstance(value, (ast.Attribute, ast.Starred)):
    return _passed_in(value.value, params)
  if isinstance(value, (ast.List, ast.Tuple)):
    return set().union(*(_passed_in(e, params) for e in value.elts))
  if isinstance(value, ast.Call) and _last(value.func) in _CONTAINERS:
    return set().union(*(_passed_in(a, params) for a in value.args))
  return set()


def _annotation_names(node: ast.expr | None) -> set[str]:
  """What a parameter annotated ``node`` may be, by the last part of each
  name in it (``Callable[...]``: a function, whatever it takes)."""
  if node is None:
    return {UNANNOTATED}
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    try:  # a forward reference, 'Block'
      node = ast.parse(node.value, mode='eval').body
    except SyntaxError:
      return {UNANNOTATED}
  found = set()
  for inner in ast.walk(node):
    if isinstance(inner, ast.Subscript) and _last(inner.value) == 'Callable':
      return set()
    if isinstance(inner, (ast.Name, ast.Attribute)):
      found.add(_last(inner))
  return found - _PLAIN


def _kept(node: ast.ClassDef) -> frozenset[str]:
  """The annotations of the parameters its methods keep as attributes."""
  kept = set()
  for method in node.body:
    if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
      continue
    args = method.args
    annotations = {a.arg: a.annotation for a in (
        *args.posonlyargs, *args.args, *args.kwonlyargs,
        *(a for a in (args.vararg, args.kwarg) if a is not None))}
    annotations.pop('self', None)
    for statement in ast.walk(method):
      if not isinstance(statement, (ast.Assign, ast.AnnAssign)):
        continue
      targets = (statement.targets if isinstance(statement, ast.Assign)
                 else [statement.target])
      on_self = any(isinstance(t, ast.Attribute) and isinstance(
          t.value, ast.Name) and t.value.id == 'self' for t in targets)
      if on_self and statement.value is not None:
        for param in _passed_in(statement.value, set(annotations)):
          kept |= _annotation_names(annotations[param])
  return frozenset(kept)


def _python_classes(tree: ast.Module) -> list[ClassNames]:
  found = []
  for node in ast.walk(tree):
    if not isinstance(node, ast.ClassDef):
      continue
    bases = frozenset(b for b in map(_last, node.bases) if b)
    names = set()
    for inner in ast.walk(node):
      if isinstance(inner, ast.Name):
        names.add(inner.id)
      elif isinstance(inner, ast.Attribute):
        names.add(inner.attr)
    found.append(ClassNames(node.name, bases, frozenset(names),
                            _kept(node)))
  return found


def classes(path: str, content: bytes) -> list[ClassNames]:
  """The classes of a file (its cells, its fences), by the cheap pass.

  A unit that does not parse has no facts in the analysis either (it is
  reported as it is): it is skipped here too.
  """
  if not _CLASS_RE.search(content):
    return []
  try:
    units = documents.read_document(path, content).units
  except (UnicodeDecodeError, SyntaxError, ValueError, LookupError):
    return []
  found, imports, tops = [], set(), {}
  for unit in units:
    try:
      tree = ast.parse(unit.code)
    except (SyntaxError, ValueError):
      continue
    found += _python_classes(tree)
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom):
        imports.update((node.module or '').split('.'))
        imports.update(a.name for a in node.names)
        if not node.level and node.module:
          top = node.module.split('.')[0]
          tops.update((a.asname or a.name, top) for a in node.names)
      elif isinstance(node, ast.Import):
        for alias in node.names:
          imports.update(alias.name.split('.'))
          name = alias.asname or alias.name.split('.')[0]
          tops[name] = alias.name.split('.')[0]
  return [dataclasses.replace(
      c, imports=frozenset(imports),
      imported_from=frozenset(tops[n] for n in c.names if n in tops))
          for c in found]


_IMPORT_RE = re.compile(rb'^[ \t]*(?:from[ \t]+([A-Za-z_][\w.]*)[ \t]+import|'
                        rb'import[ \t]+([A-Za-z_][\w.]*))', re.MULTILINE)


def imported_tops(content: bytes) -> set[str]:
  """The top-level packages a file imports absolutely (cheap: a regular
  expression over its lines)."""
  return {(a or b).split(b'.', 1)[0].decode()
          for a, b in _IMPORT_RE.findall(content)}


def library_calls(path: str, content: bytes,
                  library: tp.Callable[[str], bool]) -> dict[str, set[str]]:
  """{module: names} of what a file calls that it imports absolutely from a
  package ``library(top)`` says may define modules: ``Block0(rngs)`` after
  ``from fuzzlib.block0 import Block0``, ``fuzzlib.block0.Block0(rngs)``
  after ``import fuzzlib.block0``. A library's object made anywhere (a
  model made in ``main.py`` and passed to a project's class that keeps
  modules passed in) may sow names its readers read as attributes: its
  class is worth reading. Only names that may be classes (capitalized)."""
  if not any(map(library, imported_tops(content))):
    return {}
  try:
    units = documents.read_document(path, content).units
  except (UnicodeDecodeError, SyntaxError, ValueError, LookupError):
    return {}
  found: dict[str, set[str]] = {}
  for unit in units:
    try:
      tree = ast.parse(unit.code)
    except (SyntaxError, ValueError):
      continue
    names, modules = {}, {}
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and not node.level and node.module:
        for alias in node.names:
          names[alias.asname or alias.name] = (node.module, alias.name)
      elif isinstance(node, ast.Import):
        for alias in node.names:
          if alias.asname:
            modules[alias.asname] = alias.name
          else:
            top = alias.name.split('.', 1)[0]
            modules[top] = top
    for node in ast.walk(tree):
      if not isinstance(node, ast.Call):
        continue
      parts, func = [], node.func
      while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
      if not isinstance(func, ast.Name):
        continue
      parts.append(func.id)
      parts.reverse()  # fuzzlib, block0, Block0
      if len(parts) == 1 and parts[0] in names:
        module, name = names[parts[0]]
      elif len(parts) > 1 and parts[0] in modules:
        module, name = '.'.join([modules[parts[0]], *parts[1:-1]]), parts[-1]
      elif len(parts) > 1 and parts[0] in names:
        # from fuzzlib import blocks; blocks.Block0(...)
        module = '.'.join([*names[parts[0]], *parts[1:-1]])
        name = parts[-1]
      else:
        continue
      if name[:1].isupper() and library(module.split('.', 1)[0]):
        found.setdefault(module, set()).add(name)
  return found


def holding(candidates: dict[str, list[ClassNames]],
            wanted: dict[str, set[str]], modules: set[str],
            libraries: tp.Callable[[str], bool] = lambda top: False
            ) -> set[str]:
  """The files of ``candidates`` with a Module class (``modules``: the
  names of the Module classes known so far, ``Module`` among them; a test
  case naming a model holds none) that may hold a class of ``wanted``
  (``{name: the modules defining a class of that name}``): it names one its
  file imports (the class or its module), or it keeps a parameter that may
  be a module (unannotated, or annotated as a Module, ``Any`` or
  ``object``), or it names a class of a library (``libraries(top)``: whether
  a top-level package is one that may define modules, not the project's),
  whose classes the analysis of this file will have read."""
  may_be_module = modules | {UNANNOTATED, 'Any', 'object'}

  def names_one(c: ClassNames) -> bool:
    return any(name in c.imports or wanted[name] & c.imports
               for name in c.names & wanted.keys())

  return {path for path, found in candidates.items()
          if any(c.bases & modules and (
              names_one(c) or c.kept & may_be_module
              or any(map(libraries, c.imported_from))) for c in found)}
