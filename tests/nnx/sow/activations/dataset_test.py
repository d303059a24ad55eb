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
"""``activations.Dataset``: the complete batches of a store, read back.

The values exported encode each row's example (and position), so the
oracle for a shuffled batch is the rows it names.
"""

import os
import shutil
import tempfile

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import activations
from flax.nnx.sow import sow

EXAMPLES, POSITIONS, WIDTH, BATCHES = 4, 3, 2, 6


def ids(batch: int) -> jnp.ndarray:
  """Batch ``batch``: feature 0 is the example's id, 1 its position."""
  example = batch * EXAMPLES + np.arange(EXAMPLES)[:, None]
  position = np.arange(POSITIONS)[None, :]
  x = np.stack(np.broadcast_arrays(example, position), axis=-1)
  return jnp.asarray(x, jnp.float32)


def f(x):
  sow(x, name='a')
  sow(-x, name='b')
  sow(x[:, 0], name='first')
  return x


class DatasetTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.folder = tempfile.mkdtemp()
    cls.path = os.path.join(cls.folder, 'store')
    activations.export(f, [ids(i) for i in range(BATCHES)], cls.path,
                       progress=False)
    cls.data = activations.Dataset(cls.path)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.folder, ignore_errors=True)
    super().tearDownClass()

  def test_an_epoch_of_examples_has_every_example_once_aligned(self):
    seen = []
    for batch in self.data.batches(5, sites=['a', 'b']):
      self.assertEqual(batch['a'].shape, (5, POSITIONS, WIDTH))
      np.testing.assert_array_equal(batch['b'], -batch['a'])
      seen += list(batch['a'][:, 0, 0])
    total = EXAMPLES * BATCHES
    self.assertLen(seen, total - total % 5)
    self.assertLen(set(seen), len(seen))
    self.assertNotEqual(seen, sorted(seen))

  def test_rows_left_at_a_window_end_start_the_next(self):
    for window in (1, 2, 4):
      seen = [int(r) for b in self.data.batches(
          3, sites=['first'], window=window) for r in b['first'][:, 0]]
      # 24 rows in windows of 4 * window: only the epoch's end drops rows.
      self.assertCountEqual(seen, range(EXAMPLES * BATCHES))

  def test_tokens_flatten_positions(self):
    rows = [r for batch in self.data.batches(7, sites=['a'], tokens=True)
            for r in map(tuple, batch['a'])]
    total = EXAMPLES * BATCHES * POSITIONS
    self.assertLen(rows, total - total % 7)
    self.assertLen(set(rows), len(rows))
    every = {(float(e), float(p)) for e in range(EXAMPLES * BATCHES)
             for p in range(POSITIONS)}
    self.assertLessEqual(set(rows), every)

  def test_the_shuffle_is_seeded(self):
    def first(**kwargs):
      return next(self.data.batches(4, sites=['first'], **kwargs))[
          'first'][:, 0]

    np.testing.assert_array_equal(first(seed=1), first(seed=1))
    self.assertFalse(np.array_equal(first(seed=1), first(seed=2)))

  def test_without_shuffle_batches_are_the_rows_in_order(self):
    got = np.concatenate([
        b['first'] for b in self.data.batches(
            EXAMPLES, sites=['first'], shuffle=False, epochs=2)])
    expected = self.data.read('first')
    np.testing.assert_array_equal(got, np.concatenate([expected, expected]))

  def test_forever(self):
    stream = self.data.batches(EXAMPLES * BATCHES, sites=['first'],
                               epochs=None)
    epochs = [next(stream)['first'][:, 0] for _ in range(3)]
    for epoch in epochs:
      self.assertCountEqual(epoch, range(EXAMPLES * BATCHES))

  def test_read_and_array(self):
    np.testing.assert_array_equal(
        self.data.read('a', rows=[5, 0]),
        np.stack([ids(1)[1], ids(0)[0]]))
    self.assertEqual(self.data.array('a').shape,
                     (EXAMPLES * BATCHES, POSITIONS, WIDTH))
    self.assertIn('3 sites, 24 examples in 6 batches', repr(self.data))

  def test_sites_are_the_names_capture_prints(self):
    # A name sown once as one array is stored under the name itself.
    self.assertEqual(self.data.sites, ('a', 'b', 'first'))
    np.testing.assert_array_equal(self.data.read('a', rows=[5, 0]),
                                  np.stack([ids(1)[1], ids(0)[0]]))
    # As for capture(names=), the tuple name ('a',) is not the str name 'a'.
    with self.assertRaisesRegex(KeyError,
                                r"no site \('a',\).*closest names: a"):
      self.data.read(('a',))
    self.assertEqual(self.data.site_of('first'), 'first')
    with self.assertRaisesRegex(KeyError, r"no site 'c'.*'a', 'b'"):
      self.data.read('c')
    with self.assertRaisesRegex(TypeError, 'a site is a stored site or a sow'):
      self.data.read(3)

  def test_a_name_exported_as_several_sites_is_read_by_site(self):
    def g(x):
      sow({'u': x, 'v': -x}, name='pair')
      return x
    path = os.path.join(self.folder, 'pairs')
    activations.export(g, [ids(0)], path, progress=False)
    data = activations.Dataset(path)
    with self.assertRaisesRegex(
        KeyError, r"the name 'pair' was exported as 2 sites \(one per entry"
        r" and leaf\): \['pair\[0\]\.u', 'pair\[0\]\.v'\]"):
      data.read('pair')
    np.testing.assert_array_equal(data.read('pair[0].v'), -ids(0))

  def test_errors_name_what_exists(self):
    # The old spelling of a site (version 1 of the store) names no site of a
    # store written now, and the message names the closest.
    with self.assertRaisesRegex(
        KeyError, r"no site 'a/0'.*'a', 'b'.*closest names: a"):
      self.data.read('a/0')
    with self.assertRaisesRegex(KeyError, r"no site 'c/0'.*'a', 'b'"):
      self.data.read('c/0')
    with self.assertRaisesRegex(KeyError, r"'a' has no 'norm'.*'values'"):
      self.data.read('a', 'norm')
    with self.assertRaisesRegex(KeyError, "'a' has no 'mean'"):
      self.data.statistics('a')
    with self.assertRaisesRegex(ValueError, 'as many rows per batch'):
      next(self.data.batches(2, sites=['a', 'first'], tokens=True))
    with self.assertRaisesRegex(ValueError, 'batch_size 25 is more than'):
      next(self.data.batches(25))
    with self.assertRaisesRegex(ValueError, 'batch_size must be'):
      next(self.data.batches(0))
    with self.assertRaisesRegex(FileNotFoundError, 'not an activations'):
      activations.Dataset(self.folder)


if __name__ == '__main__':
  absltest.main()
