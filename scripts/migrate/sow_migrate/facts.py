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
"""Phase 1: the facts of one file, from libcst metadata.

One visitor per code unit records every sow/perturb call, every
``nnx.capture``/``nnx.pop`` (a reader), every other use of
``nnx.Intermediate`` and the classes with what they instantiate. Names are
resolved to fully qualified names (``names.qualified_names``): a class is
known by its fully qualified name, so two classes ``Foo`` in two files are
two classes.
"""

from __future__ import annotations

import dataclasses
import re
import typing as tp

import libcst as cst
from libcst import metadata

from . import attributes
from . import consumers as consumers_lib
from . import names as nm
from . import methods as methods_lib
from . import other_uses, pops
from .other_uses import OtherUse

_REDUCER_KEYWORDS = ('reduce_fn', 'init_fn')


@dataclasses.dataclass(eq=False)
class Site:
  """A sow, perturb, capture or pop call, with what the analysis found."""

  kind: str  # 'sow', 'perturb', 'capture' or 'pop'
  path: str
  unit: int
  unit_label: str
  line: int
  col: int
  node: cst.Call
  owner: str | None = None  # qualified name of the enclosing class
  types: tuple[str, ...] = ()  # canonical Variable types named in the call
  name: str | None = None  # the literal name of a sow/perturb
  mode: str = 'append'  # or 'clobber' (keep-last reducer)
  root: str | None = None  # class of the captured/popped object, if known
  reasons: list[tuple[str, str]] = dataclasses.field(default_factory=list)
  # Readers: which names they read (None: unknown), and how to rewrite them.
  names_read: frozenset[str] | None = None
  consumer: consumers_lib.Consumers | None = None
  pop_reasons: list[tuple[str, str]] = dataclasses.field(default_factory=list)
  pop_call: cst.CSTNode | None = None  # the statement calling the model
  pop_through: bool = False  # that call goes through nnx.vmap/split_rngs
  pop_statement: cst.CSTNode | None = None
  decorator: bool = False
  module: str = ''  # dotted module name of the file
  imports: frozenset[str] | None = None  # a notebook's imported modules
  # A pop that opens a notebook cell: the call may end the previous cell.
  cross_unit: str | None = None
  pop_statement_candidate: cst.CSTNode | None = None
  pop_call_unit: int | None = None
  # Calls of the popped object before the one a capture would wrap:
  # (what, method called or '' if unknown, where, calls.CallArgs or None),
  # nearest first; and whether the scan reached an earlier pop or
  # assignment.
  earlier: list[tuple[str, str, str, tp.Any]] = dataclasses.field(
      default_factory=list)
  earlier_closed: bool = False
  # Calls of the object in the cells between the call and a pop opening a
  # later cell, as in ``earlier``: they must neither sow nor read.
  between: list[tuple[str, str, str, tp.Any]] = dataclasses.field(
      default_factory=list)
  # The file's functions the object is passed to before the call
  # (functions.FunctionFact by name).
  functions: dict[str, tp.Any] = dataclasses.field(default_factory=dict)
  receiver: str = ''  # `module` in module.sow(...)
  library: bool = False  # in a library the project imports (libraries.py)

  @property
  def where(self) -> str:
    return f'{self.path}:{self.line}'

  def block(self, code: str, detail: str = '') -> None:
    self.reasons.append((code, detail))


@dataclasses.dataclass
class ClassFact:
  qualified: str
  path: str
  line: int
  bases: tuple[str, ...]
  # Qualified names called in the class body (instantiations among them),
  # with whether the call is in a loop or comprehension.
  calls: list[tuple[str, bool]] = dataclasses.field(default_factory=list)
  # Attributes assigned something that is not a call (a module passed in?):
  # the annotations of the parameters they come from, 'unannotated' or
  # 'unknown' (decide.Project.opaque says which may be modules).
  opaque: set[str] = dataclasses.field(default_factory=set)
  methods: dict[str, methods_lib.MethodFact] = dataclasses.field(
      default_factory=dict)


