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
"""How the State returned by ``nnx.capture``/``nnx.pop`` is read.

The legacy State is nested by module path, its leaves are ``Intermediate``
Variables holding a tuple; the functional ``capture`` returns a flat dict
``{name: tuple}``. A root-level read ``s['n'][i]`` means the same in both;
``s['n'].value`` and ``s.n`` are mapped; anything else (a path, an
iteration, the State passed on) is a reason not to migrate.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
from libcst import metadata

_STATE_METHODS = {
    'to_pure_dict': 'to-pure-dict', 'flat_state': 'to-flat-state',
    'items': 'state-use', 'keys': 'state-use', 'values': 'state-use',
    'filter': 'state-use', 'split': 'state-use', 'get': 'state-use',
}


@dataclasses.dataclass(eq=False)
class Access:
  """One read ``s['n']...`` of the State: ``node`` is what gets replaced."""

  name: str
  node: cst.CSTNode  # s['n'].value, s.n.value, s.n or s['n']
  value: bool  # followed by .value


@dataclasses.dataclass(eq=False)
class Consumers:
  names: frozenset[str] | None  # None: unknown (a reason is set)
  accesses: list[Access]
  reason: tuple[str, str] | None = None
  call: cst.Call | None = None  # nnx.capture(f, T)(x): the outer call


def _code(node: cst.CSTNode) -> str:
  text = cst.Module([]).code_for_node(node)
  return text if len(text) <= 50 else text[:47] + '...'


def _full(node: cst.CSTNode) -> str:
  return cst.Module([]).code_for_node(node)


def _literal_key(node: cst.Subscript) -> str | None:
  if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
    return None
  value = node.slice[0].slice.value
  if isinstance(value, cst.SimpleString) and isinstance(
      value.evaluated_value, str):
    return value.evaluated_value
  return None


def read_chain(collector, top: cst.CSTNode):
  """Classifies the expression rooted at ``top`` (the State).

  Returns:
    (access, None) for a root-level read, or (None, (code, detail)).
  """
  parent = collector.parent(top)
  name, node = None, top
  if isinstance(parent, cst.Subscript) and parent.value is top:
    name, node = _literal_key(parent), parent
    if name is None:
      return None, ('state-use', f'the State is indexed with a computed key '
                    f'in {_code(parent)}')
  elif isinstance(parent, cst.Attribute) and parent.value is top:
    attr = parent.attr.value
    if attr in _STATE_METHODS:
      return None, (_STATE_METHODS[attr], f'State.{attr}() over the captured '
                    'values; read s[name] instead')
    name, node = attr, parent
    collector.handled.add(parent)  # not an attribute read of the module
  elif isinstance(parent, cst.Arg):
    call = collector.parent(parent)
    func = _code(call.func) if isinstance(call, cst.Call) else '?'
    if func.startswith(('jax.tree', 'jax.tree_util')):
      return None, ('tree-leaves', f'{func}() over the captured State')
    if 'to_flat_state' in func or 'flat_state' in func:
      return None, ('to-flat-state', f'{func}() flattens the captured State')
    return None, ('escaping-state', f'the captured State is passed to {func}()')
  elif isinstance(parent, cst.ComparisonTarget) and isinstance(
      parent.operator, (cst.In, cst.NotIn)):
    return None, None  # `'n' in s` means the same for the functional dict
  elif isinstance(parent, (cst.Return, cst.Yield)):
    return None, ('escaping-state', 'the captured State is returned')
  elif isinstance(parent, (cst.For, cst.CompFor)):
    return None, ('state-use', 'the captured State is iterated')
  else:
    return None, ('escaping-state', 'the captured State is used as a whole '
                  f'in {_code(parent) if parent is not None else "?"}')
  after = collector.parent(node)
  if isinstance(after, cst.Subscript) and after.value is node:
    if _literal_key(after) is not None:
      return None, ('nested-consumer', f'{_code(after)} reads by module path; '
                    'functional names are flat')
    return Access(name, node, False), None
  if (isinstance(after, cst.Attribute) and after.value is node
      and after.attr.value == 'value'):
    return Access(name, after, True), None
  return None, ('state-use', f'{_code(node)} is used as a Variable (no [i] '
                'or .value after it)')


def state_reads(collector, target: cst.CSTNode):
  """The reads of the State bound to the Name ``target``."""
  if not isinstance(target, cst.Name):
    return None, [], ('unknown-result', 'the State is not bound to a name')
  if target.value == '_':
    return frozenset(), [], None
  scope = collector.get_metadata(metadata.ScopeProvider, target, None)
  if scope is None:
    return None, [], ('state-use', 'the State has no scope')
  assignments = [a for a in scope.assignments[target.value]
                 if isinstance(a, metadata.Assignment)]
  if len(assignments) != 1:
    return None, [], ('state-use', f'{target.value} is assigned more than once')
  names, accesses = set(), []
  for access in assignments[0].references:
    found, reason = read_chain(collector, access.node)
    if reason is not None:
      return None, [], reason
    if found is None:
      continue
    names.add(found.name)
    accesses.append(found)
  return frozenset(names), accesses, None


def _pair_target(collector, call: cst.CSTNode):
  # `y, s = call` -> s
  assign = collector.parent(call)
  if (isinstance(assign, cst.Assign) and len(assign.targets) == 1
      and isinstance(assign.targets[0].target, (cst.Tuple, cst.List))
      and len(assign.targets[0].target.elements) == 2):
    return assign.targets[0].target.elements[1].value
  return None


def analyse_capture(collector, site) -> Consumers:
  """``y, s = nnx.capture(f, T)(x)`` and the reads of ``s``."""
  outer = collector.parent(site.node)
  if site.decorator and isinstance(outer, cst.Decorator):
    function = collector.parent(outer)
    if isinstance(function, cst.FunctionDef) and len(function.decorators) == 1:
      return _stored_capture(collector, function.name, function)
  if not site.decorator and isinstance(outer, cst.Assign) and len(
      outer.targets) == 1 and isinstance(outer.targets[0].target, cst.Name):
    return _stored_capture(collector, outer.targets[0].target)
  if site.decorator or not (isinstance(outer, cst.Call)
                            and outer.func is site.node):
    return Consumers(None, [], ('unknown-result', 'the wrapped function is '
                                'stored or decorated; the codemod follows only '
                                'y, s = nnx.capture(f, T)(x)'))
  target = _pair_target(collector, outer)
  if target is None:
    return Consumers(None, [], ('unknown-result', 'the result is not unpacked '
                                'as y, s = nnx.capture(f, T)(x)'), outer)
  names, accesses, reason = state_reads(collector, target)
  return Consumers(names, accesses, reason, outer)


def _stored_capture(collector, name: cst.Name,
                    definition: cst.CSTNode | None = None) -> Consumers:
  # forward = nnx.capture(m, T); y, s = forward(x); ... (or a decorator)
  scope = collector.get_metadata(metadata.ScopeProvider, definition or name,
                                 None)
  assignments = [a for a in (scope.assignments[name.value] if scope else ())
                 if isinstance(a, metadata.Assignment)]
  unknown = Consumers(None, [], ('unknown-result', f'{name.value} is not only '
                                 f'called as y, s = {name.value}(x)'))
  if len(assignments) != 1 or not assignments[0].references:
    return unknown
  names, accesses = set(), []
  for reference in assignments[0].references:
    call = collector.parent(reference.node)
    if not (isinstance(call, cst.Call) and call.func is reference.node):
      return unknown
    target = _pair_target(collector, call)
    if target is None:
      return unknown
    found, reads, reason = state_reads(collector, target)
    if reason is not None:
      return Consumers(None, [], reason)
    names |= found
    accesses += reads
  return Consumers(frozenset(names), accesses)
