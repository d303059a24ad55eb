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
"""Edits of Flax's own files that the upstream patch series makes.

Each function takes a file's text and returns the edited text; none stores
any of Flax's code. An edit finds what it changes by its structure (``ast``)
or by one exact line, and raises :class:`EditError` naming the file and what
it expected if that is missing or ambiguous, so that a Flax which moved on
fails the series loudly instead of patching the wrong place.

* :func:`delegate_module`: in ``flax/nnx/module.py``, ``Module.sow``,
  ``Module.perturb`` and ``capture`` keep their signatures and docstrings;
  their bodies call ``flax.nnx.capture_compat``; the helpers only the old
  ``capture`` used, and the imports only they used, are removed.
* :func:`quote_capture_returns`: in ``capture``'s docstring, the
  ``(result, *intermediates)`` of its Returns section as a literal (the API
  reference page of the docs commit renders it; a bare ``*`` starts an
  emphasis that does not end, and Sphinx warns).
* :func:`export_sow`: ``flax/nnx/__init__.py`` exports the transform's
  package as ``nnx.sow``.
* :func:`add_testing_extra`: a package in ``pyproject.toml``'s ``testing``
  extra.
* :func:`add_ruff_exclude`: a path in ``pyproject.toml``'s ruff ``exclude``.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import typing as tp


class EditError(ValueError):
  """What an edit expected in a Flax file is not there (or not once)."""


# ---------------------------------------------------------------------------
# Locating and replacing by structure
# ---------------------------------------------------------------------------


def _parse(text: str, where: str) -> ast.Module:
  try:
    return ast.parse(text)
  except SyntaxError as e:
    raise EditError(f'{where}: does not parse: {e}') from e


def _one(found: list, what: str, where: str):
  if len(found) != 1:
    raise EditError(
        f'{where}: expected exactly one {what}, found {len(found)}'
    )
  return found[0]


def _is_overload(node: ast.FunctionDef) -> bool:
  return any(
      (isinstance(d, ast.Attribute) and d.attr == 'overload')
      or (isinstance(d, ast.Name) and d.id == 'overload')
      for d in node.decorator_list
  )


def _parameters(node: ast.FunctionDef) -> list[str]:
  """Parameter names as written, ``*name`` for a variadic one."""
  args = node.args
  names = [a.arg for a in (*args.posonlyargs, *args.args)]
  if args.vararg is not None:
    names.append('*' + args.vararg.arg)
  names += [a.arg for a in args.kwonlyargs]
  if args.kwarg is not None:
    names.append('**' + args.kwarg.arg)
  return names


def _check_signature(node: ast.FunctionDef, expected: list[str],
                     where: str) -> None:
  found = _parameters(node)
  if found != expected:
    raise EditError(
        f'{where}: {node.name} has parameters {found}, expected {expected};'
        ' Flax changed its signature, the delegation must be revised'
    )


def _docstring_end(node: ast.FunctionDef, where: str) -> int:
  """The last line (1-based) of the function's docstring."""
  first = node.body[0] if node.body else None
  if not (
      isinstance(first, ast.Expr)
      and isinstance(first.value, ast.Constant)
      and isinstance(first.value.value, str)
  ):
    raise EditError(f'{where}: {node.name} has no docstring to keep')
  if len(node.body) < 2:
    raise EditError(f'{where}: {node.name} has no body after its docstring')
  return tp.cast(int, first.end_lineno)


def _indent_of(line: str) -> str:
  return line[: len(line) - len(line.lstrip())]


@dataclasses.dataclass(frozen=True)
class _Replacement:
  start: int  # first line replaced, 0-based
  stop: int  # one past the last line replaced
  lines: list[str]


def _body_replacement(
    lines: list[str], node: ast.FunctionDef, body: str, where: str
) -> _Replacement:
  """Replaces what follows the docstring of ``node`` with ``body``.

  ``body`` is written at the indentation of the docstring.
  """
  start = _docstring_end(node, where)  # 0-based index of the next line
  stop = tp.cast(int, node.end_lineno)
  indent = _indent_of(lines[node.body[0].lineno - 1])
  new = [
      (indent + line if line.strip() else '') for line in body.splitlines()
  ]
  return _Replacement(start, stop, new)


