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
"""Migrates Flax NNX ``Module.sow``/``nnx.capture`` code (a libcst codemod).

Usage::

  python scripts/migrate/migrate_sow.py [options] PATH...

PATH may be a file (``.py``, ``.ipynb``, ``.md``) or a directory, searched
recursively for those. Files that mention none of the legacy APIs are skipped
by a textual check before any parsing.

Targets:

* ``--target=functional`` (default): rewrites to ``flax.nnx.sow``:
  ``self.sow(nnx.Intermediate, 'n', v)`` -> ``sow(v, name='n')``,
  ``x = self.perturb('n', v)`` -> ``x = perturb(v, name='n')``,
  ``nnx.capture(f, nnx.Intermediate)`` -> ``capture(f)`` (also the decorator
  form and the ``y = m(x)`` + ``nnx.pop(m, nnx.Intermediate)`` pattern), and
  adjusts the consumers of the captured values where that is provably right.
* ``--target=capture``: only replaces ``y = m(x)`` followed by
  ``s = nnx.pop(m, nnx.Intermediate)`` with
  ``y, s = nnx.capture(m, nnx.Intermediate)(x)`` (semantics-preserving).

The files given in one run are analysed together: a sow is rewritten only if
every consumer that may read it is rewritten too, and a capture only if every
sow it may reach is. Whatever cannot be rewritten safely is left untouched and
reported as ``path:line:col: code: reason``; ``--annotate`` also writes
``# TODO(migrate_sow): code: reason`` above it.

Options:

  --diff          print a unified diff, write nothing (default)
  --write         rewrite the files in place
  --check         write nothing; exit 1 if any file would change
  --annotate      add TODO comments above the flagged sites
  --jobs N        analyse and rewrite with N processes (default 1)
  --no-progress   never draw the progress bar (drawn on a terminal only)
  --quiet         print neither the flagged sites nor the summary

Exit codes:

  0  success (with ``--check``: nothing would change)
  1  ``--check`` only: at least one file would change
  2  usage error (bad option, missing path)
  3  at least one file could not be read or parsed; it was left untouched,
     every other file was processed
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import dataclasses
import difflib
import json
import multiprocessing
import os
import re
import sys
import typing as tp

import libcst as cst
from libcst._nodes.internal import CodegenState

# ----------------------------------------------------------------------------
# Reasons
# ----------------------------------------------------------------------------

REASONS = {
    'nested-consumer': (
        'intermediates read by module path; functional names are flat'
    ),
    'suffix-consumer': (
        'intermediates searched or iterated (suffix search, .items(), loop)'
    ),
    'to-pure-dict': '.to_pure_dict() over intermediates',
    'to-flat-state': 'nnx.to_flat_state over intermediates',
    'tree-leaves': 'jax.tree functions over intermediates',
    'escaping-state': (
        'captured intermediates leave the scope (returned, passed on, stored)'
    ),
    'variable-use': (
        'a sown value is used as a Variable (needs [i] or .value to rewrite)'
    ),
    'unknown-result': 'the result of nnx.capture is not unpacked as (y, s)',
    'multi-instance': (
        'one name sown by several module instances; flat names would merge'
    ),
    'transform': 'sow under an NNX transform (nnx.scan/vmap/remat/RNN/...)',
    'filter-use': (
        'Intermediate used as a filter (StateAxes, nnx.split, nnx.Not, ...)'
    ),
    'subclass': 'Intermediate subclass',
    'custom-reducer': 'custom reduce_fn/init_fn',
    'kwargs': '**kwargs/*args in the call',
    'method-outputs': 'method_outputs= captures method results implicitly',
    'perturbation': 'perturbation two-phase workflow (init=, nnx.Perturbation)',
    'several-types': 'several variable types captured at once',
    'direct-intermediate': 'direct nnx.Intermediate(...) construction',
    'attribute-read': 'attribute read of a sown value',
    'linen-sow': "Linen-style sow with a collection name string",
    'capture-intermediates': 'Linen capture_intermediates=',
    'nonliteral-name': 'sow name is neither a literal nor a string constant',
    'sow-result-used': 'the return value of .sow() is used',
    'sow-args': 'unrecognised .sow()/.perturb() arguments',
    'unknown-type': 'variable type that is not nnx.Intermediate',
    'legacy-sow-reached': 'it may reach a sow that stays legacy',
    'legacy-consumer': 'a consumer that stays legacy may read it',
    'no-sow-found': (
        'no sow found among the given paths; migrate them together'
    ),
    'pop-not-adjacent': (
        'nnx.pop of intermediates is not right after a call on the same object'
    ),
    'pop-form': 'nnx.pop with several filters or an unusual target',
    'earlier-call': (
        'an earlier call on the same object may have left intermediates'
    ),
}


@dataclasses.dataclass(frozen=True)
class Where:
  """A position in a source file (``unit`` is the notebook cell or block)."""

  path: str
  line: int
  col: int
  unit: int = 0
  unit_kind: str = ''

  def __str__(self) -> str:
    text = f'{self.path}:{self.line}:{self.col}'
    return text


@dataclasses.dataclass(frozen=True)
class Flag:
  """A site left untouched, with the reason why."""

  where: Where
  code: str
  detail: str = ''

  @property
  def message(self) -> str:
    text = f'{self.code}: {REASONS[self.code]}'
    if self.detail:
      text += f' ({self.detail})'
    return text

  def __str__(self) -> str:
    suffix = ''
    if self.where.unit_kind:
      suffix = f' [{self.where.unit_kind} {self.where.unit}]'
    return f'{self.where}: {self.message}{suffix}'


# ----------------------------------------------------------------------------
# Source documents: .py, .ipynb and .md files as lists of code units
# ----------------------------------------------------------------------------

_FENCE_RE = re.compile(
    r'^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*'
    r'(?:python|py|python3|\{code-cell\}[ \t]*(?:python3?|ipython3?))'
    r'[ \t]*\n'
    r'(?P<body>.*?)'
    r'^(?P=indent)(?P=fence)[ \t]*$',
    re.MULTILINE | re.DOTALL,
)
_MAGIC_RE = re.compile(r'^([ \t]*)([%!].*)$', re.MULTILINE)
_MAGIC_MARK = '#<migrate_sow magic>'


@dataclasses.dataclass
class Unit:
  """One piece of Python code inside a document."""

  code: str
  first_line: int  # line of the document where the code starts (1-based)


@dataclasses.dataclass
class Document:
  """A source file split into code units that can be put back together."""

  path: str
  kind: str  # 'py', 'ipynb' or 'md'
  text: str
  units: list[Unit]
  _notebook: dict[str, tp.Any] | None = None
  _cells: list[int] = dataclasses.field(default_factory=list)
  _spans: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)

  @property
  def unit_kind(self) -> str:
    return {'py': '', 'ipynb': 'cell', 'md': 'block'}[self.kind]

  def render(self, codes: list[str]) -> str:
    """Returns the document text with its units replaced by ``codes``."""
    if self.kind == 'py':
      return codes[0]
    if self.kind == 'md':
      return _render_markdown(self, codes)
    return _render_notebook(self, codes)


def read_document(path: str, text: str) -> Document:
  """Splits ``text`` (the contents of ``path``) into code units."""
  if path.endswith('.ipynb'):
    return _read_notebook(path, text)
  if path.endswith('.md'):
    return _read_markdown(path, text)
  return Document(path, 'py', text, [Unit(text, 1)])


def _mask_magics(code: str) -> str:
  return _MAGIC_RE.sub(lambda m: m.group(1) + _MAGIC_MARK + m.group(2), code)


def _unmask_magics(code: str) -> str:
  return code.replace(_MAGIC_MARK, '')


def _read_markdown(path: str, text: str) -> Document:
  units, spans = [], []
  for match in _FENCE_RE.finditer(text):
    indent = match.group('indent')
    body = match.group('body')
    lines = body.splitlines(keepends=True)
    if indent and not all(
        line.startswith(indent) or not line.strip() for line in lines
    ):
      continue
    code = ''.join(line[len(indent):] for line in lines)
    first_line = text.count('\n', 0, match.start('body')) + 1
    units.append(Unit(_mask_magics(code), first_line))
    spans.append((match.start('body'), match.end('body'), indent))
  return Document(path, 'md', text, units, _spans=spans)


def _render_markdown(doc: Document, codes: list[str]) -> str:
  pieces, last = [], 0
  for (start, end, indent), code in zip(doc._spans, codes):
    code = _unmask_magics(code)
    lines = code.splitlines(keepends=True)
    body = ''.join(indent + line if line.strip() else line for line in lines)
    pieces.append(doc.text[last:start])
    pieces.append(body)
    last = end
  pieces.append(doc.text[last:])
  return ''.join(pieces)


def _read_notebook(path: str, text: str) -> Document:
  notebook = json.loads(text)
  units, cells = [], []
  for index, cell in enumerate(notebook.get('cells', [])):
    if cell.get('cell_type') != 'code':
      continue
    source = cell.get('source', '')
    code = ''.join(source) if isinstance(source, list) else source
    units.append(Unit(_mask_magics(code), 1))
    cells.append(index)
  return Document(path, 'ipynb', text, units, _notebook=notebook, _cells=cells)


def _render_notebook(doc: Document, codes: list[str]) -> str:
  notebook = doc._notebook
  assert notebook is not None
  changed = False
  for index, unit, code in zip(doc._cells, doc.units, codes):
    if code == unit.code:
      continue
    changed = True
    cell = notebook['cells'][index]
    code = _unmask_magics(code)
    if isinstance(cell.get('source'), list):
      cell['source'] = code.splitlines(keepends=True)
    else:
      cell['source'] = code
  if not changed:
    return doc.text
  indent = _json_indent(doc.text)
  ascii_only = '\\u' in doc.text and not _has_non_ascii(doc.text)
  out = json.dumps(notebook, indent=indent, ensure_ascii=ascii_only)
  if doc.text.endswith('\n'):
    out += '\n'
  return out


def _json_indent(text: str) -> int | None:
  match = re.search(r'\n( +)"', text)
  return len(match.group(1)) if match else None


def _has_non_ascii(text: str) -> bool:
  return any(ord(char) > 127 for char in text)


# ----------------------------------------------------------------------------
# Cheap textual pre-check
# ----------------------------------------------------------------------------

_MENTIONS_RE = re.compile(
    r'\.sow\s*\(|\.perturb\s*\(|Intermediate|Perturbation'
    r'|capture_intermediates'
)


def mentions_api(text: str) -> bool:
  """Whether ``text`` may use one of the APIs this codemod migrates.

  A cheap textual test run before any parsing: a file that fails it cannot
  contain a site to rewrite or to flag.

  Args:
    text: the file contents.

  Returns:
    ``True`` if the file needs parsing.
  """
  if _MENTIONS_RE.search(text):
    return True
  return 'capture' in text and 'nnx' in text


# ----------------------------------------------------------------------------
# Names: imports, qualified names and positions
# ----------------------------------------------------------------------------

NNX_TRANSFORMS = frozenset({
    'scan', 'vmap', 'pmap', 'remat', 'checkpoint', 'RNN', 'fori_loop',
    'while_loop', 'cond', 'switch', 'shard_map',
})
TREE_FUNCTIONS = frozenset({
    'jax.tree.leaves', 'jax.tree.map', 'jax.tree.flatten',
    'jax.tree.structure', 'jax.tree.reduce', 'jax.tree.flatten_with_path',
    'jax.tree.leaves_with_path', 'jax.tree.map_with_path',
    'jax.tree_util.tree_leaves', 'jax.tree_util.tree_map',
    'jax.tree_util.tree_flatten', 'jax.tree_util.tree_structure',
    'jax.tree_util.tree_reduce', 'jax.tree_util.tree_flatten_with_path',
    'jax.tree_util.tree_leaves_with_path', 'jax.tree_util.tree_map_with_path',
})
FAMILY = ('Intermediate', 'Perturbation')
_DEFAULT_ROOTS = {'nnx': 'flax.nnx', 'jax': 'jax', 'flax': 'flax'}


def canonical(qualified: str) -> str:
  """Maps a fully qualified name to the short form the analysis uses.

  ``flax.nnx.variablelib.Intermediate`` and ``flax.nnx.Intermediate`` both
  become ``nnx.Intermediate``; names of ``flax.nnx.sow`` become ``sow.*``.

  Args:
    qualified: a dotted name, e.g. ``flax.nnx.capture``.

  Returns:
    The canonical dotted name.
  """
  for prefix, short in (('flax.nnx.sow.', 'sow.'),
                        ('flax.experimental.nnx.', 'nnx.'),
                        ('flax.nnx.', 'nnx.'),
                        ('flax.linen.', 'linen.')):
    if qualified.startswith(prefix):
      rest = qualified[len(prefix):]
      if short == 'nnx.' and rest.startswith('sow.'):
        return 'sow.' + rest[len('sow.'):]
      return short + rest.rsplit('.', 1)[-1]
  if qualified in ('flax.nnx', 'flax.experimental.nnx'):
    return 'nnx'
  return qualified


def dotted(node: cst.CSTNode) -> str | None:
  """Returns ``a.b.c`` for a Name/Attribute chain, else ``None``."""
  if isinstance(node, cst.Name):
    return node.value
  if isinstance(node, cst.Attribute):
    base = dotted(node.value)
    return None if base is None else f'{base}.{node.attr.value}'
  return None


def _module_name(node: cst.BaseExpression) -> str:
  return dotted(node) or ''


def collect_aliases(modules: list[cst.Module]) -> dict[str, str]:
  """Maps each imported local name to what it names, from module imports."""
  aliases: dict[str, str] = {}
  for module in modules:
    for statement in module.body:
      if not isinstance(statement, cst.SimpleStatementLine):
        continue
      for small in statement.body:
        if isinstance(small, cst.Import):
          _add_import(aliases, small)
        elif isinstance(small, cst.ImportFrom):
          _add_import_from(aliases, small)
  return aliases


def _add_import(aliases: dict[str, str], node: cst.Import) -> None:
  for alias in node.names:
    full = _module_name(alias.name)
    if alias.asname is not None:
      aliases[alias.asname.name.value] = full  # type: ignore[union-attr]
    else:
      root = full.split('.')[0]
      aliases[root] = root


def _add_import_from(aliases: dict[str, str], node: cst.ImportFrom) -> None:
  if node.relative or node.module is None:
    return
  if isinstance(node.names, cst.ImportStar):
    return
  base = _module_name(node.module)
  for alias in node.names:
    name = _module_name(alias.name)
    local = name
    if alias.asname is not None:
      local = alias.asname.name.value  # type: ignore[union-attr]
    aliases[local] = f'{base}.{name}'


class Resolver:
  """Resolves expressions to canonical names using a file's imports."""

  def __init__(self, aliases: dict[str, str]):
    self.aliases = aliases

  def name_of(self, node: cst.CSTNode) -> str | None:
    text = dotted(node)
    if text is None:
      return None
    root, _, rest = text.partition('.')
    base = self.aliases.get(root, _DEFAULT_ROOTS.get(root))
    if base is None:
      return None
    return canonical(f'{base}.{rest}' if rest else base)

  def is_(self, node: cst.CSTNode, *names: str) -> bool:
    return self.name_of(node) in names

  def family_tag(self, node: cst.CSTNode) -> str | None:
    """'Intermediate'/'Perturbation' for nnx types, a bare name otherwise."""
    name = self.name_of(node)
    if name in ('nnx.Intermediate', 'nnx.Perturbation'):
      return name[len('nnx.'):]
    if name is not None:
      return None
    text = dotted(node)
    if text is None:
      return None
    return text.rsplit('.', 1)[-1]

  def local_names_for(self, qualified: str) -> list[str]:
    return [
        local for local, full in self.aliases.items()
        if canonical(full) == qualified
    ]


