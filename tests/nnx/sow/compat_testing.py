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
"""What the tests of ``flax.nnx.capture_compat`` share: the models, the
values they sow recomputed by hand, and the test case that installs the
layer for each test."""

from absl.testing import parameterized
import jax.numpy as jnp

from flax import nnx
from flax.nnx import capture_compat
import sow_layout
import sow_testing

X = jnp.array([0.5, -1.0, 2.0], jnp.float32)


class Block(nnx.Module):

  def __init__(self, din, dout, rngs):
    self.linear = nnx.Linear(din, dout, rngs=rngs)

  def __call__(self, x):
    h = self.linear(x)
    self.sow(nnx.Intermediate, 'h', h)
    return jnp.tanh(h)


class Net(nnx.Module):

  def __init__(self, rngs, shared=False):
    self.blocks = nnx.List([Block(3, 4, rngs), Block(4, 4, rngs)])
    self.head = nnx.Linear(4, 2, rngs=rngs)
    if shared:
      self.again = self.blocks[1]

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    if hasattr(self, 'again'):
      x = self.again(x)
    out = self.head(x)
    self.sow(nnx.Intermediate, 'out', out)
    return out


def by_hand(net, x):
  """Net's sown values, recomputed from its parameters: {path: [values]}."""
  values = {}
  blocks = list(net.blocks)
  if hasattr(net, 'again'):
    blocks.append(net.again)
  for block in blocks:
    h = x @ block.linear.kernel[...] + block.linear.bias[...]
    path = ('blocks', list(net.blocks).index(block), 'h')
    values.setdefault(path, []).append(h)
    x = jnp.tanh(h)
  out = x @ net.head.kernel[...] + net.head.bias[...]
  values[('out',)] = [out]
  return out, values

flat = sow_testing.flat


class FeaturesModel(nnx.Module):
  """A public method, a private one and ``__call__`` (``method_outputs``)."""

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 2, rngs=rngs)

  def features(self, x):
    return self.linear(x)

  def _private(self, x):
    return x + 1

  def __call__(self, x):
    return self._private(self.features(x)).sum()


class PerturbedModel(nnx.Module):
  """Perturbs and sows the same intermediate (the two-phase workflow)."""

  def __init__(self, rngs):
    self.a = nnx.Linear(3, 3, rngs=rngs)
    self.b = nnx.Linear(3, 1, rngs=rngs)

  def __call__(self, x):
    h = self.a(x)
    h = self.perturb('h', h)
    self.sow(nnx.Intermediate, 'h', h)
    return jnp.sum(self.b(jnp.tanh(h)) ** 2)


class UpdatingModel(nnx.Module):
  """Updates its Variables: a counter, batch statistics, dropout RNGs."""

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)
    self.norm = nnx.BatchNorm(3, rngs=rngs)
    self.dropout = nnx.Dropout(0.5, rngs=rngs)
    self.calls = nnx.Variable(jnp.zeros((), jnp.int32))

  def __call__(self, x):
    self.calls.set_value(self.calls.get_value() + 1)
    h = self.norm(self.linear(x))
    self.sow(nnx.Intermediate, 'h', h)
    return self.dropout(h)


class CompatTestCase(sow_testing.StateAssertions, parameterized.TestCase):
  """Installs the compat layer for each test and checks it left no residue."""

  def setUp(self):
    super().setUp()
    self.enterContext(sow_layout.overlay())

  def tearDown(self):
    self.assertEmpty(capture_compat.frames.FRAMES.stack)
    super().tearDown()

  def assertCollected(self, state, values: dict, var_type=nnx.Intermediate):
    """``state`` holds exactly ``values`` ({path: [value, ...]}) as tuples."""
    got = flat(state)
    self.assertEqual(sorted(p for p, _, _ in got), sorted(values))
    for path, t, value in got:
      self.assertIs(t, var_type)
      self.assertIsInstance(value, tuple)
      self.assertTreeClose(value, tuple(values[path]))