def _apply(lines: list[str], replacements: list[_Replacement]) -> list[str]:
  out = list(lines)
  for r in sorted(replacements, key=lambda r: r.start, reverse=True):
    out[r.start:r.stop] = r.lines
  return out


# ---------------------------------------------------------------------------
# flax/nnx/module.py
# ---------------------------------------------------------------------------

MODULE_PATH = 'flax/nnx/module.py'

_SOW_BODY = '''\
# Implemented on the sow transform (flax.nnx.sow), by the package that
# implements `capture`; imported here because it imports this module.
from flax.nnx.capture_compat import module_methods

return module_methods.sow(
    self, variable_type, name, value, reduce_fn, init_fn
)
'''

_PERTURB_BODY = '''\
# Implemented on the sow transform, as `sow` is.
from flax.nnx.capture_compat import module_methods

return module_methods.perturb(self, name, value, variable_type)
'''

_CAPTURE_BODY = '''\
# The call is staged on copies of the modules, as `nnx.jit` does, and
# interpreted by the sow transform (flax.nnx.sow); imported here because
# that package imports this module.
from flax.nnx import capture_compat

return capture_compat.capture(
    fn, *var_types, init=init, method_outputs=method_outputs
)
'''

# After the definitions: they hand their calls to the sow transform, which
# tells them from a released Flax's own by this declaration
# (`flax.nnx.sow.lift.module_paths.ON_TRANSFORM`), not by reading code.
_DECLARED = '''

# These hand their calls to the sow transform (flax.nnx.sow), which tells
# them from the functions of a Flax release without it by this declaration.
Module.sow.__sow_transform__ = True  # type: ignore[attr-defined]
Module.perturb.__sow_transform__ = True  # type: ignore[attr-defined]
capture.__sow_transform__ = True  # type: ignore[attr-defined]
'''

SIGNATURES = {
    'sow': ['self', 'variable_type', 'name', 'value', 'reduce_fn', 'init_fn'],
    'perturb': ['self', 'name', 'value', 'variable_type'],
    'capture': ['fn', '*var_types', 'init', 'method_outputs'],
}

# What only the old `capture` used: its module-graph bookkeeping
# (`__captures__`) and the method wrapping of `method_outputs`.
OLD_CAPTURE_HELPERS = (
    '_collect_state_by_path',
    '_navigate_to_path',
    '_extract_captures',
    '_add_capturing',
    '_remove_capturing',
)


def _module_methods(tree: ast.Module, where: str) -> dict[str, ast.FunctionDef]:
  classes = [
      n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == 'Module'
  ]
  module_class = _one(classes, 'class Module', where)
  methods = {}
  for name in ('sow', 'perturb'):
    found = [
        n for n in module_class.body
        if isinstance(n, ast.FunctionDef) and n.name == name
    ]
    methods[name] = _one(found, f'method Module.{name}', where)
  return methods


def _capture_function(tree: ast.Module, where: str) -> ast.FunctionDef:
  found = [
      n for n in tree.body
      if isinstance(n, ast.FunctionDef)
      and n.name == 'capture'
      and not _is_overload(n)
  ]
  return _one(found, 'definition of capture (besides its overloads)', where)


def _names_used(tree: ast.AST) -> dict[str, int]:
  """How often each name is read (``Name`` loads, attribute bases)."""
  counts: dict[str, int] = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
      counts[node.id] = counts.get(node.id, 0) + 1
  return counts


def _remove_functions(
    text: str, names: tp.Sequence[str], where: str
) -> str:
  """Removes top-level functions ``names``; each must exist and be unused."""
  tree = _parse(text, where)
  lines = text.splitlines()
  # Used by what stays: the removed functions may use each other.
  kept = ast.Module(
      body=[n for n in tree.body
            if not (isinstance(n, ast.FunctionDef) and n.name in names)],
      type_ignores=[],
  )
  used = _names_used(kept)
  replacements = []
  for name in names:
    found = [
        n for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name == name
    ]
    node = _one(found, f'function {name}', where)
    if used.get(name):
      raise EditError(
          f'{where}: {name} is still used after the delegation; the old'
          ' capture changed, the edit must be revised'
      )
    start = (node.decorator_list[0].lineno if node.decorator_list
             else node.lineno) - 1
    # Its comments and the blank lines before it go too.
    while start > 0 and (
        not lines[start - 1].strip() or lines[start - 1].lstrip()
        .startswith('#')
    ):
      start -= 1
    replacements.append(
        _Replacement(start, tp.cast(int, node.end_lineno), [])
    )
  return '\n'.join(_apply(lines, replacements)) + '\n'


