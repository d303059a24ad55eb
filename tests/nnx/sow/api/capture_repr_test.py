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
"""What ``capture`` returns, printed: a table of names and summarised
arrays (``render``), and treescope's rendering of it."""

from absl.testing import absltest
import jax
import jax.numpy as jnp

from flax.nnx.sow import capture
from flax.nnx.sow import sow


def small(x):
  h = sow(jnp.tanh(x), name=('blocks', 0, 'attn', 'pattern'))
  sow({'sum': jnp.sum(h), 'n': jnp.int32(x.size)}, name='stats', tag='m')
  sow(h[0], name='first')
  sow(h[1], name='first')
  return h


class CollectedReprTest(absltest.TestCase):

  def test_golden_text(self):
    _, collected = capture(small)(jnp.array([0.5, -1.0]))
    self.assertEqual(repr(collected), '\n'.join([
        'Collected(3 names, 4 entries, 24 B)',
        '  name                   entry    value',
        '  blocks.0.attn.pattern  [0]      f32[2] mean=-0.1497 std=0.6119'
        ' min=-0.7616 max=0.4621',
        '  stats                  [0].n    i32[] 2',
        '                         [0].sum  f32[] -0.2995',
        '  first                  [0]      f32[] 0.4621',
        '                         [1]      f32[] -0.7616',
    ]))

  def test_at_80_columns_long_names_and_values_fold(self):
    long_name = tuple(f'layer_with_a_long_name_{i}' for i in range(3))
    _, collected = capture(
        lambda x: sow(jnp.tanh(x), name=long_name))(jnp.linspace(-1, 1, 7))
    text = collected.text(width=80)
    lines = text.splitlines()
    self.assertTrue(all(len(line) <= 80 for line in lines), text)
    self.assertGreater(len(lines), 3)  # the row took more than one line
    # Nothing is lost: the name and the statistics are all there, folded.
    column = lines[1].index('entry')
    self.assertEqual(''.join(line[:column].strip() for line in lines[2:]),
                     '.'.join(long_name))
    self.assertIn('max=0.7616', text)
    # Not a terminal (a test, a log): a line per row, as str() gives.
    self.assertEqual(collected.text(), repr(collected))
    self.assertLen(repr(collected).splitlines(), 3)

  def test_traced_values_have_no_statistics(self):
    texts = []

    def f(x):
      _, collected = capture(small)(x)
      texts.append(repr(collected))
      return x

    jax.jit(f)(jnp.ones(2))
    self.assertIn('  blocks.0.attn.pattern  [0]      f32[2]\n', texts[0])
    self.assertNotIn('mean', texts[0])

  def test_a_large_array_is_summarised(self):
    _, collected = capture(lambda x: sow(x, name='big'))(jnp.ones((1000, 1000)))
    self.assertLess(len(repr(collected)), 200)
    self.assertEqual(str(collected), repr(collected))

  def test_empty(self):
    self.assertEqual(repr(capture(lambda x: x)(1.0)[1]), 'Collected(no names)')

  def test_still_a_dict_and_a_pytree(self):
    _, collected = capture(small)(jnp.ones(2))
    self.assertIsInstance(collected, dict)
    self.assertEqual(list(jax.tree.map(lambda a: a.shape, collected)),
                     list(collected))

  def test_treescope(self):
    import treescope  # pylint: disable=g-import-not-at-top

    _, collected = capture(small)(jnp.ones(2))
    text = treescope.render_to_text(collected)
    self.assertIn("('blocks', 0, 'attn', 'pattern'):", text)  # one line
    self.assertTrue(text.startswith('Collected({'))
    html = treescope.render_to_html(collected, compressed=False)
    self.assertIn('pattern', html)


if __name__ == '__main__':
  absltest.main()