@dataclasses.dataclass
class UnitFacts:
  sites: list[Site] = dataclasses.field(default_factory=list)
  classes: list[ClassFact] = dataclasses.field(default_factory=list)
  others: list[OtherUse] = dataclasses.field(default_factory=list)
  # Module-level string constants, for names given as constants.
  constants: dict[str, str] = dataclasses.field(default_factory=dict)
  # Names a captured or popped State is assigned to (`s` in y, s = ...).
  state_names: set[str] = dataclasses.field(default_factory=set)
  # The callees called in the unit (`model` in model(x)), as written.
  called: set[str] = dataclasses.field(default_factory=set)
  # Names bound to a part of another object (`block = model.layers[1]`,
  # `for block in model.layers`): name -> the root name (`model`), so that a
  # read through them counts as a read of that object.
  bound: dict[str, str] = dataclasses.field(default_factory=dict)
  # Module-level aliases (`ModuleList = nnx.List`): qualified name of the
  # alias -> qualified name of what it names (decide.Project resolves them).
  aliases: dict[str, str] = dataclasses.field(default_factory=dict)


def string_value(node: cst.CSTNode) -> str | None:
  if isinstance(node, cst.SimpleString):
    value = node.evaluated_value
    return value if isinstance(value, str) else None
  return None


