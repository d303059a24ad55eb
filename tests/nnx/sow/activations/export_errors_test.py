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
"""``activations.export`` refuses bad input, clearly, and loses nothing.

Each refusal names what is wrong; a refusal before the first write leaves
the destination as it was, one after it leaves every batch written before
it complete (read back and compared with the values computed directly).
"""

import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import activations
from flax.nnx.sow import sow


def f(x):
  return sow(x * 2, name='h')


def batches(n, shape=(4, 3)):
  return [jnp.full(shape, float(i)) for i in range(n)]


class ExportErrorsTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    folder = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
    self.folder = folder
    self.path = os.path.join(folder, 'store')

  def files(self):
    return sorted(
        (os.path.relpath(os.path.join(d, n), self.path),
         os.path.getmtime(os.path.join(d, n)))
        for d, _, names in os.walk(self.path) for n in names)

  def test_a_store_of_another_layout_is_refused_and_kept(self):
    activations.export(f, batches(2), self.path, progress=False)
    before = self.files()
    other = lambda x: sow(x[:, :1], name='h')
    with self.assertRaisesRegex(
        ValueError, r'holds an activations store of another layout.*array'
        r" 'h/values'.*Nothing was written"):
      activations.export(other, batches(4), self.path, progress=False)
    with self.assertRaisesRegex(ValueError, 'another layout: .*reductions'):
      activations.export(f, batches(4), self.path, statistics=['mean'],
                         progress=False)
    # Also when every batch it is given is complete already.
    with self.assertRaisesRegex(ValueError, 'another layout'):
      activations.export(other, batches(1), self.path, progress=False)
    self.assertEqual(self.files(), before)
    data = activations.Dataset(self.path)
    np.testing.assert_array_equal(
        data.read('h'), np.concatenate(batches(2)) * 2)

  def test_resume_false_refuses_an_existing_store(self):
    activations.export(f, batches(1), self.path, progress=False)
    with self.assertRaisesRegex(ValueError, 'already holds.*resume=False'):
      activations.export(f, batches(2), self.path, resume=False,
                         progress=False)

  def test_a_directory_holding_something_else_is_refused(self):
    os.makedirs(self.path)
    with open(os.path.join(self.path, 'notes.txt'), 'w') as file:
      file.write('mine')
    with self.assertRaisesRegex(ValueError, 'not empty and holds no'):
      activations.export(f, batches(1), self.path, progress=False)
    self.assertEqual(os.listdir(self.path), ['notes.txt'])
    with self.assertRaisesRegex(ValueError, 'is not a directory'):
      activations.export(f, batches(1), os.path.join(self.path, 'notes.txt'),
                         progress=False)

  def test_a_selection_that_matches_nothing_names_what_is_sown(self):
    with self.assertRaisesRegex(ValueError, r"'hh'.*'h'"):
      activations.export(f, batches(1), self.path, names='hh', progress=False)
    self.assertFalse(os.path.exists(self.path))

  def test_a_function_that_sows_nothing(self):
    with self.assertRaisesRegex(ValueError, 'sows nothing'):
      activations.export(lambda x: x, batches(1), self.path, progress=False)
    self.assertFalse(os.path.exists(self.path))

  def test_a_batch_of_other_shapes_stops_after_the_complete_batches(self):
    inputs = batches(2) + batches(1, shape=(4, 5)) + batches(1)
    with self.assertRaisesRegex(
        ValueError, r"batch 2 gives site 'h' \(values\) shape \(4, 5\)"
        r'.*store has shape \(4, 3\).*Batches 0 to 1 are complete'):
      activations.export(f, inputs, self.path, progress=False)
    data = activations.Dataset(self.path)
    self.assertEqual(data.complete_batches, 2)
    np.testing.assert_array_equal(
        data.read('h'), np.concatenate(batches(2)) * 2)
    # Nothing is lost: the right inputs continue the store.
    data = activations.export(f, batches(3), self.path, progress=False)
    np.testing.assert_array_equal(
        data.read('h'), np.concatenate(batches(3)) * 2)

  def test_batches_whose_leaves_disagree_on_examples(self):
    with self.assertRaisesRegex(ValueError, 'disagree on the number of'
                                ' examples'):
      activations.export(lambda b: sow(b['a'], name='h'),
                         [{'a': jnp.ones((2, 3)), 'b': jnp.ones((3,))}],
                         self.path, progress=False)

  def test_no_batches(self):
    with self.assertRaisesRegex(ValueError, 'batches is empty'):
      activations.export(f, [], self.path, progress=False)

  def test_a_scalar_site(self):
    with self.assertRaisesRegex(ValueError, "site 'loss' is a scalar"):
      activations.export(lambda x: sow(x.sum(), name='loss'), batches(1),
                         self.path, progress=False)

  def test_a_name_with_a_slash(self):
    with self.assertRaisesRegex(
        ValueError, r"the site 'a/b' \(of the name 'a/b'\) is not a directory"
        r' name a store path can hold \(it has a "/"'):
      activations.export(lambda x: sow(x, name='a/b'), batches(1),
                         self.path, progress=False)

  @parameterized.parameters(
      (dict(statistics=['max']), "unknown statistic 'max'"),
      (dict(top_k=0), 'top_k must be a positive int'),
      (dict(top_k=4), 'top_k=4 is more than the 3 features'),
      (dict(dtype=jnp.int8), 'must be floating'),
      (dict(in_flight=0), 'in_flight must be an int >= 1'),
      (dict(values=False), 'keeps nothing'),
      (dict(example_axis=2), 'example_axis 2 of site .* out of range'),
      (dict(example_axis={'h': 1.5}), 'example_axis must be an int'),
      (dict(positions=1, statistics=['norm']), 'reduce the last'),
  )
  def test_bad_arguments(self, kwargs, message):
    with self.assertRaisesRegex((ValueError, TypeError), message):
      activations.export(f, batches(1), self.path, progress=False, **kwargs)
    self.assertFalse(os.path.exists(self.path))


if __name__ == '__main__':
  absltest.main()