class _Recorder:
  """A cheap context manager for ``record_syntactic_position``."""

  __slots__ = ('state', 'node')

  def __init__(self, state: '_FastState', node: cst.CSTNode):
    self.state = state
    self.node = node

  def __enter__(self) -> None:
    self.state.starts[self.node] = len(self.state.tokens)

  def __exit__(self, *exc_info) -> None:
    return None


class _FastState(CodegenState):
  """Code generation without libcst's per-node generator context managers.

  Renders a module several times faster than ``Module.code`` and, when given
  target nodes, records where they start.
  """

  def __init__(self, module: cst.Module,
               targets: tp.Collection[cst.CSTNode] = ()):
    super().__init__(
        default_indent=module.default_indent,
        default_newline=module.default_newline,
    )
    self.targets = targets
    self.starts: dict[cst.CSTNode, int] = {}

  def before_codegen(self, node: cst.CSTNode) -> None:
    if node in self.targets and node not in self.starts:
      self.starts[node] = -len(self.tokens) - 1

  def record_syntactic_position(self, node, *, start_node=None, end_node=None):
    if node in self.targets:
      return _Recorder(self, node)
    return _NULL_CONTEXT


_NULL_CONTEXT = contextlib.nullcontext()


def render(module: cst.Module) -> str:
  """``module.code``, faster."""
  state = _FastState(module)
  module._codegen(state)  # pylint: disable=protected-access
  return ''.join(state.tokens)


def positions(
    module: cst.Module, nodes: tp.Iterable[cst.CSTNode]
) -> dict[cst.CSTNode, tuple[int, int]]:
  """Returns the 1-based line and 1-based column where each node starts.

  Much cheaper than libcst's PositionProvider: the module is rendered once
  and only the requested nodes are tracked.

  Args:
    module: the parsed module.
    nodes: nodes of ``module``.

  Returns:
    A mapping from each node to ``(line, column)``.
  """
  targets = set(nodes)
  if not targets:
    return {}
  state = _FastState(module, targets)
  module._codegen(state)  # pylint: disable=protected-access
  tokens = state.tokens
  result, line, col, done = {}, 1, 0, 0
  for index, node in _sorted_marks(state.starts):
    for token in tokens[done:index]:
      newlines = token.count('\n')
      if newlines:
        line += newlines
        col = len(token) - token.rfind('\n') - 1
      else:
        col += len(token)
    done = max(done, index)
    result[node] = (line, col + 1)
  return result


def _sorted_marks(starts: dict[cst.CSTNode, int]):
  decoded = []
  for node, index in starts.items():
    decoded.append((-index - 1 if index < 0 else index, id(node), node))
  decoded.sort(key=lambda item: (item[0], item[1]))
  return [(index, node) for index, _, node in decoded]


# ----------------------------------------------------------------------------
# Collection: one traversal recording what the analysis needs
# ----------------------------------------------------------------------------

_LOOPS = (cst.For, cst.While, cst.ListComp, cst.SetComp, cst.DictComp,
          cst.GeneratorExp)
_SCOPES = (cst.Module, cst.FunctionDef, cst.Lambda)


@dataclasses.dataclass
class Context:
  """Where a node sits: its unit, scopes, class, function and loops."""

  unit: int
  scopes: tuple[cst.CSTNode, ...]
  owner: str | None  # innermost enclosing class
  function: cst.FunctionDef | None
  in_loop: bool
  transform: str | None  # innermost enclosing NNX transform


class Collector(cst.CSTVisitor):
  """Walks every unit once, recording parents, contexts and bindings."""

  def __init__(self, resolver: Resolver):
    super().__init__()
    self.resolver = resolver
    self.parent: dict[cst.CSTNode, cst.CSTNode] = {}
    self.context: dict[cst.CSTNode, Context] = {}
    self.calls: list[cst.Call] = []
    self.names: dict[str, list[cst.Name]] = collections.defaultdict(list)
    self.attributes: list[cst.Attribute] = []
    self.stores: set[cst.Name] = set()
    self.classes: dict[str, cst.ClassDef] = {}
    self.functions: dict[str, list[cst.FunctionDef]] = (
        collections.defaultdict(list))
    self.constants: dict[tuple[str | None, str], str] = {}
    self.keywords: list[cst.Arg] = []
    self.transformed: dict[str, str] = {}
    self.unit = 0
    self._stack: list[cst.CSTNode] = []
    self._scopes: list[cst.CSTNode] = []
    self._owners: list[str | None] = [None]
    self._functions: list[cst.FunctionDef | None] = [None]
    self._loops: list[int] = [0]
    self._transforms: list[str | None] = [None]
    self._store_roots: set[cst.CSTNode] = set()
    self._store_depth = 0
    self._pushed: dict[cst.CSTNode, int] = {}
    self._cached: Context | None = None

  def walk(self, modules: list[cst.Module]) -> None:
    for self.unit, module in enumerate(modules):
      self._cached = None
      self._walk(module)

  def _walk(self, root: cst.CSTNode) -> None:
    """Pre-order traversal, much faster than ``CSTNode.visit``.

    Only the fields that can hold code are followed (whitespace, commas and
    parentheses are skipped), in declaration order, which is source order
    for everything the analysis orders (calls, statements).

    Args:
      root: the node to walk.
    """
    stack: list[tuple[cst.CSTNode, bool]] = [(root, False)]
    while stack:
      node, leaving = stack.pop()
      if leaving:
        self.on_leave(node)
        continue
      self.on_visit(node)
      stack.append((node, True))
      children = []
      for name in _code_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
          children.append(value)
        elif isinstance(value, (list, tuple)):
          children.extend(v for v in value if isinstance(v, cst.CSTNode))
      stack.extend((child, False) for child in reversed(children))

  # -- generic bookkeeping ---------------------------------------------------

  def on_visit(self, node: cst.CSTNode) -> bool:
    if self._stack:
      self.parent[node] = self._stack[-1]
    self._stack.append(node)
    if node in self._store_roots:
      self._store_depth += 1
    handler = _VISIT.get(type(node))
    if handler is not None:
      handler(self, node)
    return True

  def on_leave(self, original_node: cst.CSTNode) -> None:
    self._stack.pop()
    if original_node in self._store_roots:
      self._store_depth -= 1
    pushed = self._pushed.pop(original_node, 0)
    if pushed:
      self._cached = None
    if pushed & 1:
      self._scopes.pop()
    if pushed & 2:
      self._owners.pop()
    if pushed & 4:
      self._functions.pop()
      self._loops.pop()
    if pushed & 8:
      self._loops[-1] -= 1
    if pushed & 16:
      self._transforms.pop()

  def _push(self, node: cst.CSTNode, bit: int) -> None:
    self._pushed[node] = self._pushed.get(node, 0) | bit
    self._cached = None

  def _context(self) -> Context:
    if self._cached is not None:
      return self._cached
    self._cached = Context(
        unit=self.unit,
        scopes=tuple(self._scopes),
        owner=self._owners[-1],
        function=self._functions[-1],
        in_loop=self._loops[-1] > 0,
        transform=self._transforms[-1],
    )
    return self._cached

  def _enter_transform(self, node: cst.CSTNode, name: str) -> None:
    self._transforms.append(name)
    self._push(node, 16)

  # -- specific nodes ----------------------------------------------------------

  def _visit_scope(self, node: cst.CSTNode) -> None:
    if isinstance(node, cst.Module):
      key = self._module_scope
      self._scopes.append(key)
    else:
      self._scopes.append(node)
    self._push(node, 1)

  _module_scope = cst.Module(body=())

  def _visit_function(self, node: cst.FunctionDef) -> None:
    self._visit_scope(node)
    self.functions[node.name.value].append(node)
    self.context[node] = self._context()
    self._functions.append(node)
    self._loops.append(0)
    self._push(node, 4)
    self._store_roots.add(node.name)
    for param in _all_params(node.params):
      self._store_roots.add(param.name)
    for decorator in node.decorators:
      transform = self._transform_name(decorator.decorator)
      if transform is not None:
        self._enter_transform(node, transform)
        break

  def _visit_lambda(self, node: cst.Lambda) -> None:
    self._visit_scope(node)
    for param in _all_params(node.params):
      self._store_roots.add(param.name)

  def _visit_class(self, node: cst.ClassDef) -> None:
    self.classes.setdefault(node.name.value, node)
    self.context[node] = self._context()
    self._store_roots.add(node.name)
    self._owners.append(node.name.value)
    self._push(node, 2)

  def _visit_loop(self, node: cst.CSTNode) -> None:
    self._loops[-1] += 1
    self._push(node, 8)
    if isinstance(node, cst.For):
      self._store_roots.add(node.target)

  def _visit_call(self, node: cst.Call) -> None:
    self.calls.append(node)
    self.context[node] = self._context()
    transform = self._transform_name(node.func)
    if transform is not None:
      self._enter_transform(node, transform)

  def _visit_name(self, node: cst.Name) -> None:
    parent = self.parent.get(node)
    if isinstance(parent, cst.Attribute) and parent.attr is node:
      return
    if isinstance(parent, (cst.Arg, cst.ImportAlias)) and (
        getattr(parent, 'keyword', None) is node):
      return
    self.names[node.value].append(node)
    self.context[node] = self._context()
    if self._store_depth:
      self.stores.add(node)
    if self._transforms[-1] is not None:
      self.transformed.setdefault(node.value, self._transforms[-1])

  def _visit_attribute(self, node: cst.Attribute) -> None:
    self.attributes.append(node)

  def _visit_assign(self, node: cst.Assign) -> None:
    for target in node.targets:
      self._store_roots.add(target)
    self._record_constant(node)

  def _visit_target_of(self, node: cst.CSTNode) -> None:
    target = getattr(node, 'target', None)
    if target is not None:
      self._store_roots.add(target)

  def _visit_as_name(self, node: cst.AsName) -> None:
    self._store_roots.add(node.name)

  def _visit_comp_for(self, node: cst.CompFor) -> None:
    self._store_roots.add(node.target)

  def _visit_arg(self, node: cst.Arg) -> None:
    if node.keyword is not None:
      self.keywords.append(node)
      self.context[node] = self._context()

  def _visit_import_alias(self, node: cst.ImportAlias) -> None:
    if node.asname is None:
      self._store_roots.add(node.name)

  def _record_constant(self, node: cst.Assign) -> None:
    if len(node.targets) != 1:
      return
    target = node.targets[0].target
    value = string_value(node.value)
    if isinstance(target, cst.Name) and value is not None:
      owner = self._owners[-1] if self._functions[-1] is None else '?'
      self.constants[(owner, target.value)] = value

  def _transform_name(self, func: cst.CSTNode) -> str | None:
    if isinstance(func, cst.Call):
      if self.resolver.is_(func.func, 'functools.partial') and func.args:
        return self._transform_name(func.args[0].value)
      return self._transform_name(func.func)
    name = self.resolver.name_of(func)
    if name and name.startswith('nnx.') and name[4:] in NNX_TRANSFORMS:
      return name
    return None


