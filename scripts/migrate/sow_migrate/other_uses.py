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

import libcst as cst

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
                              and receiver.value in ('self', 'cls')):
        line, col = self.position(node)
        self.facts.others.append(OtherUse(
            'may-read', self.path, line, self.owner(),
            f'{_code(node)} reads an attribute whose name is computed', None,
            _code(receiver), col=col, unit=self._unit()))
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
