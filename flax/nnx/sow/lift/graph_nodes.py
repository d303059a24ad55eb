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
"""The graph nodes (NNX modules, Variables, their containers) in a tree."""

from __future__ import annotations

import typing as tp

import jax

from flax.nnx import graphlib
from flax.nnx import variablelib
from flax.nnx.sow.transform import primitive


def is_graph_node(leaf: tp.Any) -> bool:
  """``graphlib.is_graph_node``, answered at once for a plain array.

  Flax's check goes through ``isinstance`` on abstract classes and builds
  the abstract value of every array (to find array references), which costs
  more than the rest of staging it. A concrete JAX or NumPy array is never a
  graph node nor a reference; a traced one is a reference only if its type
  says so.
  """
  if primitive.is_array(leaf) and (
      not isinstance(leaf, jax.core.Tracer)
      or type(jax.typeof(leaf)) is jax.core.ShapedArray
  ):
    return False
  return graphlib.is_graph_node(leaf)


def graph_nodes_in(tree: tp.Any) -> list[tp.Any]:
  """The graph nodes among the leaves of ``tree``, graph nodes kept whole."""
  return [
      leaf
      for leaf in jax.tree_util.tree_leaves(tree, is_leaf=is_graph_node)
      if is_graph_node(leaf)
  ]


def holds_graph_nodes(tree: tp.Any) -> bool:
  """Whether a leaf of ``tree`` is a graph node."""
  return any(
      is_graph_node(leaf)
      for leaf in jax.tree_util.tree_leaves(tree, is_leaf=is_graph_node)
  )


def arrays_in(tree: tp.Any) -> list[tp.Any]:
  """The array leaves of ``tree``, with the values of the Variables of its
  graph nodes (what a call returned or left in its arguments' modules)."""
  arrays = []
  for leaf in jax.tree_util.tree_leaves(tree, is_leaf=is_graph_node):
    if not is_graph_node(leaf):
      arrays.append(leaf)
      continue
    for _, value in graphlib.iter_graph([leaf], graph=True):
      if isinstance(value, variablelib.Variable):
        arrays.extend(jax.tree_util.tree_leaves(value.get_raw_value()))
  return arrays