class Collector(other_uses.OtherUses, methods_lib.Methods, cst.CSTVisitor):
  """Records the facts of one code unit."""

  # Parents are recorded while visiting (on_visit), not by
  # ParentNodeProvider: that provider's own pass over the unit cost about an
  # eighth of a run over Flax's repository.
  METADATA_DEPENDENCIES = (
      metadata.PositionProvider,
      metadata.ScopeProvider,
  )

  def __init__(self, path: str, unit: int, unit_label: str, first_line: int,
               shared: dict[str, str] | None = None,
               module: tuple[str, str] = ('', '')):
    super().__init__()
    # The unit's module name and package, for names.qualified_names.
    self._module, self._package = module
    self._qnames: dict[int, set[str]] = {}
    # The parent of every node visited so far, and the nodes being visited.
    self._parents: dict[int, cst.CSTNode | None] = {}
    self._path: list[cst.CSTNode] = []
    self._wrapper: metadata.MetadataWrapper | None = None  # set by collect
    self.shared = shared or {}
    self.called: set[str] = set()
    self.path, self.unit, self.unit_label = path, unit, unit_label
    self.first_line = first_line
    self.facts = UnitFacts()
    self._classes: list[ClassFact] = []
    self._class_nodes: list[cst.ClassDef] = []
    self._loops = 0
    self.handled: set[cst.CSTNode] = set()

  # Helpers -----------------------------------------------------------------

  def qnames(self, node: cst.CSTNode) -> set[str]:
    found = self._qnames.get(id(node))
    if found is None:
      found = self._qnames[id(node)] = nm.qualified_names(
          self.get_metadata(metadata.ScopeProvider, node, None), node,
          self._module, self._package)
    found = set(found)  # the caller's to change
    if found or not self.shared:
      return found
    # A name imported in another cell of the notebook.
    parts = []
    while isinstance(node, cst.Attribute):
      parts.append(node.attr.value)
      node = node.value
    if isinstance(node, cst.Name) and node.value in self.shared:
      return {nm.canonical('.'.join([self.shared[node.value]]
                                    + parts[::-1]))}
    return found

  def is_(self, node: cst.CSTNode, qualified: str) -> bool:
    return qualified in self.qnames(node)

  def position(self, node: cst.CSTNode) -> tuple[int, int]:
    start = self.get_metadata(metadata.PositionProvider, node).start
    return start.line + self.first_line - 1, start.column + 1

  def on_visit(self, node: cst.CSTNode) -> bool:
    self._parents[id(node)] = self._path[-1] if self._path else None
    self._path.append(node)
    return super().on_visit(node)

  def on_leave(self, original_node: cst.CSTNode) -> None:
    super().on_leave(original_node)
    self._path.pop()

  def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
    if id(node) in self._parents:
      return self._parents[id(node)]
    # A node not visited yet (an assignment further down, found through its
    # scope): the whole unit's parents, once.
    return self._wrapper.resolve(metadata.ParentNodeProvider).get(node)

  def owner(self) -> str | None:
    return self._classes[-1].qualified if self._classes else None

  def new_site(self, kind: str, node: cst.Call) -> Site:
    line, col = self.position(node)
    site = Site(kind, self.path, self.unit, self.unit_label, line, col, node,
                owner=self.owner())
    self.facts.sites.append(site)
    return site

  # Classes and loops -------------------------------------------------------

  def visit_ClassDef(self, node: cst.ClassDef) -> None:
    qualified = sorted(self.qnames(node.name) or {node.name.value})[0]
    bases = tuple(
        sorted(q for arg in node.bases for q in self.qnames(arg.value)))
    fact = ClassFact(qualified, self.path, self.position(node)[0], bases)
    self._classes.append(fact)
    self._class_nodes.append(node)
    self.facts.classes.append(fact)

  def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
    self._classes.pop()
    self._class_nodes.pop()

  def _enter_loop(self, node) -> None:
    self._loops += 1

  def visit_For(self, node: cst.For) -> None:
    self._enter_loop(node)
    self._bind_part(node.target, node.iter)

  def visit_CompFor(self, node: cst.CompFor) -> None:
    self._bind_part(node.target, node.iter)

  def _bind_part(self, target: cst.CSTNode, value: cst.CSTNode) -> None:
    # `block = model.layers[0]`, `for block in model.layers`: `block` is a
    # part of `model` (a call's result is not: `y = model(x)`).
    root = _root_name(value)
    if isinstance(target, cst.Name) and root and root != target.value:
      self.facts.bound[target.value] = root

  def leave_For(self, original_node) -> None:
    self._loops -= 1

  visit_While, leave_While = _enter_loop, leave_For
  visit_ListComp, leave_ListComp = _enter_loop, leave_For
  visit_GeneratorExp, leave_GeneratorExp = _enter_loop, leave_For
  visit_DictComp, leave_DictComp = _enter_loop, leave_For
  visit_SetComp, leave_SetComp = _enter_loop, leave_For

  def visit_Assign(self, node: cst.Assign) -> None:
    if len(node.targets) == 1:
      self._bind_part(node.targets[0].target, node.value)
      self._module_alias(node.targets[0].target, node.value)
    if not self._classes:
      if (len(node.targets) == 1
          and isinstance(node.targets[0].target, cst.Name)
          and string_value(node.value) is not None):
        self.facts.constants[node.targets[0].target.value] = string_value(
            node.value)
      return
    for target in node.targets:
      if (isinstance(target.target, cst.Attribute)
          and isinstance(target.target.value, cst.Name)
          and target.target.value.value == 'self'
          and isinstance(node.value, (cst.Name, cst.Attribute))):
        self._classes[-1].opaque |= attributes.passed_in_types(self,
                                                               node.value)

  def _module_alias(self, target: cst.CSTNode, value: cst.CSTNode) -> None:
    # `ModuleList = nnx.List` at module level: a class made as ModuleList(...)
    # makes an nnx.List (hazards.py).
    if not isinstance(target, cst.Name) or not isinstance(
        value, (cst.Name, cst.Attribute)):
      return
    scope = self.get_metadata(metadata.ScopeProvider, target, None)
    if not isinstance(scope, metadata.GlobalScope):
      return
    alias, named = self.qnames(target), self.qnames(value)
    if len(alias) == 1 and named:
      self.facts.aliases[next(iter(alias))] = sorted(named)[0]

  # Calls -------------------------------------------------------------------

  def visit_Call(self, node: cst.Call) -> None:
    self.record_method_call(node)
    if not isinstance(node.func, (cst.Name, cst.Attribute)):
      return  # f(...)(x): the inner call is visited on its own
    self.called.add(_code(node.func))
    self.getattr_read(node)
    qualified = self.qnames(node.func)
    if self._classes:
      for name in qualified:
        self._classes[-1].calls.append((name, self._loops > 0))
    if isinstance(node.func, cst.Attribute) and node.func.attr.value in (
        'sow', 'perturb') and not qualified & {nm.CAPTURE, nm.POP}:
      self._sow_or_perturb(node, node.func.attr.value)
    elif nm.CAPTURE in qualified:
      self._reader(node, 'capture')
    elif nm.POP in qualified:
      self._reader(node, 'pop')

  def _arg_types(self, args) -> tuple[str, ...]:
    types = []
    values = []
    for arg in args:
      if isinstance(arg.value, cst.Tuple):
        values += [element.value for element in arg.value.elements]
      else:
        values.append(arg.value)
    for value in values:
      names = self.qnames(value)
      types.append(sorted(names)[0] if names else cst.Module([]).code_for_node(
          value))
      self.handled.add(value)
    return tuple(types)

  def _sow_or_perturb(self, node: cst.Call, kind: str) -> None:
    site = self.new_site(kind, node)
    site.receiver = _code(node.func.value)
    if any(arg.star for arg in node.args):
      site.block('kwargs', f'*args/**kwargs in .{kind}() hide its arguments')
      return
    params = (('variable_type', 'name', 'value', 'reduce_fn', 'init_fn')
              if kind == 'sow' else ('name', 'value', 'variable_type'))
    bound = _bind(node.args, params)
    if bound is None:
      site.block('kwargs', f'unrecognised .{kind}() arguments')
      return
    if kind == 'sow':
      type_node = bound.get('variable_type')
    else:
      type_node = bound.get('variable_type')
    if type_node is not None:
      site.types = self._arg_types([cst.Arg(type_node)])
      if string_value(type_node) is not None:
        site.types = ('str:' + string_value(type_node),)
    else:
      site.types = (nm.PERTURBATION,)
    name_node = bound.get('name')
    site.name = string_value(name_node) if name_node is not None else None
    if site.name is None and name_node is not None:
      site.name = self._constant(name_node)
    if site.name is None:
      site.block('nonliteral-name',
                 f'the name {_code(name_node)} is computed; functional names '
                 'must be spelled out, e.g. a tuple')
    if kind == 'sow':
      reducers = {k: bound[k] for k in _REDUCER_KEYWORDS if k in bound}
      mode = _reducer_mode(reducers)
      if mode is None:
        site.block('custom-reducer', 'custom reduce_fn/init_fn: sow every '
                   'value and reduce after capturing')
      else:
        site.mode = mode
      if not isinstance(self.parent(node), cst.Expr):
        site.block('sow-result-used', 'the bool returned by .sow() is used; '
                   'the functional sow returns the value')
    transform = self._enclosing_transform(node)
    if transform:
      site.block('transform', f'runs under {transform}: values are carried '
                 'through the transform; rewrite by hand')

  def _constant(self, node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Name):
      return self.facts.constants.get(node.value)
    if (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
        and node.value.value == 'self' and self._classes):
      return self._class_constants().get(node.attr.value)
    return None

  def _class_constants(self) -> dict[str, str]:
    # Class-level `TAG = 'name'` constants of the enclosing class.
    found = {}
    for statement in self._class_nodes[-1].body.body:
      if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
          if (isinstance(small, cst.Assign) and len(small.targets) == 1
              and isinstance(small.targets[0].target, cst.Name)
              and string_value(small.value) is not None):
            found[small.targets[0].target.value] = string_value(small.value)
    return found

  def _enclosing_transform(self, node: cst.CSTNode) -> str | None:
    # A sow inside a function or lambda passed to an nnx transform, or in a
    # method decorated with one.
    current = node
    while current is not None:
      parent = self.parent(current)
      if isinstance(current, cst.FunctionDef):
        for decorator in current.decorators:
          target = decorator.decorator
          if isinstance(target, cst.Call):
            target = target.func
          if self.qnames(target) & nm.TRANSFORMS:
            return _code(decorator.decorator)
      if (isinstance(current, cst.Lambda) and isinstance(parent, cst.Arg)):
        call = self.parent(parent)
        if (isinstance(call, cst.Call)
            and self.qnames(call.func) & nm.TRANSFORMS):
          return _code(call.func)
      current = parent
    return None

  def _reader(self, node: cst.Call, kind: str) -> None:
    site = self.new_site(kind, node)
    if any(arg.star for arg in node.args):
      site.block('kwargs', f'*args/**kwargs in nnx.{kind}() hide the filters')
      return
    positional = [arg for arg in node.args if arg.keyword is None]
    keywords = {arg.keyword.value: arg for arg in node.args if arg.keyword}
    for arg in keywords.values():
      self.handled.add(arg.value)  # method_outputs=nnx.Intermediate
    if kind == 'capture' and positional and self._is_variable_type(
        positional[0].value):
      site.decorator = True  # nnx.capture(nnx.Intermediate)(f)
      site.types = self._arg_types(positional)
      target = None
    else:
      target = positional[0].value if positional else None
      site.types = self._arg_types(positional[1:])
    if 'method_outputs' in keywords:
      site.block('method-outputs', 'method_outputs= sows every method output '
                 'implicitly; add explicit sows in the methods you need')
    if 'init' in keywords or nm.PERTURBATION in site.types:
      site.block('perturbation', 'the two-phase perturbation workflow; with '
                 'perturb(v, name=...) capture around jax.grad instead')
    if len(site.types) > 1 or any(isinstance(arg.value, cst.Tuple)
                                  for arg in positional[1:]):
      site.block('several-types', 'several variable types in one call: one '
                 'capture per tag')
    if target is not None:
      site.root = self._root_class(target)
    self._record_state_names(node)
    if kind == 'capture':
      site.consumer = consumers_lib.analyse_capture(self, site)
    else:
      pops.analyse_pop(self, site, target)

  def _record_state_names(self, node: cst.CSTNode) -> None:
    current = self.parent(node)
    while isinstance(current, (cst.Call, cst.Subscript, cst.Attribute,
                               cst.Index, cst.SubscriptElement)):
      current = self.parent(current)
    if isinstance(current, cst.Assign):
      for target in current.targets:
        for name in _names_in(target.target):
          self.facts.state_names.add(name)

  def _is_variable_type(self, node: cst.CSTNode) -> bool:
    return bool(self.qnames(node) & {nm.INTERMEDIATE, nm.PERTURBATION})

  def _root_class(self, target: cst.CSTNode) -> str | None:
    # The class of `model` when the scope assigns it once, `model = Cls(...)`.
    if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
      target = target.value  # model.method
    if not isinstance(target, cst.Name):
      return None
    scope = self.get_metadata(metadata.ScopeProvider, target, None)
    if scope is None:
      return None
    assignments = [a for a in scope[target.value]
                   if isinstance(a, metadata.Assignment)]
    if not assignments and '=' + target.value in self.shared:
      # Made in another notebook cell: resolve the class name there.
      func = cst.parse_expression(self.shared['=' + target.value])
      parts = []
      while isinstance(func, cst.Attribute):
        parts.append(func.attr.value)
        func = func.value
      if isinstance(func, cst.Name) and func.value in self.shared:
        return nm.canonical('.'.join([self.shared[func.value]] + parts[::-1]))
      return None
    if len(assignments) != 1:
      return None
    node = assignments[0].node
    if isinstance(node, cst.Param):
      # def f(model: Model, ...): the annotation names the class.
      if node.annotation is None:
        return None
      names = self.qnames(node.annotation.annotation)
      return sorted(names)[0] if len(names) == 1 else None
    assign = self.parent(self.parent(node) or target)
    if isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Call):
      names = self.qnames(assign.value.func)
      return sorted(names)[0] if names else None
    return None


