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
"""Uses of ``nnx.Intermediate`` outside a sow/capture/pop, and attribute reads.

A filter (``nnx.state(model, nnx.Intermediate)``, ``nnx.StateAxes({...})``)
selects the values sown in what it filters; a Variable created directly
(``nnx.Intermediate(x)``) is popped by ``nnx.pop`` but not captured; a sown
value read as an attribute (``model.features.value``) means the model ran
outside a capture. The visitor methods here are mixed into
:class:`facts.Collector`, which provides the metadata helpers.
"""

from __future__ import annotations

import dataclasses
import os

import libcst as cst
from libcst import metadata

from . import names as nm


@dataclasses.dataclass
class OtherUse:
  """nnx.Intermediate used outside a sow/capture/pop (a filter, a Variable)."""

  # 'filter-use', 'direct-intermediate', 'attribute-read', 'may-read' or
  # 'captures-read'
  code: str
  path: str
  line: int
  owner: str | None
  detail: str
  name: str | None = None  # the attribute read
  receiver: str | None = None  # `model` in model.features.value
  # A filter applied to an object: the class of that object, when known
  # (None: it may select the sows of any object).
  root: str | None = None
  col: int = 1
  unit: str = ''  # 'cell 3' in a notebook; '' elsewhere
  # may-read: what the computed name is known to be (``Spelling``).
  spelling: Spelling | None = None


@dataclasses.dataclass(frozen=True)
class Spelling:
  """What is known of a name computed at run time: one of ``exact`` (None:
  any string), starting with ``prefix`` and ending with ``suffix``, the two
  not overlapping (``f'layer_{i}_out'``: prefix ``layer_``, suffix
  ``_out``)."""

  exact: frozenset[str] | None = None
  prefix: str = ''
  suffix: str = ''

  def admits(self, name: str) -> bool:
    return ((self.exact is None or name in self.exact)
            and len(name) >= len(self.prefix) + len(self.suffix)
            and name.startswith(self.prefix) and name.endswith(self.suffix))

  def __str__(self) -> str:
    if self.exact is not None:
      return 'one of ' + ', '.join(repr(n) for n in sorted(self.exact))
    return f'{self.prefix!r}...{self.suffix!r}'


ANY = Spelling()


def _single(spelling: Spelling | None) -> str | None:
  """The one string of ``spelling``, if it is one literal."""
  if spelling is None or spelling.exact is None or len(spelling.exact) != 1:
    return None
  return next(iter(spelling.exact))


def _head(spelling: Spelling) -> str:
  """The text every string of ``spelling`` starts with."""
  if spelling.exact is not None:
    return os.path.commonprefix(sorted(spelling.exact))
  return spelling.prefix


def _tail(spelling: Spelling) -> str:
  """The text every string of ``spelling`` ends with."""
  if spelling.exact is not None:
    return os.path.commonprefix([n[::-1] for n in spelling.exact])[::-1]
  return spelling.suffix


def _code(node: cst.CSTNode | None) -> str:
  if node is None:
    return '?'
  text = cst.Module([]).code_for_node(node)
  return text if len(text) <= 40 else text[:37] + '...'