def _imported_names(tree: ast.Module) -> dict[str, ast.stmt]:
  """Top-level imported binding name -> its import statement."""
  bound = {}
  for node in tree.body:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      for alias in node.names:
        name = alias.asname or alias.name.split('.')[0]
        bound[name] = node
  return bound


def _alias_span(line: str, alias: ast.alias) -> tuple[int, int]:
  """The columns of ``alias`` with its separating comma and spaces."""
  start, stop = alias.col_offset, tp.cast(int, alias.end_col_offset)
  rest = line[stop:]
  after = len(rest) - len(rest.lstrip(' '))
  if rest[after:after + 1] == ',':
    stop += after + 1
    rest = line[stop:]
    stop += len(rest) - len(rest.lstrip(' '))
  else:
    head = line[:start].rstrip(' ')
    if head.endswith(','):
      start = len(head) - 1
  return start, stop


def _prune_imports(before: str, after: str, where: str) -> str:
  """Removes the imports that ``after`` no longer uses but ``before`` did."""
  tree_before, tree_after = _parse(before, where), _parse(after, where)
  used_before, used_after = _names_used(tree_before), _names_used(tree_after)
  dead = {
      name for name in _imported_names(tree_after)
      if used_before.get(name) and not used_after.get(name)
  }
  if not dead:
    return after
  lines = after.splitlines()
  for node in reversed(tree_after.body):
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
      continue
    names = [a for a in node.names
             if (a.asname or a.name.split('.')[0]) in dead]
    if not names:
      continue
    first, last = node.lineno - 1, tp.cast(int, node.end_lineno)
    if len(names) == len(node.names):
      del lines[first:last]
      # No blank line left doubled where a group of imports was.
      if (0 < first < len(lines) and not lines[first].strip()
          and not lines[first - 1].strip()):
        del lines[first]
      continue
    for alias in sorted(names, key=lambda a: (a.lineno, a.col_offset),
                        reverse=True):
      index = alias.lineno - 1
      line = lines[index]
      start, stop = _alias_span(line, alias)
      remaining = line[:start] + line[stop:]
      if remaining.strip() in ('', ','):
        del lines[index]
      else:
        lines[index] = remaining.rstrip()
  text = '\n'.join(lines) + '\n'
  _parse(text, where)
  return text


def delegate_module(text: str, where: str = MODULE_PATH) -> str:
  """``flax/nnx/module.py`` with ``sow``/``perturb``/``capture`` delegating.

  Args:
    text: the file's text, as in Flax 0.12.8 or a later Flax with the same
      definitions.
    where: the file's name, for errors.

  Returns:
    The edited text.

  Raises:
    EditError: a definition is missing, duplicated, or has another
      signature; or a helper of the old ``capture`` is still used.
  """
  if 'flax.nnx.capture_compat' in text:
    raise EditError(f'{where}: already delegates to flax.nnx.capture_compat')
  tree = _parse(text, where)
  lines = text.splitlines()
  methods = _module_methods(tree, where)
  capture = _capture_function(tree, where)
  bodies = {'sow': _SOW_BODY, 'perturb': _PERTURB_BODY,
            'capture': _CAPTURE_BODY}
  nodes = {**methods, 'capture': capture}
  replacements = []
  for name, node in nodes.items():
    _check_signature(node, SIGNATURES[name], where)
    replacements.append(_body_replacement(lines, node, bodies[name], where))
  delegated = '\n'.join(_apply(lines, replacements)) + '\n'
  delegated = _remove_functions(delegated, OLD_CAPTURE_HELPERS, where)
  delegated = _prune_imports(text, delegated, where)
  if '__captures__' in delegated:
    raise EditError(
        f'{where}: still mentions __captures__ outside the removed code'
    )
  return delegated + _DECLARED