def _names_in(node: cst.CSTNode) -> list[str]:
  if isinstance(node, cst.Name):
    return [node.value]
  if isinstance(node, (cst.Tuple, cst.List)):
    return [n for e in node.elements for n in _names_in(e.value)]
  return []


def _bind(args: tp.Sequence[cst.Arg], params: tuple[str, ...]):
  bound = {}
  for index, arg in enumerate(args):
    if arg.keyword is None:
      if index >= len(params):
        return None
      bound[params[index]] = arg.value
    elif arg.keyword.value in params:
      bound[arg.keyword.value] = arg.value
    else:
      return None
  return bound


def _reducer_mode(reducers: dict[str, cst.CSTNode]) -> str | None:
  if not reducers:
    return 'append'
  reduce_fn = reducers.get('reduce_fn')
  if set(reducers) == {'reduce_fn'} and isinstance(reduce_fn, cst.Lambda):
    params = reduce_fn.params.params
    if (len(params) == 2 and isinstance(reduce_fn.body, cst.Name)
        and reduce_fn.body.value == params[1].name.value):
      return 'clobber'
  return None


def _code(node: cst.CSTNode | None) -> str:
  if node is None:
    return '?'
  text = cst.Module([]).code_for_node(node)
  return text if len(text) <= 40 else text[:37] + '...'