_NOT_CODE = frozenset({
    'lpar', 'rpar', 'comma', 'leading_lines', 'trailing_whitespace',
    'lines_after_decorators', 'header', 'footer', 'semicolon', 'colon',
    'equal', 'dot', 'newline', 'lbracket', 'rbracket', 'lbrace', 'rbrace',
    'first_line', 'empty_lines', 'last_line', 'operator', 'asynchronous',
    'indent', 'default_indent', 'default_newline', 'encoding',
})
_FIELDS: dict[type, tuple[str, ...]] = {}


def _code_fields(node_type: type) -> tuple[str, ...]:
  """The fields of a libcst node type that may contain code."""
  fields = _FIELDS.get(node_type)
  if fields is None:
    fields = tuple(
        f.name for f in dataclasses.fields(node_type)
        if f.name not in _NOT_CODE and not f.name.startswith('whitespace'))
    _FIELDS[node_type] = fields
  return fields


_VISIT: dict[type, tp.Callable[[Collector, tp.Any], None]] = {
    cst.Module: Collector._visit_scope,
    cst.FunctionDef: Collector._visit_function,
    cst.Lambda: Collector._visit_lambda,
    cst.ClassDef: Collector._visit_class,
    cst.For: Collector._visit_loop,
    cst.While: Collector._visit_loop,
    cst.ListComp: Collector._visit_loop,
    cst.SetComp: Collector._visit_loop,
    cst.DictComp: Collector._visit_loop,
    cst.GeneratorExp: Collector._visit_loop,
    cst.Call: Collector._visit_call,
    cst.Name: Collector._visit_name,
    cst.Attribute: Collector._visit_attribute,
    cst.Assign: Collector._visit_assign,
    cst.AugAssign: Collector._visit_target_of,
    cst.AnnAssign: Collector._visit_target_of,
    cst.NamedExpr: Collector._visit_target_of,
    cst.AsName: Collector._visit_as_name,
    cst.CompFor: Collector._visit_comp_for,
    cst.Arg: Collector._visit_arg,
    cst.ImportAlias: Collector._visit_import_alias,
}


def _all_params(params: cst.Parameters) -> list[cst.Param]:
  result = list(params.posonly_params) + list(params.params)
  result += list(params.kwonly_params)
  for star in (params.star_arg, params.star_kwarg):
    if isinstance(star, cst.Param):
      result.append(star)
  return result


def string_value(node: cst.CSTNode) -> str | None:
  """The value of a plain string literal (no f-string), else ``None``."""
  if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
    value = node.evaluated_value
    return value if isinstance(value, str) else None
  return None


# ----------------------------------------------------------------------------
# Facts: what one file contributes to the project-wide decision
# ----------------------------------------------------------------------------

Reason = tuple[str, str]  # (code, detail)


@dataclasses.dataclass
class SowFact:
  """A ``.sow(...)`` or ``.perturb(...)`` call."""

  id: str
  where: Where
  kind: str  # 'sow' or 'perturb'
  name: str | None
  tag: str
  owner: str | None
  key: str  # identifies the module instance that sows
  function: str | None
  mode: str  # 'append' or 'clobber'
  reasons: list[Reason]


@dataclasses.dataclass
class ConsumerFact:
  """One use of a captured State: ``s['n'][0]``, ``s.to_pure_dict()``..."""

  where: Where
  key: str | None
  form: str  # index, value, value_index, contains, bare or opaque
  code: str = ''
  later_keys: tuple[str, ...] = ()
  id: str = ''


@dataclasses.dataclass
class CaptureFact:
  """An ``nnx.capture`` call or a ``m(x)`` + ``nnx.pop(m, ...)`` pair."""

  id: str
  where: Where
  kind: str  # 'capture' or 'pop'
  tags: tuple[str, ...]
  inclusive: bool  # nnx.pop also takes subclasses
  root: str | None
  reasons: list[Reason]
  consumers: list[ConsumerFact]


@dataclasses.dataclass
class OtherFact:
  """Any other use of the legacy API; flagged and possibly blocking."""

  id: str
  where: Where
  code: str
  detail: str
  blocks: str  # 'sows', 'pops' or 'none'


@dataclasses.dataclass
class ClassFact:
  name: str
  bases: tuple[str, ...]
  calls: frozenset[str]


@dataclasses.dataclass
class FileFacts:
  """Everything the project-wide decision needs from one file."""

  path: str
  sows: list[SowFact] = dataclasses.field(default_factory=list)
  captures: list[CaptureFact] = dataclasses.field(default_factory=list)
  others: list[OtherFact] = dataclasses.field(default_factory=list)
  attr_reads: list[tuple[str, Where, str]] = dataclasses.field(
      default_factory=list)
  classes: dict[str, ClassFact] = dataclasses.field(default_factory=dict)
  instantiations: list[tuple[str, str | None, bool]] = dataclasses.field(
      default_factory=list)
  transformed: dict[str, str] = dataclasses.field(default_factory=dict)
  error: str | None = None


@dataclasses.dataclass
class Consumer:
  """A consumer with the nodes needed to rewrite it."""

  fact: ConsumerFact
  node: cst.BaseExpression | None = None  # the expression to replace
  base: cst.BaseExpression | None = None  # the state variable
  index: cst.BaseSlice | None = None  # the ``[i]`` after the value, if any
  index_node: cst.Subscript | None = None


@dataclasses.dataclass
class CaptureSite:
  """A capture with the nodes needed to rewrite it."""

  fact: CaptureFact
  call: cst.Call | None = None  # nnx.capture(...) call
  decorator: cst.Decorator | None = None
  first_statement: cst.SimpleStatementLine | None = None  # pop: y = m(x)
  pop_statement: cst.SimpleStatementLine | None = None
  consumers: list[Consumer] = dataclasses.field(default_factory=list)
  partial: bool = False  # nnx.capture(nnx.Intermediate), applied later


@dataclasses.dataclass
class Analysis:
  """Facts plus the nodes of one parsed document."""

  facts: FileFacts
  modules: list[cst.Module]
  resolver: Resolver
  collector: Collector
  anchors: dict[str, cst.CSTNode] = dataclasses.field(default_factory=dict)
  sow_calls: dict[str, cst.Call] = dataclasses.field(default_factory=dict)
  captures: dict[str, CaptureSite] = dataclasses.field(default_factory=dict)


# ----------------------------------------------------------------------------
# Analysis of one document
# ----------------------------------------------------------------------------

_SOW_PARAMS = ('variable_type', 'name', 'value', 'reduce_fn', 'init_fn')
_PERTURB_PARAMS = ('name', 'value', 'variable_type')
_SUFFIX_METHODS = frozenset({
    'items', 'keys', 'values', 'flat_state', '__iter__', 'filter', 'split',
    'merge', 'to_flat_state',
})
_FILTER_FUNCTIONS = frozenset({
    'StateAxes', 'split', 'state', 'Not', 'All', 'Any', 'pop', 'filter_state',
    'iter_graph', 'graphdef', 'clone', 'split_state', 'merge_state', 'jit',
    'scan', 'vmap', 'pmap', 'remat', 'DiffState', 'grad', 'value_and_grad',
    'PathContains', 'OfType', 'to_flat_state', 'variables',
})


def parse_document(doc: Document) -> list[cst.Module]:
  """Parses every unit; raises ``cst.ParserSyntaxError`` on failure."""
  return [cst.parse_module(unit.code) for unit in doc.units]


def analyze(doc: Document, modules: list[cst.Module],
            with_positions: bool = True) -> Analysis:
  """Finds every legacy site of a parsed document.

  Args:
    doc: the document.
    modules: its parsed units.
    with_positions: compute the line and column of each site (only needed
      to report them).

  Returns:
    The analysis.
  """
  resolver = Resolver(collect_aliases(modules))
  collector = Collector(resolver)
  collector.walk(modules)
  analysis = Analysis(FileFacts(doc.path), modules, resolver, collector)
  finder = _SiteFinder(doc, analysis)
  finder.run(with_positions)
  return analysis


