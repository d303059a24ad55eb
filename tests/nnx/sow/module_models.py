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
"""The models, oracles and base test case of the ``Module.sow`` and tap
tests: blocks that ``Module.sow`` and ``Module.perturb``, in a list, an
ensemble and a scanned stack."""

from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
import sow_layout


LAYERS = 3
MEMBERS = 4


class Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)

  def __call__(self, x):
    pre = self.perturb('pre', self.linear(x))
    h = jnp.tanh(pre)
    self.sow(nnx.Intermediate, 'h', h)
    return h


class Model(nnx.Module):

  def __init__(self, rngs):
    self.blocks = nnx.List([Block(rngs) for _ in range(2)])

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    return x


def forward(model, x):
  return model(x)


def linear_of(params, x):
  """A Linear recomputed from its parameters."""
  return x @ params.kernel[...] + params.bias[...]


def model_oracle(model, x):
  """(pre-activations, h) of each block, recomputed directly."""
  pres, hs = [], []
  for block in model.blocks:
    pre = linear_of(block.linear, x)
    x = jnp.tanh(pre)
    pres.append(pre)
    hs.append(x)
  return pres, hs


@nnx.split_rngs(splits=MEMBERS)
@nnx.vmap(in_axes=(0,), out_axes=0)
def make_ensemble(rngs):
  return Block(rngs)


class Stack(nnx.Module):
  """Stacked layers run by nnx.scan, as Flax's scan-over-layers guide."""

  def __init__(self, rngs):
    @nnx.split_rngs(splits=LAYERS)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def make(rngs):
      return Block(rngs)

    self.layers = make(rngs)

  def __call__(self, x):
    @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
    def step(x, layer):
      return layer(x)

    return step(x, self.layers)


def stacked_oracle(kernel, bias, x):
  """h per member/layer of Blocks with stacked parameters."""
  return [jnp.tanh(x @ kernel[i] + bias[i]) for i in range(kernel.shape[0])]


X_MODULES = jnp.linspace(-1.0, 1.0, 3)


class ModulesTestCase(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.enterContext(sow_layout.overlay())
    self.model = Model(nnx.Rngs(0))

  def assert_untouched(self, model, before_vars, before_state):
    self.assertEqual(set(vars(model)), before_vars)
    for block in model.blocks:
      self.assertIs(type(block), Block)
      self.assertNotIn('h', vars(block))
      self.assertNotIn('pre', vars(block))
      self.assertNotIn('_pytree__sow_paths', vars(block))
    jax.tree.map(
        np.testing.assert_array_equal, nnx.state(model), before_state
    )

  def snapshot(self, model):
    return set(vars(model)), jax.tree.map(np.asarray, nnx.state(model))
