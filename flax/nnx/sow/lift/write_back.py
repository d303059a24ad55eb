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
"""Writing a call's changed leaves back into the caller's graph nodes."""

from __future__ import annotations

import typing as tp

from flax.nnx import graphlib
from flax.nnx import statelib
from flax.nnx import variablelib


def write_back(nodes, flat_state, changed) -> None:
  """Writes the changed leaves into the caller's objects (``nnx.update``).

  ``nnx.update`` sets a leaf on the node that holds it, which fails if that
  node is an immutable pytree (a tuple, a NamedTuple, a frozen dataclass
  marked ``nnx.data``). Such a node is rebuilt with its new leaves and set on
  the mutable node above it, as ``nnx.jit`` writes back its outputs (and as a
  direct call that changes the values replaces the pytree).
  """
  if not changed:
    return
  paths = flat_state.paths
  in_place = []
  # Per immutable pytree, by its path: (holder, key, pytree, its changes).
  rebuilt: dict[tuple[tp.Any, ...], tuple[tp.Any, tp.Any, tp.Any, dict]] = {}
  for i, value in changed:
    path = paths[i]
    # A Variable or an array reference is updated in place, wherever it is.
    leaf = flat_state.leaves[i]
    frozen = None
    if not isinstance(
        leaf, (variablelib.Variable, variablelib.HijaxVariable)
    ) and not variablelib.is_array_ref(leaf):
      frozen = _frozen_ancestor(nodes, path)
    if frozen is None:
      in_place.append((path, value))
      continue
    depth, holder, node = frozen
    _, _, _, changes = rebuilt.setdefault(
        path[:depth], (holder, path[depth - 1], node, {})
    )
    changes[path[depth:]] = value
  if in_place:
    graphlib.update(nodes, statelib.from_flat_state(in_place))
  for holder, key, node, changes in rebuilt.values():
    # `_frozen_ancestor` found `holder` mutable: a graph node, or a pytree
    # node with `set_key`.
    set_key = tp.cast(tp.Any, graphlib.get_node_impl(holder)).set_key
    set_key(holder, key, _rebuild(node, changes))


def _is_immutable_node(x: tp.Any) -> bool:
  impl = graphlib.get_node_impl(x)
  return isinstance(impl, graphlib.PytreeNodeImpl) and impl.set_key is None


def _frozen_ancestor(root, path):
  """Where the leaf at ``path`` must be written if its holder is immutable.

  Returns ``None`` if the node holding the leaf can be set in place;
  otherwise ``(depth, holder, node)``: ``node``, at ``path[:depth]``, is the
  outermost immutable pytree of the chain of immutable ones holding the leaf,
  and ``holder`` the mutable node whose key ``path[depth - 1]`` holds it.
  """
  chain = [root]
  for key in path[:-1]:
    impl = graphlib.get_node_impl(chain[-1])
    children = None if impl is None else impl.node_dict(chain[-1])
    if children is None or key not in children:
      return None  # not a plain nesting: left to `nnx.update`
    chain.append(children[key])
  depth = len(chain) - 1
  if not _is_immutable_node(chain[depth]):
    return None
  while depth > 1 and _is_immutable_node(chain[depth - 1]):
    depth -= 1
  return depth, chain[depth - 1], chain[depth]


def _rebuild(node, changes: dict[tuple[tp.Any, ...], tp.Any]) -> tp.Any:
  """A copy of the immutable pytree ``node`` with the leaves at ``changes``
  (paths relative to ``node``) replaced; other children are kept as is."""
  impl = tp.cast(graphlib.PytreeNodeImpl, graphlib.get_node_impl(node))
  children, metadata = impl.flatten(node)
  new_children = []
  for key, child in children:
    below = {path[1:]: v for path, v in changes.items() if path[0] == key}
    if () in below:
      child = below[()]
    elif below:
      child = _rebuild(child, below)
    new_children.append((key, child))
  return impl.unflatten(new_children, metadata)