class _SiteFinder:
  """Turns the collected nodes into facts and anchors."""

  def __init__(self, doc: Document, analysis: Analysis):
    self.doc = doc
    self.analysis = analysis
    self.facts = analysis.facts
    self.collector = analysis.collector
    self.resolver = analysis.resolver
    self.parent = analysis.collector.parent
    self.handled: set[cst.CSTNode] = set()
    self._pending: list[tuple[tp.Any, cst.CSTNode, str]] = []
    self._counts: collections.Counter[str] = collections.Counter()

  def run(self, with_positions: bool = True) -> None:
    for call in self.collector.calls:
      self._classify_call(call)
    self._find_classes()
    self._find_other_references()
    self._find_keywords()
    self._find_attribute_reads()
    self.facts.transformed = dict(self.collector.transformed)
    if with_positions:
      self._resolve_positions()

  # -- helpers -----------------------------------------------------------------

  def _new_id(self, prefix: str, anchor: cst.CSTNode) -> str:
    self._counts[prefix] += 1
    site_id = f'{prefix}{self._counts[prefix]}'
    self.analysis.anchors[site_id] = anchor
    return site_id

  def _where_later(self, fact: tp.Any, node: cst.CSTNode, attr='where'):
    self._pending.append((fact, node, attr))
    return None

  def _resolve_positions(self) -> None:
    by_unit: dict[int, list[cst.CSTNode]] = collections.defaultdict(list)
    for _, node, _ in self._pending:
      by_unit[self._unit_of(node)].append(node)
    found: dict[cst.CSTNode, tuple[int, int]] = {}
    for unit, nodes in by_unit.items():
      found.update(positions(self.analysis.modules[unit], nodes))
    for fact, node, attr in self._pending:
      line, col = found.get(node, (1, 1))
      unit = self._unit_of(node)
      first = self.doc.units[unit].first_line
      kind = self.doc.unit_kind
      where = Where(self.doc.path, first + line - 1, col, unit + 1, kind)
      if isinstance(fact, list):
        fact[attr] = where  # type: ignore[call-overload]
      else:
        setattr(fact, attr, where)

  def _unit_of(self, node: cst.CSTNode) -> int:
    while node not in self.collector.context:
      node = self.parent[node]
    return self.collector.context[node].unit

  def _ctx(self, node: cst.CSTNode) -> Context:
    while node not in self.collector.context:
      node = self.parent[node]
    return self.collector.context[node]

  def _code(self, node: cst.CSTNode) -> str:
    return self.analysis.modules[0].code_for_node(node)

  def _other(self, node: cst.CSTNode, code: str, detail: str = '',
             blocks: str = 'none') -> None:
    fact = OtherFact(self._new_id('other', node), None, code, detail, blocks)
    self._where_later(fact, node)
    self.facts.others.append(fact)

  # -- calls -------------------------------------------------------------------

  def _classify_call(self, call: cst.Call) -> None:
    func = call.func
    name = self.resolver.name_of(func)
    if name == 'nnx.capture':
      self._capture(call)
    elif name == 'nnx.pop':
      self._pop(call)
    elif isinstance(func, cst.Attribute) and func.attr.value == 'sow':
      self._sow(call)
    elif isinstance(func, cst.Attribute) and func.attr.value == 'perturb':
      self._perturb(call)
    self._instantiation(call)

  def _instantiation(self, call: cst.Call) -> None:
    if not isinstance(call.func, cst.Name):
      return
    ctx = self.collector.context[call]
    if ctx.owner is not None and ctx.function is not None:
      self.facts.instantiations.append(
          (call.func.value, ctx.owner, ctx.in_loop))

  # -- sow and perturb ---------------------------------------------------------

  def _bind(self, call: cst.Call, params: tuple[str, ...]):
    """Binds the arguments to ``params``; ``*args``/``**kwargs`` skipped."""
    bound: dict[str, cst.BaseExpression] = {}
    for index, arg in enumerate(call.args):
      if arg.star:
        continue
      if arg.keyword is not None:
        bound[arg.keyword.value] = arg.value
      elif index < len(params):
        bound[params[index]] = arg.value
      else:
        return None
    return bound

  def _sow(self, call: cst.Call) -> None:
    bound = self._bind(call, _SOW_PARAMS)
    starred = any(arg.star for arg in call.args)
    if bound is None or not {'variable_type', 'name', 'value'} <= set(bound):
      self._flag_sow_only(call, 'kwargs' if starred else 'sow-args')
      return
    type_node = bound['variable_type']
    if string_value(type_node) is not None:
      self._flag_sow_only(call, 'linen-sow', string_value(type_node))
      return
    tag = self.resolver.family_tag(type_node)
    if tag is None:
      self._flag_sow_only(call, 'unknown-type', self._code(type_node))
      return
    self.handled.add(type_node)
    reasons: list[Reason] = [('kwargs', '')] if starred else []
    mode = _reducer_mode(bound)
    if mode is None:
      mode = 'append'
      reasons.append(('custom-reducer', ''))
    if not self._is_statement(call):
      reasons.append(('sow-result-used', ''))
    self._add_sow(call, 'sow', bound['name'], tag, mode, reasons)

  def _perturb(self, call: cst.Call) -> None:
    bound = self._bind(call, _PERTURB_PARAMS)
    starred = any(arg.star for arg in call.args)
    if bound is None or not {'name', 'value'} <= set(bound):
      if starred:
        self._flag_sow_only(call, 'kwargs')
      return
    tag = 'Perturbation'
    if 'variable_type' in bound:
      type_node = bound['variable_type']
      tag = self.resolver.family_tag(type_node) or self._code(type_node)
      self.handled.add(type_node)
    reasons: list[Reason] = [('kwargs', '')] if starred else []
    self._add_sow(call, 'perturb', bound['name'], tag, 'append', reasons)

  def _flag_sow_only(self, call: cst.Call, code: str, detail: str = ''):
    for arg in call.args:
      self.handled.add(arg.value)
    self._other(call, code, detail)

  def _is_statement(self, call: cst.Call) -> bool:
    expr = self.parent.get(call)
    return isinstance(expr, cst.Expr) and isinstance(
        self.parent.get(expr), cst.SimpleStatementLine)

  def _add_sow(self, call, kind, name_node, tag, mode, reasons) -> None:
    ctx = self.collector.context[call]
    name = self._sow_name(name_node, ctx)
    if name is None:
      reasons.append(('nonliteral-name', self._code(name_node)))
    if ctx.transform is not None:
      reasons.append(('transform', ctx.transform))
    receiver = call.func.value
    function = ctx.function.name.value if ctx.function else None
    if isinstance(receiver, cst.Name) and receiver.value == 'self':
      key = ctx.owner or f'<function {function}>'
    else:
      key = f'{ctx.owner}.{function}:{self._code(receiver)}'
    fact = SowFact(
        self._new_id(kind, call), None, kind, name, tag, ctx.owner, key,
        function, mode, reasons)
    self._where_later(fact, call)
    self.facts.sows.append(fact)
    self.analysis.sow_calls[fact.id] = call

  def _sow_name(self, node: cst.CSTNode, ctx: Context) -> str | None:
    value = string_value(node)
    if value is not None:
      return value
    constants = self.collector.constants
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
      if node.value.value in ('self', 'cls', ctx.owner):
        return constants.get((ctx.owner, node.attr.value))
      return None
    if isinstance(node, cst.Name):
      return constants.get((None, node.value))
    return None

  # -- nnx.capture -------------------------------------------------------------

  def _capture(self, call: cst.Call) -> None:
    positional = [arg for arg in call.args
                  if arg.keyword is None and not arg.star]
    keywords = {arg.keyword.value: arg for arg in call.args if arg.keyword}
    for arg in keywords.values():
      self.handled.add(arg.value)
    if not positional:
      return
    first_tag = self._tag_of(positional[0].value)
    if first_tag is not None:
      fn_node, tag_args = None, positional
    else:
      fn_node, tag_args = positional[0].value, positional[1:]
    tags = tuple(self._tag_of(arg.value) or '?' for arg in tag_args)
    if not tags:
      return
    for arg in tag_args:
      self.handled.add(arg.value)
    reasons = self._capture_reasons(call, tags, keywords)
    site = CaptureSite(
        CaptureFact(self._new_id('capture', call), None, 'capture', tags,
                    False, None, reasons, []),
        call=call, partial=fn_node is None)
    self._where_later(site.fact, call)
    self._capture_usage(site, call, fn_node)
    self.facts.captures.append(site.fact)
    self.analysis.captures[site.fact.id] = site

  def _tag_of(self, node: cst.CSTNode) -> str | None:
    name = self.resolver.name_of(node)
    if name in ('nnx.Intermediate', 'nnx.Perturbation'):
      return name[len('nnx.'):]
    if isinstance(node, cst.Name) and name is None and node.value[:1].isupper():
      return node.value
    return None

  def _capture_reasons(self, call, tags, keywords) -> list[Reason]:
    reasons: list[Reason] = []
    if any(arg.star for arg in call.args):
      reasons.append(('kwargs', ''))
    if 'init' in keywords or 'Perturbation' in tags:
      reasons.append(('perturbation', ''))
    if 'method_outputs' in keywords:
      reasons.append(('method-outputs', ''))
    if len(tags) > 1:
      reasons.append(('several-types', ', '.join(tags)))
    elif tags[0] not in FAMILY:
      reasons.append(('subclass', tags[0]))
    return reasons

  def _capture_usage(self, site, call, fn_node) -> None:
    """Finds the calls of the captured function and their consumers."""
    parent = self.parent.get(call)
    if fn_node is None:  # nnx.capture(nnx.Intermediate) partial form
      if isinstance(parent, cst.Decorator):
        site.decorator = parent
        function = self.parent[parent]
        self._function_uses(site, function)
        return
      if isinstance(parent, cst.Call) and parent.func is call and parent.args:
        fn_node = parent.args[0].value
        self._root_of(site, fn_node)
        self._wrapped_uses(site, parent)
        return
      self._opaque(site, call, 'unknown-result')
      return
    self._root_of(site, fn_node)
    self._wrapped_uses(site, call)

  def _root_of(self, site: CaptureSite, fn_node: cst.CSTNode) -> None:
    if isinstance(fn_node, cst.Attribute):
      fn_node = fn_node.value
    if not isinstance(fn_node, cst.Name):
      return
    binding = self._single_binding(fn_node)
    if isinstance(binding, cst.Param) and binding.annotation is not None:
      annotation = binding.annotation.annotation
      if isinstance(annotation, cst.Name):
        site.fact.root = annotation.value
      return
    assign = self.parent.get(self.parent.get(binding)) if binding else None
    if isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Call):
      func = assign.value.func
      if isinstance(func, cst.Name):
        site.fact.root = func.value

  def _single_binding(self, name: cst.Name) -> cst.CSTNode | None:
    """The one binding of ``name`` in its scope: a Param or an assigned Name."""
    ctx = self._ctx(name)
    scope = ctx.scopes[-1] if ctx.scopes else None
    found = []
    for other in self.collector.names[name.value]:
      if other in self.collector.stores and scope in self._ctx(other).scopes:
        found.append(other)
    if len(found) != 1:
      return None
    parent = self.parent.get(found[0])
    return parent if isinstance(parent, cst.Param) else found[0]

  def _wrapped_uses(self, site: CaptureSite, wrapped: cst.Call) -> None:
    """``wrapped`` evaluates to the capturing function."""
    parent = self.parent.get(wrapped)
    if isinstance(parent, cst.Call) and parent.func is wrapped:
      self._result(site, parent)
      return
    target = self._assigned_name(wrapped)
    if target is None:
      self._opaque(site, wrapped, 'unknown-result')
      return
    self._name_calls(site, target, wrapped)

  def _function_uses(self, site: CaptureSite, function: cst.FunctionDef):
    uses = [
        name for name in self.collector.names[function.name.value]
        if name is not function.name
    ]
    if not uses:
      return
    for name in uses:
      self._call_of(site, name)

  def _name_calls(self, site, target: cst.Name, wrapped) -> None:
    scope = self._ctx(target).scopes[-1]
    for name in self.collector.names[target.value]:
      if name is target or scope not in self._ctx(name).scopes:
        continue
      if name in self.collector.stores:
        self._opaque(site, name, 'escaping-state')
        continue
      self._call_of(site, name)

  def _call_of(self, site: CaptureSite, name: cst.Name) -> None:
    parent = self.parent.get(name)
    if isinstance(parent, cst.Call) and parent.func is name:
      self._result(site, parent)
    else:
      self._opaque(site, name, 'unknown-result')

  def _assigned_name(self, value: cst.CSTNode) -> cst.Name | None:
    assign = self.parent.get(value)
    if (isinstance(assign, cst.Assign) and assign.value is value
        and len(assign.targets) == 1
        and isinstance(assign.targets[0].target, cst.Name)):
      return assign.targets[0].target
    return None

  def _result(self, site: CaptureSite, result: cst.Call) -> None:
    """``result`` evaluates to ``(out, state)``."""
    assign = self.parent.get(result)
    if not (isinstance(assign, cst.Assign) and assign.value is result
            and len(assign.targets) == 1):
      self._opaque(site, result, 'unknown-result')
      return
    target = assign.targets[0].target
    if not (isinstance(target, (cst.Tuple, cst.List))
            and len(target.elements) == 2
            and not any(isinstance(e, cst.StarredElement)
                        for e in target.elements)):
      self._opaque(site, result, 'unknown-result')
      return
    self._state_uses(site, target.elements[1].value)

  def _state_uses(self, site: CaptureSite, state: cst.BaseExpression):
    if isinstance(state, cst.Name) and state.value == '_':
      return
    if not isinstance(state, cst.Name):
      self._opaque(site, state, 'escaping-state')
      return
    scope = self._ctx(state).scopes[-1]
    for name in self.collector.names[state.value]:
      if name is state or scope not in self._ctx(name).scopes:
        continue
      if name in self.collector.stores:
        self._opaque(site, name, 'escaping-state')
        continue
      self._consumer(site, name)

  def _opaque(self, site, node, code: str) -> None:
    fact = ConsumerFact(None, None, 'opaque', code)
    fact.id = self._new_id('use', node)
    self._where_later(fact, node)
    site.fact.consumers.append(fact)
    site.consumers.append(Consumer(fact))

  # -- consumers of a captured state -------------------------------------------

  def _consumer(self, site: CaptureSite, name: cst.Name) -> None:
    chain, top = self._chain(name)
    if not chain:
      self._bare_consumer(site, name, top)
      return
    kind, first, _ = chain[0]
    if kind == 'attr' and self._is_method_call(chain, top):
      code = self._method_code(first)
      self._opaque(site, name, code)
      return
    if kind not in ('key', 'attr'):
      self._opaque(site, name, 'nested-consumer')
      return
    later = tuple(value for kind_, value, _ in chain[1:]
                  if kind_ in ('key', 'attr') and value != 'value')
    form, node, index = self._form(chain, name)
    fact = ConsumerFact(None, first, form, '', later)
    fact.id = self._new_id('use', name)
    self._where_later(fact, name)
    site.fact.consumers.append(fact)
    index_slice = index.slice[0].slice if index is not None else None
    site.consumers.append(Consumer(fact, node, name, index_slice, index))

  def _chain(self, name: cst.Name):
    """The subscripts and attributes applied to ``name``, innermost first.

    Returns ``(chain, top)``: ``chain`` holds ``(kind, value, node)`` with
    kind ``key`` (a string subscript), ``index`` (any other subscript) or
    ``attr``; ``top`` is the outermost node of the chain.
    """
    chain: list[tuple[str, tp.Any, cst.CSTNode]] = []
    node: cst.CSTNode = name
    while True:
      parent = self.parent.get(node)
      if isinstance(parent, cst.Subscript) and parent.value is node:
        key = _subscript_key(parent)
        kind = 'key' if isinstance(key, str) else 'index'
        chain.append((kind, key, parent))
      elif isinstance(parent, cst.Attribute) and parent.value is node:
        chain.append(('attr', parent.attr.value, parent))
      else:
        return chain, node
      node = parent

  def _is_method_call(self, chain, top) -> bool:
    parent = self.parent.get(top)
    return len(chain) == 1 and isinstance(parent, cst.Call) and (
        parent.func is top)

  @staticmethod
  def _method_code(method: str) -> str:
    if method == 'to_pure_dict':
      return 'to-pure-dict'
    if method in ('to_flat_state', 'flat_state'):
      return 'to-flat-state'
    if method in _SUFFIX_METHODS:
      return 'suffix-consumer'
    return 'escaping-state'

  def _form(self, chain, name):
    """Classifies ``s['n']...`` into a form, the node to replace and index."""
    del name
    kinds = [(kind, value) for kind, value, _ in chain[1:]]
    nodes = [node for _, _, node in chain]
    if kinds and kinds[0] == ('attr', 'value'):
      if len(kinds) > 1 and kinds[1][0] in ('index', 'key'):
        return 'value_index', nodes[2], nodes[2]
      return 'value', nodes[1], None
    if kinds and kinds[0][0] in ('index', 'key'):
      return 'index', nodes[1], nodes[1]
    return 'bare', nodes[0], None

  def _bare_consumer(self, site, name: cst.Name, top) -> None:
    parent = self.parent.get(top)
    if isinstance(parent, cst.ComparisonTarget) and isinstance(
        parent.operator, (cst.In, cst.NotIn)):
      comparison = self.parent.get(parent)
      key = string_value(comparison.left)
      if key is not None:
        fact = ConsumerFact(None, key, 'contains')
        fact.id = self._new_id('use', name)
        self._where_later(fact, name)
        site.fact.consumers.append(fact)
        site.consumers.append(Consumer(fact))
        return
    code = 'escaping-state'
    if isinstance(parent, cst.Arg):
      call = self.parent.get(parent)
      called = self.resolver.name_of(call.func) if isinstance(
          call, cst.Call) else None
      if called == 'nnx.to_flat_state':
        code = 'to-flat-state'
      elif called in TREE_FUNCTIONS:
        code = 'tree-leaves'
    elif isinstance(parent, (cst.For, cst.CompFor)):
      code = 'suffix-consumer'
    self._opaque(site, name, code)

  # -- nnx.pop -----------------------------------------------------------------

  def _pop(self, call: cst.Call) -> None:
    tags = [self._tag_of(arg.value) for arg in call.args[1:]]
    if not any(tag in FAMILY or tag is not None for tag in tags):
      return
    for arg in call.args[1:]:
      self.handled.add(arg.value)
    statement, target = self._pop_statement(call)
    if statement is None or len(call.args) != 2 or call.args[0].keyword:
      self._other(call, 'pop-form', blocks='sows')
      return
    site = CaptureSite(
        CaptureFact(self._new_id('pop', call), None, 'pop', (tags[0] or '?',),
                    True, None, [], []),
        pop_statement=statement)
    self._where_later(site.fact, call)
    if tags[0] == 'Perturbation':
      site.fact.reasons.append(('perturbation', ''))
    elif tags[0] not in FAMILY:
      site.fact.reasons.append(('subclass', tags[0] or '?'))
    obj = call.args[0].value
    first = self._previous_call_statement(statement, obj)
    if first is None:
      site.fact.reasons.append(('pop-not-adjacent', ''))
    else:
      site.first_statement = first
      self._check_earlier_calls(site, first, obj)
    self._root_of(site, obj)
    self._state_uses(site, target)
    self.facts.captures.append(site.fact)
    self.analysis.captures[site.fact.id] = site

  def _pop_statement(self, call: cst.Call):
    assign = self.parent.get(call)
    if not (isinstance(assign, cst.Assign) and assign.value is call
            and len(assign.targets) == 1):
      return None, None
    line = self.parent.get(assign)
    if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
      return None, None
    return line, assign.targets[0].target

  def _previous_call_statement(self, statement, obj):
    block = self.parent.get(statement)
    body = list(getattr(block, 'body', ()))
    index = next(i for i, s in enumerate(body) if s is statement)
    if index == 0:
      return None
    previous = body[index - 1]
    call = _statement_call(previous)
    if call is None or self._callee_object(call) != self._code(obj):
      return None
    return previous

  def _callee_object(self, call: cst.Call) -> str | None:
    func = call.func
    if isinstance(func, cst.Attribute):
      return self._code(func.value)
    return self._code(func)

  def _check_earlier_calls(self, site, first, obj) -> None:
    text = self._code(obj)
    own_call = _statement_call(first)
    scope = self._ctx(first).scopes[-1]
    for call in self.collector.calls:
      if call is own_call or scope not in self.collector.context[call].scopes:
        continue
      if self._callee_object(call) != text and self._code(call.func) != text:
        continue
      if self._is_paired(call):
        continue
      if self._precedes(call, own_call):
        site.fact.reasons.append(('earlier-call', ''))
        return

  def _is_paired(self, call: cst.Call) -> bool:
    statement = self.parent.get(self.parent.get(call))
    if isinstance(statement, cst.Assign):
      statement = self.parent.get(statement)
    block = self.parent.get(statement)
    body = list(getattr(block, 'body', ()))
    for i, item in enumerate(body[:-1]):
      if item is statement:
        nxt = body[i + 1]
        return 'pop(' in self._code(nxt)
    return False

  def _precedes(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    calls = self.collector.calls
    return calls.index(first) < calls.index(second)

  # -- other references --------------------------------------------------------

  def _find_classes(self) -> None:
    for name, node in self.collector.classes.items():
      bases = tuple(
          dotted(base.value) or '' for base in node.bases)
      calls = frozenset(
          call.func.value for call in self.collector.calls
          if isinstance(call.func, cst.Name)
          and self._ctx(call).owner == name)
      self.facts.classes[name] = ClassFact(
          name, tuple(b.rsplit('.', 1)[-1] for b in bases), calls)

  def _find_other_references(self) -> None:
    for node in self._family_references():
      if node in self.handled or self._inside_handled(node):
        continue
      self._classify_reference(node)

  def _family_references(self):
    for local in ('Intermediate', 'Perturbation'):
      for name in self.collector.names.get(local, ()):
        if isinstance(self.parent.get(name), cst.ImportAlias):
          continue
        if self.resolver.family_tag(name) in FAMILY:
          yield name
    for attribute in self.collector.attributes:
      if attribute.attr.value in FAMILY and self.resolver.family_tag(
          attribute) in FAMILY:
        yield attribute

  def _inside_handled(self, node: cst.CSTNode) -> bool:
    parent = self.parent.get(node)
    while isinstance(parent, cst.Attribute):
      if parent in self.handled:
        return True
      parent = self.parent.get(parent)
    return False

  def _classify_reference(self, node: cst.CSTNode) -> None:
    parent = self.parent.get(node)
    if isinstance(parent, cst.Arg) and isinstance(
        self.parent.get(parent), cst.ClassDef):
      self._other(node, 'subclass', self._class_name(parent))
      return
    if isinstance(parent, cst.Call) and parent.func is node:
      self._other(node, 'direct-intermediate', blocks='pops')
      return
    call = self._enclosing_call(node)
    detail = 'other use'
    if call is not None:
      called = self.resolver.name_of(call.func) or dotted(call.func) or ''
      detail = called
    if isinstance(parent, cst.Attribute):
      return
    self._other(node, 'filter-use', detail, blocks='sows')

  def _class_name(self, arg: cst.Arg) -> str:
    return self.parent[arg].name.value

  def _enclosing_call(self, node: cst.CSTNode) -> cst.Call | None:
    while node is not None and not isinstance(node, cst.BaseStatement):
      node = self.parent.get(node)
      if isinstance(node, cst.Call):
        return node
    return None

  def _find_keywords(self) -> None:
    for arg in self.collector.keywords:
      if arg.keyword.value == 'capture_intermediates':
        self._other(arg, 'capture-intermediates')

  def _find_attribute_reads(self) -> None:
    for attribute in self.collector.attributes:
      parent = self.parent.get(attribute)
      follows = (
          isinstance(parent, cst.Subscript) and parent.value is attribute
      ) or (
          isinstance(parent, cst.Attribute) and parent.value is attribute
          and parent.attr.value in ('value', 'get_value')
      )
      if not follows or attribute.attr.value in FAMILY:
        continue
      if self._is_consumer_of_state(attribute):
        continue
      site_id = self._new_id('attr', attribute)
      entry = [attribute.attr.value, None, site_id]
      self._where_later(entry, attribute, 1)
      self.facts.attr_reads.append(entry)  # type: ignore[arg-type]

  def _is_consumer_of_state(self, attribute: cst.Attribute) -> bool:
    return isinstance(attribute.value, cst.Name) and any(
        consumer.base is attribute.value
        for site in self.analysis.captures.values()
        for consumer in site.consumers)


def _subscript_key(node: cst.Subscript):
  if len(node.slice) != 1:
    return None
  element = node.slice[0].slice
  if isinstance(element, cst.Index):
    value = string_value(element.value)
    if value is not None:
      return value
    return element.value
  return element


def _statement_call(statement: cst.CSTNode) -> cst.Call | None:
  """The call of ``m(x)``, ``_ = m(x)`` or ``y = m(x)`` on its own line."""
  if not (isinstance(statement, cst.SimpleStatementLine)
          and len(statement.body) == 1):
    return None
  small = statement.body[0]
  if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
    return small.value
  if (isinstance(small, cst.Assign) and len(small.targets) == 1
      and isinstance(small.value, cst.Call)):
    return small.value
  return None


def _reducer_mode(bound: dict[str, cst.BaseExpression]) -> str | None:
  """'append' for the default reducer, 'clobber' for keep-last, else None."""
  reduce_fn = bound.get('reduce_fn')
  if reduce_fn is None:
    return None if 'init_fn' in bound else 'append'
  if _is_keep_last(reduce_fn):
    return 'clobber'
  return None


def _is_keep_last(node: cst.CSTNode) -> bool:
  if not isinstance(node, cst.Lambda):
    return False
  params = node.params
  if (params.star_arg is not cst.MaybeSentinel.DEFAULT
      and params.star_arg is not None) or params.kwonly_params:
    return False
  plain = list(params.posonly_params) + list(params.params)
  if len(plain) != 2 or any(p.default is not None for p in plain):
    return False
  return (isinstance(node.body, cst.Name)
          and node.body.value == plain[1].name.value)


# ----------------------------------------------------------------------------
# Project-wide decision
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class FileDecision:
  """What to do in one file: the sites to rewrite and to flag."""

  rewrite: set[str] = dataclasses.field(default_factory=set)
  flags: list[tuple[str, Flag]] = dataclasses.field(default_factory=list)
  modes: dict[str, str] = dataclasses.field(default_factory=dict)


class Project:
  """Indexes the facts of every file given in one run."""

  def __init__(self, files: list[FileFacts]):
    self.files = files
    self.sows = [sow for facts in files for sow in facts.sows]
    self.captures = [cap for facts in files for cap in facts.captures]
    self.others = [other for facts in files for other in facts.others]
    self.classes: dict[str, ClassFact] = {}
    self.transformed: dict[str, str] = {}
    self.instances: collections.Counter[str] = collections.Counter()
    self.in_loop: set[str] = set()
    for facts in files:
      self.classes.update(facts.classes)
      self.transformed.update(facts.transformed)
      for callee, _, in_loop in facts.instantiations:
        self.instances[callee] += 1
        if in_loop:
          self.in_loop.add(callee)
    self._reachable: dict[str, set[str]] = {}
    self.subclasses = self._subclasses()
    self.sow_names = {sow.name for sow in self.sows if sow.name is not None}
    self.transformed_classes = self._closure(
        {name for name in self.transformed if name in self.classes})

  def _subclasses(self) -> dict[str, str]:
    """Maps each Intermediate subclass defined in the project to its base."""
    parents: dict[str, str] = {}
    changed = True
    while changed:
      changed = False
      for name, fact in self.classes.items():
        if name in parents:
          continue
        for base in fact.bases:
          if base in FAMILY or base in parents:
            parents[name] = base
            changed = True
            break
    return parents

  def ancestors(self, tag: str) -> list[str]:
    chain = [tag]
    while chain[-1] in self.subclasses:
      chain.append(self.subclasses[chain[-1]])
    if chain[-1] == 'Perturbation':
      chain.append('Intermediate')
    return chain

  def is_family(self, tag: str) -> bool:
    return tag in FAMILY or tag in self.subclasses

  def _closure(self, roots: set[str]) -> set[str]:
    """Classes reachable from ``roots`` as submodules or base classes."""
    seen, todo = set(), list(roots)
    while todo:
      name = todo.pop()
      if name in seen or name not in self.classes:
        continue
      seen.add(name)
      fact = self.classes[name]
      todo.extend(fact.bases)
      todo.extend(call for call in fact.calls if call in self.classes)
    return seen

  def reachable(self, root: str | None) -> set[str] | None:
    if root is None or root not in self.classes:
      return None
    if root not in self._reachable:
      self._reachable[root] = self._closure({root})
    return self._reachable[root]

  def visible(self, cap: CaptureFact, sow: SowFact) -> bool:
    """Whether ``cap`` may collect what ``sow`` stores."""
    if cap.inclusive:
      seen = bool(set(self.ancestors(sow.tag)) & set(cap.tags))
    else:
      seen = sow.tag in cap.tags
    if not seen:
      return False
    reachable = self.reachable(cap.root)
    return reachable is None or sow.owner is None or sow.owner in reachable

  def multi_instance(self) -> dict[str, str]:
    """Names sown by several module instances, with a short explanation."""
    keys: dict[str, set[str]] = collections.defaultdict(set)
    owners: dict[str, set[str]] = collections.defaultdict(set)
    for sow in self.sows:
      if sow.name is not None:
        keys[sow.name].add(sow.key)
        if sow.owner:
          owners[sow.name].add(sow.owner)
    result = {}
    for name, name_keys in keys.items():
      if len(name_keys) > 1:
        result[name] = 'sown at ' + ', '.join(sorted(name_keys))
        continue
      for owner in owners[name]:
        if self.instances[owner] > 1 or owner in self.in_loop:
          result[name] = f'{owner} is instantiated several times'
    return result


def decide(files: list[FileFacts], target: str) -> dict[str, FileDecision]:
  """Decides, for every file, which sites to rewrite and which to flag."""
  project = Project(files)
  if target == 'capture':
    return _decide_capture(project)
  return _Functional(project).decide()


def _decision_for(decisions, where: Where) -> FileDecision:
  return decisions.setdefault(where.path, FileDecision())


def _flag(decisions, site_id: str, where: Where, reason: Reason) -> None:
  """Records a flag; details of the same code at one site are merged."""
  entries = _decision_for(decisions, where).flags
  code, detail = reason
  detail = _relative(detail, where.path)
  for index, (other_id, flag) in enumerate(entries):
    if other_id == site_id and flag.code == code:
      details = flag.detail.split('; ') if flag.detail else []
      if detail and detail not in details:
        details.append(detail)
        entries[index] = (site_id, Flag(where, code, '; '.join(details)))
      return
  entries.append((site_id, Flag(where, code, detail)))


def _at(where: Where) -> str:
  return f'{where.path}:{where.line}'


def _relative(detail: str, path: str) -> str:
  """Shortens ``path:line`` to ``line N`` when it is the flagged file."""
  prefix = f'{path}:'
  if detail.startswith(prefix) and detail[len(prefix):].isdigit():
    return 'line ' + detail[len(prefix):]
  return detail


def _decide_capture(project: Project) -> dict[str, FileDecision]:
  """``--target=capture``: ``m(x)`` + ``nnx.pop`` -> ``nnx.capture``."""
  decisions: dict[str, FileDecision] = {}
  directs = [o for o in project.others if o.code == 'direct-intermediate']
  has_perturb = any(sow.kind == 'perturb' for sow in project.sows)
  for other in project.others:
    if other.code in ('pop-form', 'direct-intermediate', 'subclass'):
      _flag(decisions, other.id, other.where, (other.code, other.detail))
  for cap in project.captures:
    if cap.kind != 'pop':
      continue
    reasons = [r for r in cap.reasons
               if r[0] in ('pop-not-adjacent', 'earlier-call')]
    tag = cap.tags[0]
    if not project.is_family(tag):
      continue
    below = [name for name in project.subclasses
             if tag in project.ancestors(name)[1:]]
    if below:
      reasons.append(('subclass', ', '.join(sorted(below))))
    if tag == 'Intermediate' and has_perturb:
      reasons.append(('perturbation', 'nnx.pop also collects perturbations'))
    if directs:
      reasons.append(('direct-intermediate', _at(directs[0].where)))
    for reason in reasons:
      _flag(decisions, cap.id, cap.where, reason)
    if not reasons:
      _decision_for(decisions, cap.where).rewrite.add(cap.id)
  _flag_attribute_reads(project, decisions)
  return decisions


def _flag_attribute_reads(project, decisions) -> set[str]:
  names = set()
  for facts in project.files:
    for attr, where, site_id in facts.attr_reads:
      if attr in project.sow_names:
        names.add(attr)
        _flag(decisions, site_id, where, ('attribute-read', attr))
  return names


class _Functional:
  """``--target=functional``: the fixpoint linking sows and consumers."""

  def __init__(self, project: Project):
    self.project = project
    self.decisions: dict[str, FileDecision] = {}
    self.blocked_sows: dict[str, list[Reason]] = {}
    self.blocked_caps: dict[str, list[Reason]] = {}
    self.reads: dict[str, set[str] | None] = {}
    self.sows = {sow.id + sow.where.path: sow for sow in project.sows}
    self.caps = [cap for cap in project.captures
                 if any(project.is_family(tag) for tag in cap.tags)]

  def decide(self) -> dict[str, FileDecision]:
    self.visible = {
        cap.id + cap.where.path: [
            sow for sow in self.project.sows if self.project.visible(cap, sow)]
        for cap in self.caps}
    self._sow_reasons()
    self._capture_reasons()
    self._other_reasons()
    self._propagate()
    self._emit()
    return self.decisions

  def _block_sow(self, sow: SowFact, reason: Reason) -> bool:
    reasons = self.blocked_sows.setdefault(sow.id + sow.where.path, [])
    if reason in reasons:
      return False
    reasons.append(reason)
    return True

  def _block_cap(self, cap: CaptureFact, reason: Reason) -> bool:
    reasons = self.blocked_caps.setdefault(cap.id + cap.where.path, [])
    if reason in reasons:
      return False
    reasons.append(reason)
    return True

  def _sow_reasons(self) -> None:
    project = self.project
    multi = project.multi_instance()
    attr_names = _flag_attribute_reads(project, self.decisions)
    for sow in project.sows:
      for reason in sow.reasons:
        self._block_sow(sow, reason)
      expected = 'Intermediate' if sow.kind == 'sow' else 'Perturbation'
      if sow.tag != expected:
        code = 'subclass' if project.is_family(sow.tag) else 'unknown-type'
        self._block_sow(sow, (code, sow.tag))
      transform = self._transform_of(sow)
      if transform:
        self._block_sow(sow, ('transform', transform))
      if sow.name in multi:
        self._block_sow(sow, ('multi-instance', multi[sow.name]))
      if sow.name in attr_names:
        self._block_sow(sow, ('attribute-read', sow.name))

  def _transform_of(self, sow: SowFact) -> str | None:
    project = self.project
    if sow.owner in project.transformed_classes:
      for name, transform in project.transformed.items():
        if name in project.classes and sow.owner in project.reachable(name):
          return f'{transform} over {name}'
    if sow.function in project.transformed:
      return project.transformed[sow.function]
    return None

  def _capture_reasons(self) -> None:
    for cap in self.caps:
      key = cap.id + cap.where.path
      for reason in cap.reasons:
        self._block_cap(cap, reason)
      if cap.reasons:  # blocked anyway: its consumers do not matter
        self.reads[key] = None
      else:
        self.reads[key] = self._consumer_reasons(cap)
      visible = self.visible[key]
      if not visible:
        self._block_cap(cap, ('no-sow-found', ''))
      for sow in visible:
        if sow.kind == 'perturb' and 'Perturbation' not in cap.tags:
          self._block_cap(cap, ('perturbation', _at(sow.where)))
        elif sow.tag not in cap.tags:
          self._block_cap(cap, ('subclass', sow.tag))

  def _consumer_reasons(self, cap: CaptureFact) -> set[str] | None:
    """Blocks ``cap`` for each consumer it cannot rewrite; returns reads."""
    reads: set[str] | None = set()
    for consumer in cap.consumers:
      reason, names = self._consumer_reason(consumer)
      if reason is not None:
        if reason[0] == 'no-sow-found':
          self._block_cap(cap, reason)
        else:
          self._block_cap(cap, (reason[0], f'line {consumer.where.line}'))
          if (consumer.where.line, consumer.where.unit) != (
              cap.where.line, cap.where.unit):
            _flag(self.decisions, consumer.id, consumer.where, reason)
      if names is None or reads is None:
        reads = None
      else:
        reads |= names
    return reads

  def _consumer_reason(self, consumer: ConsumerFact):
    """Returns ``(reason or None, names read or None for all)``."""
    names = self.project.sow_names
    if consumer.form == 'opaque':
      return (consumer.code, ''), None
    if consumer.key in names:
      if consumer.form == 'bare':
        return ('variable-use', consumer.key), {consumer.key}
      return None, {consumer.key}
    if not consumer.later_keys and consumer.form != 'bare':
      return ('no-sow-found', repr(consumer.key)), {consumer.key}
    path = '/'.join((consumer.key or '?',) + consumer.later_keys)
    known = set(consumer.later_keys) & names
    return ('nested-consumer', path), (known or None)

  def _other_reasons(self) -> None:
    for other in self.project.others:
      _flag(self.decisions, other.id, other.where, (other.code, other.detail))
      if other.blocks == 'pops':
        for cap in self.caps:
          if cap.kind == 'pop':
            self._block_cap(cap, (other.code, _at(other.where)))
      if other.blocks == 'sows':
        for sow in self.project.sows:
          self._block_sow(sow, ('legacy-consumer', _at(other.where)))

  def _propagate(self) -> None:
    changed = True
    while changed:
      changed = False
      for cap in self.caps:
        key = cap.id + cap.where.path
        visible = self.visible[key]
        if key in self.blocked_caps:
          reads = self.reads[key]
          for sow in visible:
            if reads is None or sow.name is None or sow.name in reads:
              changed |= self._block_sow(
                  sow, ('legacy-consumer', _at(cap.where)))
        else:
          for sow in visible:
            if sow.id + sow.where.path in self.blocked_sows:
              changed |= self._block_cap(
                  cap, ('legacy-sow-reached', _at(sow.where)))
              break

  def _emit(self) -> None:
    modes: dict[str, str] = {}
    for sow in self.project.sows:
      key = sow.id + sow.where.path
      if key in self.blocked_sows:
        for reason in self.blocked_sows[key]:
          _flag(self.decisions, sow.id, sow.where, reason)
      else:
        _decision_for(self.decisions, sow.where).rewrite.add(sow.id)
        if sow.name is not None:
          modes[sow.name] = sow.mode
    for cap in self.caps:
      key = cap.id + cap.where.path
      if key in self.blocked_caps:
        for reason in self.blocked_caps[key]:
          _flag(self.decisions, cap.id, cap.where, reason)
      else:
        _decision_for(self.decisions, cap.where).rewrite.add(cap.id)
    for decision in self.decisions.values():
      decision.modes = modes


# ----------------------------------------------------------------------------
# Rewriting
# ----------------------------------------------------------------------------

TODO_PREFIX = '# TODO(migrate_sow): '
_NO_SPACE = cst.SimpleWhitespace('')
_API_NAMES = ('sow', 'capture', 'perturb')
Edit = tp.Callable[[tp.Any], tp.Any]


class _Rewriter(cst.CSTTransformer):
  """Applies a set of edits, keyed by original node, bottom-up.

  Only the ancestors of edited nodes are descended into: libcst rebuilds
  every node it visits, which would dominate the run time otherwise.
  """

  def __init__(self, edits: dict[cst.CSTNode, list[Edit]], parent):
    super().__init__()
    self.edits = edits
    self.paths: set[cst.CSTNode] = set()
    for node in edits:
      while node is not None and node not in self.paths:
        self.paths.add(node)
        node = parent.get(node)

  def on_visit(self, node: cst.CSTNode) -> bool:
    return node in self.paths

  def on_leave(self, original_node, updated_node):
    for edit in self.edits.get(original_node, ()):
      updated_node = edit(updated_node)
      if isinstance(updated_node, cst.RemovalSentinel):
        break
    return updated_node


def _keyword_arg(keyword: str, value: cst.BaseExpression) -> cst.Arg:
  return cst.Arg(
      value=value, keyword=cst.Name(keyword),
      equal=cst.AssignEqual(whitespace_before=_NO_SPACE,
                            whitespace_after=_NO_SPACE))


def _reshape_args(old: tp.Sequence[cst.Arg],
                  new: list[tuple[cst.Arg, int]]) -> list[cst.Arg]:
  """Lays ``new`` out like ``old``: commas and line breaks by position.

  Args:
    old: the arguments of the original call.
    new: the new arguments, each with the index of the old argument it comes
      from; a comment after that argument moves along with it.

  Returns:
    The new arguments.
  """
  result = []
  last = len(new) - 1
  for position, (arg, source) in enumerate(new):
    template = old[min(position, len(old) - 1)]
    comma = old[-1].comma if position == last else template.comma
    if position != last and comma is cst.MaybeSentinel.DEFAULT:
      comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(' '))
    comma = _with_comment(comma, _comment_of(old[source].comma))
    result.append(arg.with_changes(
        comma=comma, whitespace_after_arg=template.whitespace_after_arg))
  return result


