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
"""Which methods of a class can sow, for calls made before a pop.

``frames = nnx.vmap(lambda cs, s: cs.render(s), ...)(cs, states)`` between
two pops of ``cs`` leaves nothing on ``cs`` when ``render`` cannot sow:
it holds no ``.sow``/``.perturb`` call, passes ``self`` to nothing, and
calls only methods of the instance's class that cannot sow either, or
submodules when no submodule class of the object sows. Anything the
codemod cannot see (a method inherited from a class outside the project,
``super()``) may sow.

A sow under ``if flag:`` where ``flag`` is a parameter whose default is
``False`` does not run when the call leaves it False: CAX's
``cs(state, num_steps=n)`` runs ``__call__(..., sow=False)``, which passes
``sow=sow`` to ``_step`` through ``nnx.scan(lambda cs, ...: cs._step(...,
sow=sow))(self, ...)``, and ``_step`` sows only ``if sow:``. The flags known
False travel with each call (``calls.CallArgs``).
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from . import calls as calls_lib
from .calls import CallArgs

# Transforms that flatten what they are given as a JAX pytree (nnx.jit does
# not: Flax 0.12.8's nnx.capture runs under it).
FLATTENING = frozenset({
    *(f'flax.nnx.{n}' for n in ('vmap', 'scan', 'pmap', 'remat', 'cond',
                                'switch', 'fori_loop', 'while_loop',
                                'shard_map')),
    *(f'jax.{n}' for n in ('jit', 'vmap', 'pmap', 'checkpoint', 'remat',
                           'grad', 'value_and_grad', 'jvp', 'vjp',
                           'shard_map', 'lax.scan', 'lax.cond',
                           'lax.switch', 'lax.map', 'lax.fori_loop',
                           'lax.while_loop', 'tree.map', 'tree.leaves',
                           'tree.flatten', 'tree_util.tree_map',
                           'tree_util.tree_leaves',
                           'tree_util.tree_flatten')),
})
_PARTIAL = frozenset({'functools.partial'})
# Built-ins that look at an object without flattening it (`hasattr(self,
# 'qkv_einsum')` in Gemma's Attention).
_INSPECTING = frozenset(f'builtins.{n}' for n in (
    'hasattr', 'getattr', 'isinstance', 'type', 'id', 'callable', 'repr',
    'str', 'vars', 'dir'))
# Transforms that only call the function they wrap (with the object passed
# to them): a call of ``self`` through them is a call of the lambda's method.
_TRANSFORM_ROOTS = ('flax.nnx.', 'jax.')


@dataclasses.dataclass
class MethodFact:
  """What one method does with ``self``."""

  # One entry per .sow/.perturb call (on any object): the names that must
  # be truthy for it to run (``if sow:``); empty: it always may.
  sow_guards: list[frozenset[str]] = dataclasses.field(default_factory=list)
  escapes: bool = False  # passes self on, or calls super()
  passes_self: bool = False  # to a function (not through a transform)
  # Where it passes self to a method (`self.cfg.maybe_sow(x, self)`): the
  # method's name and the argument's place (its index, or its keyword).
  self_passed_to: list[tuple[str, int | str]] = dataclasses.field(
      default_factory=list)
  # Its parameters (self too) used only to sow on (calls.sow_only_params).
  sow_only: frozenset[str] = frozenset()
  calls: list[CallArgs] = dataclasses.field(default_factory=list)  # self.f()
  attribute_calls: bool = False  # self.sub(...), self.sub.f(...)
  params: tuple[str, ...] = ()  # positional, after self
  false_defaults: frozenset[str] = frozenset()  # parameters `p=False`
  assigned: frozenset[str] = frozenset()  # names the body binds
  self_reads: frozenset[str] = frozenset()  # attributes it uses: self.x
  # JAX or NNX transforms it calls or is decorated with, that flatten what
  # they are given as a pytree (see hazards.py).
  transforms: set[str] = dataclasses.field(default_factory=set)

  @property
  def sows(self) -> bool:
    return bool(self.sow_guards)


class Methods:
  """Collector methods recording a :class:`MethodFact` per method.

  The mixing class provides ``_classes``, ``_class_nodes``, ``parent`` and
  ``qnames``.
  """

  _method: MethodFact | None = None
  _self_name: str = 'self'

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    if (self._class_nodes and self._method is None
        and node in self._class_nodes[-1].body.body):
      self._method = self._classes[-1].methods.setdefault(
          node.name.value, MethodFact())
      params = node.params.params
      self._self_name = params[0].name.value if params else 'self'
      self._method_node = node
      self._method.params, self._method.false_defaults = (
          calls_lib.params_of(node))
      self._method.assigned = calls_lib.assigned_in(node)
      self._method.self_reads = calls_lib.attributes_of(node, self._self_name)
      self._method.sow_only = calls_lib.sow_only_params(node)
      for decorator in node.decorators:
        self._record_transform(decorator.decorator)

  def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
    if self._method is not None and original_node is getattr(
        self, '_method_node', None):
      self._method = None

  def record_method_call(self, call: cst.Call) -> None:
    fact = self._method
    if fact is None:
      return
    func, me = call.func, self._self_name
    self._record_transform(func)
    if isinstance(func, cst.Attribute) and func.attr.value in ('sow',
                                                                'perturb'):
      fact.sow_guards.append(self._guards(call))
      if isinstance(func.value, cst.Name) and func.value.value == me:
        return  # self.sow(...): the guard above is all that matters
    if any(isinstance(arg.value, cst.Name) and arg.value.value == me
           for arg in call.args):
      through = self._through_transform(call, me)
      if through is None:
        fact.escapes = fact.passes_self = True
        names = self.qnames(func)
        fact.self_passed_to.append(
            ('', 'builtin') if names and names <= _INSPECTING else
            _slot(call, me))
      else:
        fact.calls.append(through)
    root, depth = func, 0
    while isinstance(root, cst.Attribute):
      root, depth = root.value, depth + 1
    if isinstance(root, cst.Call) and isinstance(
        root.func, cst.Name) and root.func.value == 'super':
      fact.escapes = True
    elif isinstance(root, cst.Name) and root.value == me:
      if depth == 0:
        fact.calls.append(calls_lib.of_call(call, '__call__'))
      elif depth == 1:
        fact.calls.append(calls_lib.of_call(call, func.attr.value))
      else:
        fact.attribute_calls = True

  def _record_transform(self, node: cst.CSTNode) -> None:
    """Notes a flattening transform: ``nnx.scan``, ``@nnx.vmap``,
    ``@partial(nnx.scan, ...)``, ``jax.checkpoint``."""
    if isinstance(node, cst.Call):
      if node.args and _PARTIAL & self.qnames(node.func):
        node = node.args[0].value
      else:
        node = node.func
    if isinstance(node, (cst.Name, cst.Attribute)):
      self._method.transforms.update(self.qnames(node) & FLATTENING)

  def _guards(self, node: cst.CSTNode) -> frozenset[str]:
    """The names whose truth the sow ``node`` needs (enclosing ``if``s of
    the method itself; in a nested function, none)."""
    names, current = set(), node
    while current is not None and current is not self._method_node:
      parent = self.parent(current)
      if isinstance(parent, (cst.FunctionDef, cst.Lambda)) and (
          parent is not self._method_node):
        return frozenset()
      if isinstance(parent, cst.If) and current is parent.body:
        names |= calls_lib.truthy_names(parent.test)
      current = parent
    return frozenset(names)

  def _through_transform(self, call: cst.Call, me: str) -> CallArgs | None:
    """``nnx.scan(lambda m, ...: m.f(...), ...)(self, ...)``: the call of
    ``f``, when ``self`` is only the first argument and every function of
    the chain is a JAX or NNX transform."""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if not positional or positional[0] is not call.args[0] or any(
        isinstance(a.value, cst.Name) and a.value.value == me
        for a in call.args[1:]):
      return None
    if not isinstance(positional[0].value, cst.Name):
      return None
    funcs = []

    class Funcs(cst.CSTVisitor):

      def visit_Call(self, node: cst.Call) -> None:
        if not isinstance(node.func, cst.Call):
          funcs.append(node.func)

      def visit_Lambda(self, node: cst.Lambda) -> bool:
        del node
        return False

    call.func.visit(Funcs())
    if not funcs or not all(
        (names := self.qnames(f)) and all(n.startswith(_TRANSFORM_ROOTS)
                                          for n in names) for f in funcs):
      return None
    return calls_lib.through_lambda(call)


def _slot(call: cst.Call, me: str) -> tuple[str, int | str]:
  """Where ``call`` passes ``me``: (the method's name, or '' when it is no
  ``obj.method(...)`` call; the argument's index, or its keyword)."""
  name = call.func.attr.value if isinstance(call.func, cst.Attribute) else ''
  index = 0
  for arg in call.args:
    if arg.star:
      return '', 0  # f(*args, self): the place is not known
    if isinstance(arg.value, cst.Name) and arg.value.value == me:
      return (name, arg.keyword.value) if arg.keyword else (name, index)
    if arg.keyword is None:
      index += 1
  return '', 0


def passes_self_only_to_sow(project, fact: MethodFact) -> bool:
  """Whether every function ``fact`` passes self to is a method of the
  project (of any class: the receiver's class is not known, so every method
  of that name) that only sows on the parameter self lands in
  (``SowConfig.maybe_sow_embeddings(x, module)`` of Flax's Gemma example):
  then nothing there flattens the module or keeps it."""
  for name, place in fact.self_passed_to:
    if place == 'builtin':
      continue
    found = [m for c in project.classes.values()
             for n, m in c.methods.items() if n == name] if name else []
    if not found:
      return False
    for method in found:
      param = (place if isinstance(place, str) else
               method.params[place] if place < len(method.params) else None)
      if param is None or param not in method.sow_only:
        return False
  return True


def _find(project, cls: str, name: str, depth: int = 0):
  """The MethodFact of ``name`` as ``cls`` resolves it (None: unknown)."""
  fact = project.classes.get(cls)
  if fact is None or depth > 20:
    return None
  if name in fact.methods:
    return fact.methods[name]
  for base in fact.bases:
    found = _find(project, base, name, depth + 1)
    if found is not None:
      return found
  return None


def ancestors(project, cls: str) -> set[str]:
  seen, todo = set(), [cls]
  while todo:
    current = todo.pop()
    if current not in seen:
      seen.add(current)
      fact = project.classes.get(current)
      todo += list(fact.bases) if fact else []
  return seen


def _submodules_sow(project, root: str) -> bool:
  """Whether a submodule of a ``root`` object may sow."""
  classes = project.closure(root)
  if classes is None:
    return True
  own = ancestors(project, root)
  return any(s.owner is None or (s.owner in classes and s.owner not in own)
             for s in project.sows)


def entry_false(fact: MethodFact, call: CallArgs | None,
                caller_false: frozenset[str] = frozenset()) -> frozenset[str]:
  """The flags of ``fact`` that ``call`` leaves False: a parameter whose
  default is False and that is not passed, or passed ``False``, or passed
  a name the caller knows to be False."""
  if call is None or call.star:
    return frozenset()
  passed = dict(call.keywords)
  for index, value in enumerate(call.positional):
    if index < len(fact.params):
      passed.setdefault(fact.params[index], value)
  false = set()
  for name in fact.false_defaults:
    value = passed.get(name, 'False')
    if value == 'False' or (value.startswith('name:')
                            and value[len('name:'):] in caller_false):
      false.add(name)
  return frozenset(false - fact.assigned)


def _reachable(project, root: str, method: str, call: CallArgs | None):
  """The methods a call of ``method`` may run, each with the flags known
  False in it; None when it may run something the codemod cannot see."""
  first = _find(project, root, method)
  if first is None:
    return None
  seen, todo, found = set(), [(method, entry_false(first, call))], []
  while todo:
    name, false = todo.pop()
    if (name, false) in seen:
      continue
    seen.add((name, false))
    fact = _find(project, root, name)
    if fact is None or fact.escapes:
      return None
    found.append((fact, false))
    for called in fact.calls:
      callee = _find(project, root, called.method)
      if callee is not None:
        todo.append((called.method, entry_false(callee, called, false)))
  return found


def _calls_submodules(project, root: str, fact: MethodFact) -> bool:
  # self.sub(...), self.sub.f(...): an attribute, not a method.
  return fact.attribute_calls or any(
      _find(project, root, c.method) is None for c in fact.calls)


def may_sow(project, root: str, method: str,
            call: CallArgs | None = None) -> bool:
  """Whether calling ``method`` on a ``root`` object (with the arguments
  of ``call``, when known) may sow."""
  if _find(project, root, method) is None:
    return _attribute_may_sow(project, root, method)
  found = _reachable(project, root, method, call)
  if found is None:
    return True
  for fact, false in found:
    if any(not guard & false for guard in fact.sow_guards):
      return True  # a sow that runs whatever the flags
    if _calls_submodules(project, root, fact) and _submodules_sow(project,
                                                                   root):
      return True
  return False


def may_touch(project, root: str, method: str, call: CallArgs | None,
              names: frozenset[str] | None) -> bool:
  """Whether calling ``method`` may sow, or read an attribute named as a
  sown value (``names``; None: any attribute), or call a submodule (which
  may read its own)."""
  found = _reachable(project, root, method, call)
  if found is None:
    return True
  for fact, false in found:
    if any(not guard & false for guard in fact.sow_guards):
      return True
    if _calls_submodules(project, root, fact):
      return True
    if fact.self_reads and (names is None or fact.self_reads & names):
      return True
  return False


def _known_hierarchy(project, root: str) -> bool:
  """Whether every class ``root`` derives from is in the project (or is
  flax's own Module)."""
  for cls in ancestors(project, root):
    if cls not in project.classes and cls != 'flax.nnx.Module':
      return False
  return True


def _attribute_may_sow(project, root: str, name: str) -> bool:
  """``obj.name(...)`` where no class of ``obj`` defines a method ``name``:
  with the whole hierarchy known, ``name`` is an attribute (a submodule,
  ``cs.embed_input(x)``), unless it is Module's own ``sow``/``perturb``."""
  if name in ('sow', 'perturb', '__call__') or not _known_hierarchy(
      project, root):
    return True
  return _submodules_sow(project, root)
