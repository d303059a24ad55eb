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
"""Writing a staged call's changed leaves back into the caller's graph
nodes, immutable pytrees among them (``lift/write_back.py``)."""

import dataclasses

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import graphlib
from flax.nnx.sow.lift import write_back


@dataclasses.dataclass(frozen=True)
class Bounds:
  lo: jax.Array
  hi: jax.Array


jax.tree_util.register_dataclass(Bounds, data_fields=['lo', 'hi'],
                                 meta_fields=[])


class Model(nnx.Module):

  def __init__(self):
    self.w = nnx.Param(jnp.ones(2))
    self.pair = nnx.data((jnp.zeros(2), jnp.ones(3)))
    self.bounds = nnx.data((Bounds(jnp.zeros(1), jnp.ones(1)), jnp.ones(1)))
    self.plain = nnx.data([jnp.zeros(2)])


def flatten(model):
  return graphlib.flatten([model], with_paths=True)[1]


def changes(flat, values):
  return [(flat.paths.index(path), value) for path, value in values.items()]


class WriteBackTest(absltest.TestCase):

  def test_a_variable_is_updated_in_place(self):
    model = Model()
    w = model.w
    flat = flatten(model)
    write_back.write_back([model], flat,
                          changes(flat, {(0, 'w'): jnp.full(2, 7.0)}))
    self.assertIs(model.w, w)
    np.testing.assert_array_equal(model.w[...], [7.0, 7.0])

  def test_an_immutable_pytree_is_rebuilt_with_its_other_leaves(self):
    model = Model()
    pair = model.pair
    flat = flatten(model)
    write_back.write_back([model], flat,
                          changes(flat, {(0, 'pair', 0): jnp.full(2, 5.0)}))
    self.assertIsNot(model.pair, pair)
    self.assertIsInstance(model.pair, tuple)
    np.testing.assert_array_equal(model.pair[0], [5.0, 5.0])
    self.assertIs(model.pair[1], pair[1])

  def test_nested_immutable_pytrees_are_rebuilt_from_the_outermost(self):
    model = Model()
    flat = flatten(model)
    write_back.write_back(
        [model], flat, changes(flat, {(0, 'bounds', 0, 'hi'): jnp.zeros(1)}))
    bounds, other = model.bounds
    self.assertIsInstance(bounds, Bounds)
    np.testing.assert_array_equal(bounds.hi, [0.0])
    np.testing.assert_array_equal(bounds.lo, [0.0])
    np.testing.assert_array_equal(other, [1.0])

  def test_a_mutable_container_is_set_in_place(self):
    model = Model()
    plain = model.plain
    flat = flatten(model)
    write_back.write_back([model], flat,
                          changes(flat, {(0, 'plain', 0): jnp.ones(2)}))
    self.assertIs(model.plain, plain)
    np.testing.assert_array_equal(model.plain[0], [1.0, 1.0])

  def test_nothing_changed_writes_nothing(self):
    model = Model()
    pair = model.pair
    write_back.write_back([model], flatten(model), [])
    self.assertIs(model.pair, pair)


if __name__ == '__main__':
  absltest.main()