def _comment_of(comma) -> cst.Comment | None:
  if isinstance(comma, cst.Comma) and isinstance(
      comma.whitespace_after, cst.ParenthesizedWhitespace):
    return comma.whitespace_after.first_line.comment
  return None


def _with_comment(comma, comment: cst.Comment | None):
  if not isinstance(comma, cst.Comma) or not isinstance(
      comma.whitespace_after, cst.ParenthesizedWhitespace):
    return comma
  first = comma.whitespace_after.first_line
  spacing = first.whitespace if first.comment else cst.SimpleWhitespace('  ')
  if comment is None:
    spacing = cst.SimpleWhitespace('')
  first = first.with_changes(comment=comment, whitespace=spacing)
  return comma.with_changes(
      whitespace_after=comma.whitespace_after.with_changes(first_line=first))


def _call_with(call: cst.Call, func: str,
               args: list[tuple[cst.Arg, int]]) -> cst.Call:
  return call.with_changes(
      func=cst.Name(func), args=_reshape_args(call.args, args))


def _bound_values(call: cst.Call, params: tuple[str, ...]):
  """Maps parameter names to ``(value, index of the argument)``."""
  bound = {}
  for index, arg in enumerate(call.args):
    key = arg.keyword.value if arg.keyword else params[index]
    bound[key] = (arg.value, index)
  return bound