_RETURNED = '(result, *intermediates)'


def quote_capture_returns(text: str, where: str = MODULE_PATH) -> str:
  """``capture``'s docstring with ``(result, *intermediates)`` quoted."""
  capture = _capture_function(_parse(text, where), where)
  lines = text.splitlines()
  docstring = range(capture.body[0].lineno - 1,
                    _docstring_end(capture, where))
  index = _one([i for i in docstring if _RETURNED in lines[i]],
               f'{_RETURNED!r} in the docstring of capture', where)
  if f'``{_RETURNED}``' in lines[index]:
    raise EditError(f'{where}: {_RETURNED!r} is quoted already')
  lines[index] = lines[index].replace(_RETURNED, f'``{_RETURNED}``')
  return '\n'.join(lines) + '\n'


# ---------------------------------------------------------------------------
# flax/nnx/__init__.py
# ---------------------------------------------------------------------------

INIT_PATH = 'flax/nnx/__init__.py'
_CAPTURE_EXPORT = 'from .module import capture as capture'
# The package, not its `sow` function: `flax.nnx.sow` is a package, and
# binding the name to a function would make `import flax.nnx.sow as m`
# return the function. Its API is `nnx.sow.sow`, `nnx.sow.capture`, ...
SOW_EXPORT = 'from . import sow as sow'


def export_sow(text: str, where: str = INIT_PATH) -> str:
  """``flax/nnx/__init__.py`` exporting the transform as ``nnx.sow``.

  The line goes right after the export of ``capture``, its NNX front end.
  """
  lines = text.splitlines()
  if SOW_EXPORT in lines:
    raise EditError(f'{where}: already exports {SOW_EXPORT!r}')
  index = _one(
      [i for i, line in enumerate(lines) if line.strip() == _CAPTURE_EXPORT],
      repr(_CAPTURE_EXPORT), where,
  )
  lines.insert(index + 1, SOW_EXPORT)
  return '\n'.join(lines) + '\n'


# ---------------------------------------------------------------------------
# pyproject.toml
# ---------------------------------------------------------------------------

PYPROJECT_PATH = 'pyproject.toml'
_TESTING_START = re.compile(r'^testing = \[\s*$', re.MULTILINE)


def add_testing_extra(
    text: str, requirement: str, comment: str, where: str = PYPROJECT_PATH
) -> str:
  """Adds ``requirement`` (with a ``# comment``) to the ``testing`` extra.

  It goes after the last entry of the list, in the list's own style
  (``    "name",``).
  """
  start = _one(list(_TESTING_START.finditer(text)),
               'testing = [ extra', where)
  end = text.find('\n]', start.end())
  if end < 0:
    raise EditError(f'{where}: the testing extra has no closing ]')
  block = text[start.end():end]
  name = re.split(r'[<>=!~;\[ ]', requirement, maxsplit=1)[0].lower()
  listed = re.findall(r'^\s*"([A-Za-z0-9_.\-]+)', block, re.MULTILINE)
  if name in {n.lower() for n in listed}:
    raise EditError(f'{where}: the testing extra already has {name}')
  entry = f'\n    "{requirement}",  # {comment}'
  return text[:end] + entry + text[end:]


_RUFF_EXCLUDE = re.compile(r'^\[tool\.ruff\]\n(?:.*\n)*?exclude = \[\n',
                           re.MULTILINE)


def add_ruff_exclude(
    text: str, path: str, comment: str, where: str = PYPROJECT_PATH
) -> str:
  """Adds ``path`` (with a ``# comment``) to ruff's ``exclude`` list."""
  start = _one(list(_RUFF_EXCLUDE.finditer(text)),
               '[tool.ruff] exclude = [ list', where)
  end = text.find('\n]', start.end())
  if end < 0:
    raise EditError(f'{where}: ruff\'s exclude list has no closing ]')
  if f'"{path}"' in text[start.end():end]:
    raise EditError(f'{where}: ruff already excludes {path}')
  entry = f'\n  "{path}",  # {comment}'
  return text[:end] + entry + text[end:]