def _root_name(node: cst.CSTNode) -> str | None:
  """`model` of `model.layers[0].attn` (None for a call's result)."""
  while isinstance(node, (cst.Attribute, cst.Subscript)):
    node = node.value
  return node.value if isinstance(node, cst.Name) and node is not None else (
      None)


def collect(wrapper: metadata.MetadataWrapper, path: str, unit: int,
            unit_label: str, first_line: int,
            shared: dict[str, str] | None = None,
            alone: bool = True,
            module: tuple[str, str] = ('', '')) -> UnitFacts:
  """The facts of one unit; ``alone=False``: one of several units sharing
  their objects (``keep_attribute_reads`` is then called on all);
  ``module``: the unit's module name and package."""
  collector = Collector(path, unit, unit_label, first_line, shared, module)
  collector._wrapper = wrapper  # pylint: disable=protected-access
  wrapper.visit(collector)
  collector.facts.called = collector.called
  if not alone:
    return collector.facts
  keep_attribute_reads([collector.facts])
  return collector.facts


def keep_attribute_reads(units: list[UnitFacts]) -> None:
  """Drops the attribute reads of objects that are never called.

  An attribute read of a sown value needs the object to have been called
  (``model(x); model.y.value``): ``cursor.y[1]`` on an object never called
  is something else. A read through a part of a called object counts
  (``model.layers[0].y.value``, ``block.y.value`` after ``block =
  model.layers[0]`` or ``for block in model.layers``). The cells of a
  notebook share their objects: a call in one counts for a read in another.
  """
  called = set().union(*(u.called for u in units))
  bound = {}
  for unit in units:
    bound.update(unit.bound)

  def reaches_a_call(receiver: str | None) -> bool:
    if receiver in called:
      return True
    root = re.match(r'[A-Za-z_]\w*', receiver or '')
    name, seen = root.group(0) if root else None, set()
    while name is not None and name not in seen:
      if name in called:
        return True
      seen.add(name)
      name = bound.get(name)
    return False

  for unit in units:
    unit.others = [o for o in unit.others
                   if o.code not in ('attribute-read', 'may-read')
                   or reaches_a_call(o.receiver)]