def sow_edit(names: dict[str, str], mode: str) -> Edit:
  """``recv.sow(T, name, value)`` -> ``sow(value, name=name)``."""
  def edit(call: cst.Call) -> cst.Call:
    bound = _bound_values(call, _SOW_PARAMS)
    value, value_at = bound['value']
    name, name_at = bound['name']
    args = [(cst.Arg(value), value_at),
            (_keyword_arg('name', name), name_at)]
    if mode == 'clobber':
      args.append((_keyword_arg('mode', cst.SimpleString("'clobber'")),
                   bound['reduce_fn'][1]))
    return _call_with(call, names['sow'], args)
  return edit


def perturb_edit(names: dict[str, str]) -> Edit:
  """``recv.perturb(name, value)`` -> ``perturb(value, name=name)``."""
  def edit(call: cst.Call) -> cst.Call:
    bound = _bound_values(call, _PERTURB_PARAMS)
    value, value_at = bound['value']
    name, name_at = bound['name']
    args = [(cst.Arg(value), value_at), (_keyword_arg('name', name), name_at)]
    return _call_with(call, names['perturb'], args)
  return edit


def capture_edit(names: dict[str, str], partial: bool) -> Edit:
  """``nnx.capture(f, T)`` -> ``capture(f)``, ``nnx.capture(T)`` -> ``capture``.
  """
  def edit(call: cst.Call) -> cst.BaseExpression:
    if partial:
      return cst.Name(names['capture'])
    first = call.args[0].with_changes(comma=call.args[-1].comma)
    if first.comma is not cst.MaybeSentinel.DEFAULT and len(call.args) > 1:
      first = first.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(func=cst.Name(names['capture']), args=[first])
  return edit