class OtherUses:
  """Collector methods recording :class:`OtherUse` facts."""

  def visit_Name(self, node: cst.Name) -> None:
    self._other_use(node)

  def visit_Attribute(self, node: cst.Attribute) -> None:
    self._other_use(node)
    self._attribute_read(node)
    if node.attr.value == '__captures__':
      self._captures_read(node, _code(node))

  def _captures_read(self, node: cst.CSTNode, text: str) -> None:
    # What Flax 0.12.8's nnx.capture keeps on each module while it runs.
    line, col = self.position(node)
    self.facts.others.append(OtherUse(
        'captures-read', self.path, line, self.owner(),
        f'{text} reads what Flax 0.12.8\'s nnx.capture keeps on a module '
        'while it runs; capture_compat\'s nnx.capture (and Flax with Hijax '
        'Variables) keeps nothing there: read the State it returns',
        col=col, unit=self._unit()))

  def _unit(self) -> str:
    return self.unit_label if self.unit_label.startswith('cell') else ''

  def getattr_read(self, node: cst.Call) -> None:
    """``getattr(model, 'features')``: an attribute read spelled as a call
    (the name is matched against the sows later)."""
    if 'builtins.getattr' not in self.qnames(node.func) or len(
        node.args) < 2:
      return
    name = node.args[1].value
    receiver = node.args[0].value
    if not isinstance(name, cst.SimpleString) or not isinstance(
        name.evaluated_value, str):
      # getattr(model, name): it may read any sown name (decide.reader_flags
      # says which).
      # Not of self, nor of cls (a class: a classmethod's getattr(cls,
      # name) reads a class attribute, never a sown value).
      # Nor of type(x): a class too.
      is_type = isinstance(receiver, cst.Call) and 'builtins.type' in (
          self.qnames(receiver.func))
      if not is_type and not (isinstance(receiver, cst.Name)
                              and receiver.value in ('self', 'cls')) and (
                                  not self._imported_module(receiver)):
        line, col = self.position(node)
        self.facts.others.append(OtherUse(
            'may-read', self.path, line, self.owner(),
            f'{_code(node)} reads an attribute whose name is computed', None,
            _code(receiver), col=col, unit=self._unit(),
            spelling=self._spelling(name) or ANY))
      return
    if name.evaluated_value == '__captures__':
      self._captures_read(node, _code(node))
      return
    if isinstance(receiver, cst.Name) and receiver.value == 'self':
      return
    line, col = self.position(node)
    self.facts.others.append(OtherUse(
        'attribute-read', self.path, line, self.owner(),
        f'read as an attribute, {_code(node)},', name.evaluated_value,
        _code(receiver), col=col, unit=self._unit()))

  def _assignments(self, node: cst.Name) -> list | None:
    """The assignments ``node`` may read (None: not known, as for a name
    bound in another cell of a notebook)."""
    scope = self.get_metadata(metadata.ScopeProvider, node, None)
    if scope is None:
      return None
    found = []
    for access in scope.accesses[node]:
      if access.node is node:
        found += access.referents
    return found or None

  def _imported_module(self, receiver: cst.CSTNode) -> bool:
    """Whether ``receiver`` is a name bound only by ``import x`` (a module,
    never an NNX Module instance: ``getattr(jnp, name)``)."""
    if not isinstance(receiver, cst.Name):
      return False
    found = self._assignments(receiver)
    return bool(found) and all(
        isinstance(a, metadata.ImportAssignment)
        and isinstance(a.node, cst.Import) for a in found)

  def _spelling(self, node: cst.CSTNode, depth: int = 0) -> Spelling | None:
    """What the code shows of the string ``node`` evaluates to (None: not
    even that it is a ``str``): a literal; the literal text around an
    f-string's or a literal's ``str.format`` fields; the text up to the
    first ``%`` conversion of a literal formatted with a tuple; ``+`` of two
    such strings; or a local name assigned only literals (by ``=``, or as
    the target of a ``for`` over literals).

    Only what is a ``str`` for certain: ``'a' + x`` with ``x`` of unknown
    type may be ``x.__radd__('a')``, any string.
    """
    if depth > 8:
      return None
    if isinstance(node, cst.SimpleString):
      value = node.evaluated_value
      return Spelling(frozenset({value})) if isinstance(value, str) else None
    if isinstance(node, cst.FormattedString):
      if 'b' in node.prefix.lower():
        return None
      parts = list(node.parts)
      texts = [isinstance(p, cst.FormattedStringText) for p in parts]
      if all(texts) or ('r' not in node.prefix.lower() and any(
          '\\' in p.value for p, text in zip(parts, texts) if text)):
        return ANY  # a str, but escapes: its text is not its value
      head = ''.join(p.value for p in parts[:texts.index(False)])
      tail = ''.join(p.value for p in parts[len(parts) - texts[::-1].index(
          False):])
      return Spelling(None, head.replace('{{', '{').replace('}}', '}'),
                      tail.replace('{{', '{').replace('}}', '}'))
    if isinstance(node, cst.BinaryOperation):
      left = self._spelling(node.left, depth + 1)
      if isinstance(node.operator, cst.Add):
        right = self._spelling(node.right, depth + 1)
        if left is None or right is None:
          return None
        return Spelling(None, _head(left), _tail(right))
      if isinstance(node.operator, cst.Modulo) and _single(left) and (
          isinstance(node.right, cst.Tuple)
          or self._spelling(node.right, depth + 1) is not None):
        # 'layer_%d' % (i,): the text up to the first conversion.
        return Spelling(None, _single(left).split('%', 1)[0])
      return None
    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == 'format'):
      # 'layer_{}'.format(i): the text before the first field, after the
      # last.
      text = _single(self._spelling(node.func.value, depth + 1))
      if text is not None and '{' in text:
        return Spelling(None, text.split('{', 1)[0], text.rsplit('}', 1)[-1])
      return None
    if isinstance(node, cst.Name):
      return self._name_spelling(node, depth)
    return None

  def _name_spelling(self, node: cst.Name, depth: int) -> Spelling | None:
    found = self._assignments(node)
    if not found:
      return None
    spellings = []
    for assignment in found:
      # Names of a function or comprehension only: a module-level name may
      # be set from another module.
      if not isinstance(assignment, metadata.Assignment) or not isinstance(
          assignment.scope, (metadata.FunctionScope,
                             metadata.ComprehensionScope)) or not isinstance(
                                 assignment.node, cst.Name):
        return None
      target = assignment.node
      parent = self.parent(target)
      if isinstance(parent, cst.AssignTarget):
        statement = self.parent(parent)
        if not isinstance(statement, cst.Assign):
          return None
        items = [statement.value]
      elif isinstance(parent, (cst.For, cst.CompFor)) and (
          parent.target is target):
        if not isinstance(parent.iter, (cst.Tuple, cst.List, cst.Set)) or any(
            isinstance(e, cst.StarredElement) for e in parent.iter.elements):
          return None
        items = [e.value for e in parent.iter.elements]
      else:
        return None  # a parameter, an augmented assignment, an unpacking...
      spellings += [self._spelling(item, depth + 1) for item in items]
    if None in spellings:
      return None
    if len(spellings) == 1:
      return spellings[0]
    if any(s.exact is None for s in spellings):
      return ANY  # a str: what is common to them is not worth the risk
    return Spelling(frozenset().union(*(s.exact for s in spellings)))

  def _attribute_read(self, node: cst.Attribute) -> None:
    # `model.features.value`, `model.features[0]`: a sown value left on the
    # module by a call outside nnx.capture, read as an attribute. The name
    # is matched against the sows later.
    if node in self.handled or (isinstance(node.value, cst.Name)
                                and node.value.value == 'self'):
      return
    parent = self.parent(node)
    if isinstance(parent, cst.Attribute) and parent.value is node:
      if parent.attr.value not in ('value', 'get_value'):
        return
    elif isinstance(parent, cst.Subscript) and parent.value is node:
      index = parent.slice[0].slice if len(parent.slice) == 1 else None
      if not (isinstance(index, cst.Index) and isinstance(
          index.value, (cst.Integer, cst.UnaryOperation))):
        return
    else:
      return
    line, col = self.position(node)
    self.facts.others.append(OtherUse(
        'attribute-read', self.path, line, self.owner(),
        f'read as an attribute, {_code(parent)},', node.attr.value,
        _code(node.value), col=col, unit=self._unit()))

  def _other_use(self, node: cst.CSTNode) -> None:
    if node in self.handled:
      return
    names = self.qnames(node)
    if nm.INTERMEDIATE not in names:
      return
    parent = self.parent(node)
    if isinstance(parent, cst.Attribute) and parent.value is node:
      return  # the prefix of a longer name
    current = parent
    while current is not None:
      if isinstance(current, (cst.Import, cst.ImportFrom)):
        return
      if isinstance(current, cst.Arg) and isinstance(
          self.parent(current), cst.ClassDef):
        return  # a base class: a subclass is recorded with the class
      if isinstance(current, cst.Call):
        break
      current = self.parent(current)
    line, col = self.position(node)
    if (isinstance(parent, cst.Call) and parent.func is node):
      self.facts.others.append(OtherUse(
          'direct-intermediate', self.path, line, self.owner(),
          'an nnx.Intermediate Variable is created directly; nnx.pop collects '
          'it, capture does not', col=col, unit=self._unit()))
      return
    call = current if isinstance(current, cst.Call) else None
    context = _code(call.func) if call is not None else 'an expression'
    root = None
    if (call is not None and self.qnames(call.func) & nm.FILTER_CALLS
        and call.args and call.args[0].keyword is None
        and call.args[0].value is not node):
      # nnx.state(model, nnx.Intermediate): what `model` is made from.
      root = self._root_class(call.args[0].value)
    self.facts.others.append(OtherUse(
        'filter-use', self.path, line, self.owner(),
        f'nnx.Intermediate used in {context}', root=root, col=col,
        unit=self._unit()))
