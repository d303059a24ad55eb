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

from . import documents

_CLASS_RE = re.compile(rb'^\s*class\s', re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class ClassNames:
  """What the cheap pass keeps of one class."""

  name: str
  bases: frozenset[str]  # the last part of each base (`Module`, `Block`)
  names: frozenset[str]  # every name and attribute its body mentions
  # Whether a method keeps one of its parameters as an attribute
  # (`self.attn = attn`): an object passed in, which may be a module.
  keeps_passed_in: bool
  # The names in the file's imports (modules, their parts, what they
  # import): a class named in another file is that file's only if imported.
  imports: frozenset[str] = frozenset()


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


def _passed_in(value: ast.expr, params: set[str]) -> bool:
  """Whether ``value`` is a parameter, a field of one (``config.block``) or
  a container of them (``nnx.List(layers)``, ``[*layers]``)."""
  if isinstance(value, ast.Name):
    return value.id in params
  if isinstance(value, ast.Attribute):
    return _passed_in(value.value, params)
  if isinstance(value, ast.Starred):
    return _passed_in(value.value, params)
  if isinstance(value, (ast.List, ast.Tuple)):
    return any(_passed_in(e, params) for e in value.elts)
  if isinstance(value, ast.Call) and _last(value.func) in _CONTAINERS:
    return any(_passed_in(a, params) for a in value.args)
  return False


def _keeps_passed_in(node: ast.ClassDef) -> bool:
  for method in node.body:
    if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
      continue
    args = method.args
    params = {a.arg for a in (*args.posonlyargs, *args.args,
                              *args.kwonlyargs)}
    params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    params.discard('self')
    for statement in ast.walk(method):
      if not isinstance(statement, (ast.Assign, ast.AnnAssign)):
        continue
      targets = (statement.targets if isinstance(statement, ast.Assign)
                 else [statement.target])
      on_self = any(isinstance(t, ast.Attribute) and isinstance(
          t.value, ast.Name) and t.value.id == 'self' for t in targets)
      if on_self and statement.value is not None and _passed_in(
          statement.value, params):
        return True
  return False


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
                            _keeps_passed_in(node)))
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
  found, imports = [], set()
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
      elif isinstance(node, ast.Import):
        for alias in node.names:
          imports.update(alias.name.split('.'))
  return [dataclasses.replace(c, imports=frozenset(imports)) for c in found]


def holding(candidates: dict[str, list[ClassNames]],
            wanted: dict[str, set[str]], modules: set[str]) -> set[str]:
  """The files of ``candidates`` with a class that may hold a class of
  ``wanted`` (``{name: the modules defining a class of that name}``): it
  names one its file imports (the class or its module); or a module passed
  in (``modules``: the names of the Module classes known so far, ``Module``
  among them)."""

  def names_one(c: ClassNames) -> bool:
    return any(name in c.imports or wanted[name] & c.imports
               for name in c.names & wanted.keys())

  return {path for path, found in candidates.items()
          if any(names_one(c) or (c.keeps_passed_in and c.bases & modules)
                 for c in found)}