def pop_edits(site: CaptureSite, wrap: tp.Callable[[cst.Call], cst.Call]):
  """``y = m(x)`` + ``s = nnx.pop(m, T)`` -> ``y, s = wrap(m)(x)``."""
  pop_line = site.pop_statement
  pop_assign = pop_line.body[0]
  state = pop_assign.targets[0].target
  comments = [line for line in pop_line.leading_lines if line.comment]

  def combine(line: cst.SimpleStatementLine) -> cst.SimpleStatementLine:
    small = line.body[0]
    call = small.value
    if isinstance(small, cst.Assign):
      out = small.targets[0].target
      if isinstance(out, cst.Tuple) and not out.lpar:
        out = out.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    else:
      out = cst.Name('_')
    target = cst.Tuple(
        [cst.Element(out, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(
            ' '))), cst.Element(state)], lpar=[], rpar=[])
    new_call = call.with_changes(func=wrap(call.func))
    assign = cst.Assign([cst.AssignTarget(target)], new_call)
    trailing = line.trailing_whitespace
    if not trailing.comment and pop_line.trailing_whitespace.comment:
      trailing = pop_line.trailing_whitespace
    return line.with_changes(
        body=[assign], leading_lines=[*line.leading_lines, *comments],
        trailing_whitespace=trailing)

  def remove(_):
    return cst.RemoveFromParent()

  return {site.first_statement: [combine], pop_line: [remove]}


def consumer_edit(consumer: Consumer, mode: str) -> tuple[cst.CSTNode, Edit]:
  """Adjusts ``s['n'].value[0]``, ``s.n[0]``... to the functional result."""
  fact = consumer.fact
  key_node = _key_node(consumer)

  def keyed():
    if isinstance(key_node, cst.Subscript):
      return key_node.with_changes(value=consumer.base)
    return cst.Subscript(consumer.base, [cst.SubscriptElement(
        cst.Index(cst.SimpleString(_quote(fact.key))))])

  def first(expr):
    if mode != 'clobber':
      return expr
    return cst.Subscript(expr, [cst.SubscriptElement(
        cst.Index(cst.Integer('0')))])

  def edit(_):
    if fact.form == 'value':
      return first(keyed())
    assert consumer.index_node is not None
    return consumer.index_node.with_changes(value=first(keyed()))

  return consumer.node, edit


def _key_node(consumer: Consumer) -> cst.CSTNode:
  node = consumer.node
  while True:
    inner = node.value  # type: ignore[union-attr]
    if inner is consumer.base:
      return node
    node = inner


def _quote(text: str) -> str:
  return repr(text) if "'" not in text else json.dumps(text)


def _needs_edit(consumer: Consumer, mode: str) -> bool:
  if consumer.fact.form in ('value', 'value_index'):
    return True
  if consumer.fact.form != 'index':
    return False
  return mode == 'clobber' or not isinstance(_key_node(consumer),
                                             cst.Subscript)


def annotate_edit(messages: list[str]) -> Edit:
  """Adds ``# TODO(migrate_sow): ...`` lines above a statement, once.

  A reason already noted above the statement (same code, whatever its
  details, which may hold line numbers that the notes themselves shift) is
  not noted again, so a second run changes nothing.

  Args:
    messages: ``'code: reason (details)'`` texts.

  Returns:
    An edit for a statement or decorator.
  """
  def edit(node):
    lines = list(node.leading_lines)
    present = _noted_codes(lines)
    for message in messages:
      code = message.split(':', 1)[0]
      if code not in present:
        lines.append(cst.EmptyLine(comment=cst.Comment(TODO_PREFIX + message)))
        present.add(code)
    return node.with_changes(leading_lines=lines)
  return edit


def _noted_codes(lines) -> set[str]:
  codes = set()
  for line in lines:
    if line.comment and line.comment.value.startswith(TODO_PREFIX):
      codes.add(line.comment.value[len(TODO_PREFIX):].split(':', 1)[0])
  return codes


def _annotation_anchor(node: cst.CSTNode, parent) -> cst.CSTNode:
  while not isinstance(node, (cst.BaseStatement, cst.Decorator)):
    node = parent[node]
  return node


def api_names(analysis: Analysis,
              unused: set[str]) -> dict[str, str]:
  """Local names for ``sow``/``capture``/``perturb``, avoiding clashes.

  Args:
    analysis: the analysed file.
    unused: local names whose every use the rewrite removes.

  Returns:
    A mapping from each API name to the local name to use.
  """
  result = {}
  for api in _API_NAMES:
    clash = False
    for name in analysis.collector.names.get(api, ()):
      if analysis.resolver.name_of(name) == f'sow.{api}':
        continue
      if api in unused:
        continue
      clash = True
    result[api] = f'functional_{api}' if clash else api
  return result


class FileRewrite:
  """Applies one file's decision to its parsed units."""

  def __init__(self, doc: Document, analysis: Analysis,
               decision: FileDecision, target: str, annotate: bool):
    self.doc = doc
    self.analysis = analysis
    self.decision = decision
    self.target = target
    self.annotate = annotate
    self.edits: dict[cst.CSTNode, list[Edit]] = collections.defaultdict(list)
    self.used: set[str] = set()
    self.counts: collections.Counter[str] = collections.Counter()
    self.needs_nnx = False

  def run(self) -> list[str]:
    self.unused = self._unused_imports()
    self.names = api_names(self.analysis, self.unused)
    for site_id in sorted(self.decision.rewrite):
      self._rewrite_site(site_id)
    if self.annotate:
      self._annotate()
    if not self.edits:
      return [unit.code for unit in self.doc.units]
    parent = self.analysis.collector.parent
    modules = [module.visit(_Rewriter(self.edits, parent))
               for module in self.analysis.modules]
    modules = self._fix_imports(modules)
    return [render(module) for module in modules]

  def _removed_nodes(self) -> set[cst.CSTNode]:
    """Original nodes that the functional rewrite drops entirely."""
    removed: set[cst.CSTNode] = set()
    for site_id in self.decision.rewrite:
      if site_id in self.analysis.sow_calls:
        call = self.analysis.sow_calls[site_id]
        removed.add(call.func)
        params = _SOW_PARAMS if site_id.startswith('sow') else _PERTURB_PARAMS
        for key, (value, _) in _bound_values(call, params).items():
          if key not in ('name', 'value'):
            removed.add(value)
        continue
      site = self.analysis.captures[site_id]
      if site.pop_statement is not None:
        removed.add(site.pop_statement)
      elif site.partial:
        removed.add(site.call)
      else:
        removed.add(site.call.func)
        removed.update(arg.value for arg in site.call.args[1:])
    return removed

  def _unused_imports(self) -> set[str]:
    """Imported legacy names (and modules) that the rewrite leaves unused."""
    if self.target != 'functional':
      return set()
    removed = self._removed_nodes()
    parent = self.analysis.collector.parent
    unused = set()
    for local, full in self.analysis.resolver.aliases.items():
      short = canonical(full)
      if not (short in ('nnx', 'flax') or (
          short.startswith('nnx.') and short[4:] in _LEGACY_IMPORTS)):
        continue
      uses = [name for name in self.analysis.collector.names.get(local, ())
              if not _in_import(name, parent)]
      if uses and all(_inside(name, removed, parent) for name in uses):
        unused.add(local)
    return unused

  def _rewrite_site(self, site_id: str) -> None:
    if site_id in self.analysis.sow_calls:
      call = self.analysis.sow_calls[site_id]
      if site_id.startswith('sow'):
        mode = _reducer_mode(self._bound(call)) or 'append'
        self.edits[call].append(sow_edit(self.names, mode))
        self.used.add('sow')
      else:
        self.edits[call].append(perturb_edit(self.names))
        self.used.add('perturb')
      self.counts[site_id.rstrip('0123456789')] += 1
      return
    site = self.analysis.captures[site_id]
    if site.fact.kind == 'pop':
      self._rewrite_pop(site)
    else:
      self._rewrite_capture(site)
    self.counts[site.fact.kind] += 1

  def _bound(self, call: cst.Call):
    return {key: value for key, (value, _) in
            _bound_values(call, _SOW_PARAMS).items()}

  def _rewrite_capture(self, site: CaptureSite) -> None:
    self.edits[site.call].append(capture_edit(self.names, site.partial))
    self.used.add('capture')
    self._rewrite_consumers(site)

  def _rewrite_pop(self, site: CaptureSite) -> None:
    if self.target == 'capture':
      nnx = self._nnx_alias()
      tag = site.pop_statement.body[0].value.args[1].value

      def wrap(func):
        return cst.Call(
            cst.Attribute(cst.parse_expression(nnx), cst.Name('capture')),
            [cst.Arg(func), cst.Arg(tag)])
    else:
      name = self.names['capture']
      self.used.add('capture')

      def wrap(func):
        return cst.Call(cst.Name(name), [cst.Arg(func)])
      self._rewrite_consumers(site)
    for node, edits in pop_edits(site, wrap).items():
      self.edits[node].extend(edits)

  def _nnx_alias(self) -> str:
    locals_ = self.analysis.resolver.local_names_for('nnx')
    if locals_:
      return sorted(locals_, key=len)[0]
    self.needs_nnx = True
    return 'nnx'

  def _rewrite_consumers(self, site: CaptureSite) -> None:
    for consumer in site.consumers:
      mode = self.decision.modes.get(consumer.fact.key or '', 'append')
      if _needs_edit(consumer, mode):
        node, edit = consumer_edit(consumer, mode)
        self.edits[node].append(edit)
        self.counts['consumer'] += 1

  def _annotate(self) -> None:
    messages: dict[cst.CSTNode, list[str]] = collections.defaultdict(list)
    parent = self.analysis.collector.parent
    for site_id, flag in self.decision.flags:
      node = self.analysis.anchors.get(site_id)
      if node is None:
        continue
      anchor = _annotation_anchor(node, parent)
      if flag.message not in messages[anchor]:
        messages[anchor].append(flag.message)
    for anchor, texts in messages.items():
      if self._already_annotated(anchor, texts):
        continue
      self.edits[anchor].insert(0, annotate_edit(texts))

  @staticmethod
  def _already_annotated(anchor, texts) -> bool:
    present = _noted_codes(anchor.leading_lines)
    return all(text.split(':', 1)[0] in present for text in texts)

  # -- imports -----------------------------------------------------------------

  def _fix_imports(self, modules: list[cst.Module]) -> list[cst.Module]:
    if self.unused:
      modules = [_drop_aliases(module, self.unused) for module in modules]
    wanted = [api for api in _API_NAMES if api in self.used]
    if not wanted and not self.needs_nnx:
      return modules
    index = _import_unit(modules)
    module = modules[index]
    if wanted:
      module = _add_sow_import(module, [(api, self.names[api])
                                        for api in wanted])
    if self.needs_nnx:
      module = _add_statement(module, 'from flax import nnx\n')
    modules[index] = module
    return modules


_LEGACY_IMPORTS = frozenset({'Intermediate', 'Perturbation', 'capture', 'pop'})


def _in_import(node: cst.CSTNode, parent) -> bool:
  while isinstance(node, (cst.Name, cst.Attribute)):
    node = parent.get(node)
  return isinstance(node, (cst.ImportAlias, cst.ImportFrom))


def _inside(node: cst.CSTNode, removed: set[cst.CSTNode], parent) -> bool:
  while node is not None:
    if node in removed:
      return True
    node = parent.get(node)
  return False


def _drop_aliases(module: cst.Module, unused: set[str]) -> cst.Module:
  """Removes the top-level imports of the local names in ``unused``."""
  body = []
  for statement in module.body:
    statement = _without_aliases(statement, unused)
    if statement is not None:
      body.append(statement)
  return module.with_changes(body=body)


def _without_aliases(statement, unused: set[str]):
  if not (isinstance(statement, cst.SimpleStatementLine)
          and len(statement.body) == 1
          and isinstance(statement.body[0], (cst.Import, cst.ImportFrom))):
    return statement
  node = statement.body[0]
  if isinstance(node.names, cst.ImportStar):
    return statement
  if isinstance(node, cst.ImportFrom) and _module_name(
      node.module) == 'flax.nnx.sow':
    return statement
  keep = []
  for alias in node.names:
    local = (alias.asname.name.value if alias.asname
             else _module_name(alias.name).split('.')[0])
    if local not in unused:
      keep.append(alias)
  if len(keep) == len(node.names):
    return statement
  if not keep:
    return None
  keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
  return statement.with_changes(body=[node.with_changes(names=keep)])


def _import_unit(modules: list[cst.Module]) -> int:
  for index, module in enumerate(modules):
    if 'flax' in ''.join(
        module.code_for_node(s) for s in module.body
        if _is_import_line(s)):
      return index
  return 0


def _is_import_line(statement) -> bool:
  return isinstance(statement, cst.SimpleStatementLine) and any(
      isinstance(small, (cst.Import, cst.ImportFrom))
      for small in statement.body)


def _add_sow_import(module: cst.Module, names: list[tuple[str, str]]):
  for index, statement in enumerate(module.body):
    if not _is_import_line(statement):
      continue
    node = statement.body[0]
    if (isinstance(node, cst.ImportFrom) and node.module is not None
        and _module_name(node.module) == 'flax.nnx.sow'
        and not isinstance(node.names, cst.ImportStar)):
      present = {(_module_name(a.name), a.asname.name.value if a.asname
                  else _module_name(a.name)) for a in node.names}
      missing = [pair for pair in names if pair not in present]
      if not missing:
        return module
      text = _import_text(sorted(present | set(missing),
                                 key=lambda p: _API_NAMES.index(p[0])
                                 if p[0] in _API_NAMES else 9))
      body = list(module.body)
      body[index] = statement.with_changes(
          body=[cst.parse_statement(text).body[0]])
      return module.with_changes(body=body)
  return _add_statement(module, _import_text(names))


def _import_text(names: list[tuple[str, str]]) -> str:
  parts = [api if api == local else f'{api} as {local}'
           for api, local in names]
  return f"from flax.nnx.sow import {', '.join(parts)}\n"


