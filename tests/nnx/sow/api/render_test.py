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
"""``render``: names, tags, arrays and bytes as readable text."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import render


class SpellTest(absltest.TestCase):

  def test_names(self):
    self.assertEqual(render.spell('h'), 'h')
    self.assertEqual(render.spell(('layers', 1, 'mlp', '__call__', 'output')),
                     'layers.1.mlp.__call__.output')
    self.assertEqual(render.spell(()), '')

  def test_tags(self):
    self.assertEqual(render.spell_tag(None), '-')
    self.assertEqual(render.spell_tag('m'), "'m'")
    self.assertEqual(render.spell_tag(nnx.Intermediate), 'Intermediate')


class DescribeTest(absltest.TestCase):

  def test_concrete_float_array_has_statistics(self):
    self.assertEqual(render.describe(jnp.array([1.0, 3.0])),
                     'f32[2] mean=2 std=1 min=1 max=3')
    self.assertEqual(render.describe(np.float64(0.5)), 'f64[] 0.5')
    self.assertEqual(render.describe(jnp.zeros((0, 3))), 'f32[0,3]')

  def test_other_values_have_dtype_and_shape_only(self):
    self.assertEqual(render.describe(jnp.arange(3)), 'i32[3]')
    self.assertEqual(render.describe(jnp.int32(7)), 'i32[] 7')
    self.assertEqual(render.describe(jnp.ones((), jnp.bfloat16)), 'bf16[] 1')
    self.assertEqual(
        render.describe(jax.ShapeDtypeStruct((2, 3), jnp.float16)),
        'f16[2,3]')
    seen = []
    jax.jit(lambda x: seen.append(render.describe(x)))(jnp.ones(2))
    self.assertEqual(seen, ['f32[2]'])

  def test_bytes(self):
    self.assertEqual(render.format_bytes(12), '12 B')
    self.assertEqual(render.format_bytes(1536), '1.5 KiB')
    self.assertEqual(render.format_bytes(3 * 2**30), '3.0 GiB')


if __name__ == '__main__':
  absltest.main()
