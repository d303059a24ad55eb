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
"""The graph nodes among a call's arguments (``lift/graph_nodes.py``)."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import graphlib
from flax.nnx.sow.lift import graph_nodes


X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


class Model(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)
    self.calls = nnx.BatchStat(jnp.int32(0))


class GraphNodesTest(absltest.TestCase):

  def test_fast_graph_node_check_agrees_with_flax(self):
    # Staging answers the check itself for plain arrays; Flax's is the oracle.
    def check(values):
      for value in values:
        self.assertEqual(graph_nodes.is_graph_node(value),
                         graphlib.is_graph_node(value), repr(value))

    model = Model(nnx.Rngs(0))
    check([X, np.ones(2), np.float32(1.0), 1.0, None, model, model.calls,
           jax.new_ref(X)])

    def traced(x, ref):
      check([x, ref, jax.new_ref(x)])
      return x

    jax.jit(traced)(X, jax.new_ref(X))
    jax.vmap(traced, in_axes=(0, None))(X, jax.new_ref(X))
    self.assertTrue(graph_nodes.is_graph_node(jax.new_ref(X)))  # not vacuous

  def test_graph_nodes_in_a_tree_are_kept_whole(self):
    model = Model(nnx.Rngs(0))
    variable = nnx.Param(X)
    tree = {'x': X, 'model': model, 'more': [variable, 2.0, (None,)]}
    found = graph_nodes.graph_nodes_in(tree)
    self.assertLen(found, 2)
    self.assertIs(found[0], model)
    self.assertIs(found[1], variable)
    self.assertTrue(graph_nodes.holds_graph_nodes(tree))
    self.assertFalse(graph_nodes.holds_graph_nodes({'x': X, 'n': [1.0]}))


if __name__ == '__main__':
  absltest.main()