def _add_statement(module: cst.Module, text: str) -> cst.Module:
  """Inserts an import after the module's leading imports."""
  statement = cst.parse_statement(text)
  body = list(module.body)
  position = 0
  for index, existing in enumerate(body):
    if _is_import_line(existing):
      position = index + 1
    elif index == 0 and _is_docstring(existing):
      position = 1
    elif position or not _is_docstring(existing):
      break
  body.insert(position, statement)
  return module.with_changes(body=body)


def _is_docstring(statement) -> bool:
  return (isinstance(statement, cst.SimpleStatementLine)
          and isinstance(statement.body[0], cst.Expr)
          and string_value(statement.body[0].value) is not None)


# ----------------------------------------------------------------------------
# Per-file work (runs in worker processes)
# ----------------------------------------------------------------------------


@dataclasses.dataclass
class FileResult:
  """The outcome of rewriting one file."""

  path: str
  old: str
  new: str | None = None  # None: unchanged
  counts: dict[str, int] = dataclasses.field(default_factory=dict)
  error: str | None = None


_CACHE: dict[str, tuple[Document, Analysis]] = {}


def read_text(path: str) -> str:
  with open(path, encoding='utf-8') as f:
    return f.read()


def analyze_path(path: str, keep: bool = False) -> FileFacts:
  """Phase 1: the facts of one file (``error`` set if it does not parse)."""
  try:
    doc = read_document(path, read_text(path))
    analysis = analyze(doc, parse_document(doc))
  except (OSError, UnicodeDecodeError, ValueError,
          cst.ParserSyntaxError) as e:
    return FileFacts(path, error=_error_text(e))
  if keep:
    _CACHE[path] = (doc, analysis)
  return analysis.facts


def _error_text(error: Exception) -> str:
  if isinstance(error, cst.ParserSyntaxError):
    return f'does not parse: {error.message} (line {error.raw_line})'
  return f'{type(error).__name__}: {error}'


def rewrite_path(path: str, decision: FileDecision, target: str,
                 annotate: bool) -> FileResult:
  """Phase 2: applies ``decision`` to one file."""
  cached = _CACHE.pop(path, None)
  try:
    if cached is None:
      doc = read_document(path, read_text(path))
      cached = doc, analyze(doc, parse_document(doc), with_positions=False)
    doc, analysis = cached
    rewrite = FileRewrite(doc, analysis, decision, target, annotate)
    codes = rewrite.run()
  except (OSError, UnicodeDecodeError, ValueError,
          cst.ParserSyntaxError) as e:
    return FileResult(path, '', error=_error_text(e))
  new = doc.render(codes)
  changed = new if new != doc.text else None
  return FileResult(path, doc.text, changed, dict(rewrite.counts))


def migrate_source(source: str, *, target: str = 'functional',
                   annotate: bool = False, path: str = '<string>',
                   ) -> tuple[str, list[Flag]]:
  """Migrates one Python source string on its own.

  Example::

    new, flags = migrate_source(old)

  Args:
    source: Python code.
    target: ``'functional'`` or ``'capture'``.
    annotate: add TODO comments above flagged sites.
    path: the name used in flags; its suffix picks the format
      (``.py``, ``.md`` or ``.ipynb``).

  Returns:
    The new source and the flagged sites.

  Raises:
    libcst.ParserSyntaxError: if ``source`` does not parse.
  """
  if not path.endswith(('.py', '.md', '.ipynb')):
    path += '.py'
  doc = read_document(path, source)
  analysis = analyze(doc, parse_document(doc))
  decisions = decide([analysis.facts], target)
  decision = decisions.get(path, FileDecision())
  codes = FileRewrite(doc, analysis, decision, target, annotate).run()
  flags = sorted((flag for _, flag in decision.flags),
                 key=lambda f: (f.where.line, f.where.col, f.code))
  return doc.render(codes), flags


# ----------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------

_EXTENSIONS = ('.py', '.ipynb', '.md')
_SKIP_DIRS = frozenset({'__pycache__', 'node_modules', 'site-packages'})
EXIT_OK, EXIT_CHANGES, EXIT_USAGE, EXIT_UNPARSABLE = 0, 1, 2, 3


def find_files(paths: list[str]) -> list[str]:
  """Expands directories into the ``.py``/``.ipynb``/``.md`` files inside."""
  found = []
  for path in paths:
    if os.path.isdir(path):
      for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs
                         if not d.startswith('.') and d not in _SKIP_DIRS)
        found.extend(os.path.join(root, f) for f in sorted(files)
                     if f.endswith(_EXTENSIONS))
    else:
      found.append(path)
  return found


def _precheck(path: str) -> tuple[str, bool, str | None]:
  try:
    return path, mentions_api(read_text(path)), None
  except (OSError, UnicodeDecodeError) as e:
    return path, False, _error_text(e)


def _mentions_names(path: str, pattern: re.Pattern[str]) -> bool:
  try:
    return bool(pattern.search(read_text(path)))
  except (OSError, UnicodeDecodeError):
    return False


class Progress:
  """A one-line progress bar on stderr, drawn only when it is a terminal."""

  def __init__(self, total: int, enabled: bool, stream=None):
    self.stream = stream or sys.stderr
    self.total = total
    self.enabled = enabled and total >= 20
    self.done = 0

  def advance(self, label: str = '') -> None:
    self.done += 1
    if self.enabled:
      self.stream.write('\r' + self.render(label))
      self.stream.flush()

  def render(self, label: str = '') -> str:
    width = 30
    filled = width * self.done // max(self.total, 1)
    bar = '#' * filled + '-' * (width - filled)
    return f'[{bar}] {self.done}/{self.total} {label}'[:79].ljust(79)

  def close(self) -> None:
    if self.enabled:
      self.stream.write('\r' + ' ' * 79 + '\r')
      self.stream.flush()


def _process_context():
  """Fork is cheapest, but unsafe once a multithreaded library is loaded.

  The command line never imports JAX; a caller that did (a test, a notebook)
  gets fresh 'spawn' workers, which re-import this module by name.
  """
  if 'jax' in sys.modules:
    return multiprocessing.get_context('spawn')
  return multiprocessing.get_context('fork')


class _Runner:
  """Runs work items in this process or a process pool, with progress."""

  def __init__(self, jobs: int, progress: bool):
    self.jobs = jobs
    self.progress = progress
    self.pool = None
    if jobs > 1:
      self.pool = concurrent.futures.ProcessPoolExecutor(
          jobs, mp_context=_process_context()
      )

  def map(self, function, items: list[tp.Any], label: str):
    bar = Progress(len(items), self.progress)
    try:
      if self.pool is None:
        for item in items:
          yield function(*item)
          bar.advance(label)
      else:
        chunk = max(1, min(32, len(items) // (self.jobs * 8) or 1))
        for result in self.pool.map(_star, [(function, item) for item in items],
                                    chunksize=chunk):
          yield result
          bar.advance(label)
    finally:
      bar.close()

  def close(self) -> None:
    if self.pool is not None:
      self.pool.shutdown()


def _star(packed):
  function, item = packed
  return function(*item)


@dataclasses.dataclass
class Summary:
  scanned: int = 0
  parsed: int = 0
  changed: int = 0
  rewritten: collections.Counter[str] = dataclasses.field(
      default_factory=collections.Counter)
  flagged: collections.Counter[str] = dataclasses.field(
      default_factory=collections.Counter)
  errors: list[str] = dataclasses.field(default_factory=list)

  def lines(self) -> list[str]:
    out = [f'migrate_sow: {self.scanned} files scanned, {self.parsed} parsed, '
           f'{self.changed} changed, {len(self.errors)} unparsable']
    total = sum(self.rewritten.values())
    detail = ', '.join(f'{k}: {v}' for k, v in sorted(self.rewritten.items()))
    out.append(f'  sites rewritten: {total}' + (f' ({detail})' if detail
                                                 else ''))
    out.append(f'  sites flagged: {sum(self.flagged.values())}')
    for code, count in sorted(self.flagged.items(), key=lambda i: (-i[1],
                                                                  i[0])):
      out.append(f'    {code}: {count}')
    return out


def run(paths: list[str], *, target: str = 'functional', mode: str = 'diff',
        annotate: bool = False, jobs: int = 1, progress: bool = True,
        out=None, err=None) -> tuple[int, Summary]:
  """Runs the codemod over ``paths``; returns the exit code and a summary."""
  out = out or sys.stdout
  err = err or sys.stderr
  summary = Summary()
  runner = _Runner(jobs, progress)
  try:
    files = find_files(paths)
    summary.scanned = len(files)
    candidates, rest = [], []
    for path, needed, error in runner.map(
        _precheck, [(p,) for p in files], 'scanning'):
      if error:
        summary.errors.append(f'{path}: {error}')
      (candidates if needed else rest).append(path)
    keep = runner.pool is None
    facts = list(runner.map(analyze_path, [(p, keep) for p in candidates],
                            'analysing'))
    facts += _attribute_readers(facts, rest, runner)
    good = [f for f in facts if f.error is None]
    summary.errors += [f'{f.path}: {f.error}' for f in facts if f.error]
    summary.parsed = len(facts)
    decisions = decide(good, target)
    results = _apply(decisions, target, annotate, runner)
  finally:
    runner.close()
  _report(decisions, summary, err)
  for result in results:
    if result.error:
      summary.errors.append(f'{result.path}: {result.error}')
      continue
    for kind, count in result.counts.items():
      summary.rewritten[kind] += count
    if result.new is None:
      continue
    summary.changed += 1
    if mode == 'diff':
      out.write(_diff(result))
    elif mode == 'write':
      with open(result.path, 'w', encoding='utf-8') as f:
        f.write(result.new)
  for error in summary.errors:
    err.write(f'{error}\n')
  if summary.errors:
    return EXIT_UNPARSABLE, summary
  if mode == 'check' and summary.changed:
    return EXIT_CHANGES, summary
  return EXIT_OK, summary


def _attribute_readers(facts, rest, runner) -> list[FileFacts]:
  """Analyses the skipped files that read a sown name as an attribute."""
  names = {s.name for f in facts for s in f.sows if s.name}
  if not names or not rest:
    return []
  pattern = re.compile(
      r'\.(' + '|'.join(sorted(map(re.escape, names))) +
      r')\b\s*(\.\s*(value|get_value)\b|\[)')
  readers = [p for p in rest if _mentions_names(p, pattern)]
  return list(runner.map(analyze_path, [(p, runner.pool is None)
                                        for p in readers], 'analysing'))


def _apply(decisions, target, annotate, runner) -> list[FileResult]:
  items = []
  for path, decision in sorted(decisions.items()):
    if decision.rewrite or (annotate and decision.flags):
      items.append((path, decision, target, annotate))
  return list(runner.map(rewrite_path, items, 'rewriting'))


def _report(decisions, summary: Summary, err) -> None:
  flags = [flag for decision in decisions.values()
           for _, flag in decision.flags]
  flags.sort(key=lambda f: (f.where.path, f.where.unit, f.where.line,
                            f.where.col, f.code))
  for flag in flags:
    summary.flagged[flag.code] += 1
    err.write(f'{flag}\n')


def _diff(result: FileResult) -> str:
  lines = difflib.unified_diff(
      result.old.splitlines(keepends=True),
      result.new.splitlines(keepends=True),
      fromfile=f'a/{result.path}', tofile=f'b/{result.path}')
  text = ''.join(line if line.endswith('\n') else line + '\n'
                 for line in lines)
  return text


def parse_args(argv: list[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      prog='migrate_sow.py',
      description='Migrates Module.sow/nnx.capture code to flax.nnx.sow.',
      epilog='Exit codes: 0 ok; 1 --check found changes; 2 usage error; '
             '3 some files could not be read or parsed.')
  parser.add_argument('paths', nargs='+', metavar='PATH')
  parser.add_argument('--target', choices=('functional', 'capture'),
                      default='functional')
  group = parser.add_mutually_exclusive_group()
  group.add_argument('--diff', dest='mode', action='store_const',
                     const='diff', help='print a unified diff (default)')
  group.add_argument('--write', dest='mode', action='store_const',
                     const='write', help='rewrite the files in place')
  group.add_argument('--check', dest='mode', action='store_const',
                     const='check', help='exit 1 if anything would change')
  parser.add_argument('--annotate', action='store_true',
                      help='add TODO(migrate_sow) comments at flagged sites')
  parser.add_argument('--jobs', type=int, default=1, metavar='N')
  parser.add_argument('--no-progress', dest='progress', action='store_false')
  parser.add_argument('--quiet', action='store_true')
  args = parser.parse_args(argv)
  if args.jobs < 1:
    parser.error('--jobs must be at least 1')
  missing = [p for p in args.paths if not os.path.exists(p)]
  if missing:
    parser.error('no such file or directory: ' + ', '.join(missing))
  args.mode = args.mode or 'diff'
  return args


def main(argv: list[str] | None = None) -> int:
  args = parse_args(sys.argv[1:] if argv is None else argv)
  err = open(os.devnull, 'w') if args.quiet else sys.stderr
  try:
    code, summary = run(
        args.paths, target=args.target, mode=args.mode,
        annotate=args.annotate, jobs=args.jobs,
        progress=args.progress and sys.stderr.isatty(), err=err)
    for line in summary.lines():
      err.write(line + '\n')
  finally:
    if args.quiet:
      err.close()
  return code


if __name__ == '__main__':
  sys.exit(main())
