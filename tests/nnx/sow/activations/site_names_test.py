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
"""The sites of a store read as ``capture`` prints its names.

The oracle for every value read back is a direct ``capture`` of the same
function on the same batches; the oracle for the store's keys is the table
``Collected.text`` prints for that capture.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import activations
from flax.nnx.sow import capture
from flax.nnx.sow import sow

LAYERS, EXAMPLES, WIDTH = 3, 4, 5


def f(x):
  for i in range(LAYERS):
    x = jnp.tanh(x * (i + 1.5))
    sow(x, name=('layers', i, '__call__', 'output'))
    sow({'k': x + i, 'v': -x}, name=('layers', i, 'kv'))
  sow(x[:, 0], name='first')
  sow(x[:, 0] * 2, name='first')
  return x


def batches():
  return [jnp.linspace(-1.0 - b, 1.0 + b, EXAMPLES * WIDTH).reshape(
      EXAMPLES, WIDTH) for b in range(3)]


def tmp_path(test) -> str:
  folder = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, folder, ignore_errors=True)
  return os.path.join(folder, 'store')


def captured():
  """``{name: [entries of every batch, concatenated]}`` of a direct capture,
  and the text of the first batch's capture."""
  runs = [capture(f)(x)[1] for x in batches()]
  joined = {
      name: [np.concatenate([np.asarray(run[name][i]) for run in runs])
             if not isinstance(value, dict) else
             {k: np.concatenate([np.asarray(run[name][i][k]) for run in runs])
              for k in value}
             for i, value in enumerate(entries)]
      for name, entries in runs[0].items()
  }
  return joined, runs[0].text()


class SiteNamesTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.folder = tempfile.mkdtemp()
    cls.data = activations.export(f, batches(), os.path.join(cls.folder, 's'),
                                  progress=False)
    cls.expected, cls.text = captured()

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.folder, ignore_errors=True)
    super().tearDownClass()

  def test_sites_are_written_as_collected_prints_them(self):
    self.assertEqual(self.data.sites, (
        'layers.0.__call__.output', 'layers.0.kv[0].k', 'layers.0.kv[0].v',
        'layers.1.__call__.output', 'layers.1.kv[0].k', 'layers.1.kv[0].v',
        'layers.2.__call__.output', 'layers.2.kv[0].k', 'layers.2.kv[0].v',
        'first[0]', 'first[1]'))
    # Each suffix is the entry column of capture's own table, on the row of
    # its name (the name is printed on its first row only).
    rows = [line.split() for line in self.text.splitlines()[2:]]
    printed, name = [], None
    for row in rows:
      if len(row) > 1 and row[1].startswith('['):
        name = row[0]
        entry = row[1]
      else:
        entry = row[0]
      printed.append(name + entry)
    for site in self.data.sites:
      if '[' in site:
        self.assertIn(site, printed)
      else:
        self.assertIn(site + '[0]', printed)

  def test_values_read_by_any_spelling_equal_a_direct_capture(self):
    for i in range(LAYERS):
      want = self.expected[('layers', i, '__call__', 'output')][0]
      for spelling in (('layers', i, '__call__', 'output'),
                       f'layers.{i}.__call__.output'):
        np.testing.assert_array_equal(self.data.read(spelling), want)
      kv = self.expected[('layers', i, 'kv')][0]
      np.testing.assert_array_equal(self.data.read(f'layers.{i}.kv[0].k'),
                                    kv['k'])
      np.testing.assert_array_equal(self.data.read(f'layers.{i}.kv[0].v'),
                                    kv['v'])
    for entry in range(2):
      np.testing.assert_array_equal(self.data.read(f'first[{entry}]'),
                                    self.expected['first'][entry])

  def test_sets_of_sites_are_selected_as_capture_selects_names(self):
    outputs = tuple(f'layers.{i}.__call__.output' for i in range(LAYERS))
    self.assertEqual(self.data.sites_of('layers.*.__call__.output'), outputs)
    self.assertEqual(self.data.sites_of([('layers', 1, 'kv')]),
                     ('layers.1.kv[0].k', 'layers.1.kv[0].v'))
    self.assertEqual(self.data.sites_of('first'), ('first[0]', 'first[1]'))
    self.assertEqual(
        self.data.sites_of(['layers.2.**', 'first[1]']),
        ('layers.2.__call__.output', 'layers.2.kv[0].k', 'layers.2.kv[0].v',
         'first[1]'))
    self.assertEqual(
        self.data.sites_of(lambda name: name[-1:] == ('kv',)),
        tuple(s for s in self.data.sites if '.kv[' in s))
    # batches(sites=) takes the same forms; its rows are the capture's.
    batch = next(self.data.batches(EXAMPLES * 3, sites='layers.*.**',
                                   shuffle=False))
    self.assertEqual(tuple(batch), self.data.sites[:-2])
    for i in range(LAYERS):
      np.testing.assert_array_equal(
          batch[f'layers.{i}.__call__.output'],
          self.expected[('layers', i, '__call__', 'output')][0])

  def test_a_selection_that_reads_nothing_says_so(self):
    with self.assertRaisesRegex(
        KeyError, r"'layers\.\*\.__call__\.output' is a pattern, which"
        r" selects a set of sites \(\['layers\.0\.__call__\.output'"):
      self.data.read('layers.*.__call__.output')
    with self.assertRaisesRegex(
        KeyError, r"no site 'layers.1.__call__.outptu'.*closest names:"
        r" layers.1.__call__.output"):
      self.data.read('layers.1.__call__.outptu')
    with self.assertRaisesRegex(KeyError, r"no site 'layers\.\*\.mlp'"):
      self.data.sites_of(['first', 'layers.*.mlp'])
    with self.assertRaisesRegex(
        TypeError, r"is a tuple, which is read as a collection of names.*"
        r"put it in a list: \[\('layers', 1, 'kv'\)\]"):
      self.data.sites_of(('layers', 1, 'kv'))
    with self.assertRaisesRegex(TypeError, 'sites are selected by a name'):
      self.data.sites_of(3)


class ExportedNamesTest(absltest.TestCase):

  def test_two_names_of_one_spelling_are_refused(self):
    def g(x):
      sow(x, name='a.b')
      sow(-x, name=('a', 'b'))
      return x
    with self.assertRaisesRegex(
        ValueError, r"the names 'a.b' and \('a', 'b'\) both give the site"
        r" 'a.b'; select one of them"):
      activations.export(g, batches(), tmp_path(self), progress=False)

  def test_a_leaf_with_a_slash_is_refused(self):
    def g(x):
      sow({'x/y': x}, name='h')
      return x
    with self.assertRaisesRegex(
        ValueError, r"the site 'h\[0\]\.x/y' \(of the name 'h'\) is not a"
        ' directory name'):
      activations.export(g, batches(), tmp_path(self), progress=False)


# A store as version 1 wrote it (the layout of a run of that version, its
# sites named NAME/ENTRY/LEAF), written here with tensorstore directly.
_V1_LAYOUT = {
    'version': 1, 'examples_per_batch': 2,
    'sites': {
        'layers.1.h/0': {'name': ['layers', 1, 'h'], 'entry': 0, 'leaf': '',
                         'reduced_shape': [2, 3]},
        'kv/0/k': {'name': 'kv', 'entry': 0, 'leaf': 'k',
                   'reduced_shape': [2, 3]},
    },
    'arrays': [
        {'site': 'layers.1.h/0', 'output': 'values', 'per': 'row',
         'shape': [3], 'dtype': 'float32', 'chunk': [2, 3]},
        {'site': 'kv/0/k', 'output': 'values', 'per': 'row', 'shape': [3],
         'dtype': 'float32', 'chunk': [2, 3]},
    ],
    'reductions': {'example_axis': 0, 'positions': None, 'dtype': None,
                   'outputs': ['values'], 'top_k': None},
}


def write_v1_store(path: str) -> dict[str, np.ndarray]:
  import tensorstore as ts  # pylint: disable=g-import-not-at-top

  values = {'layers.1.h/0': np.arange(12, dtype=np.float32).reshape(4, 3),
            'kv/0/k': -np.arange(12, dtype=np.float32).reshape(4, 3)}
  os.makedirs(os.path.join(path, 'progress'))
  for site, value in values.items():
    array = ts.open({
        'driver': 'zarr',
        'kvstore': {'driver': 'file',
                    'path': os.path.join(path, site, 'values')},
        'metadata': {'shape': [4, 3], 'chunks': [2, 3], 'dtype': '<f4',
                     'compressor': None, 'order': 'C'},
    }, create=True).result()
    array.write(value).result()
  with open(os.path.join(path, '.zgroup'), 'w') as out:
    json.dump({'zarr_format': 2}, out)
  with open(os.path.join(path, '.zattrs'), 'w') as out:
    json.dump({'flax.nnx.sow.activations': _V1_LAYOUT,
               'complete_batches': 2, 'examples': 4}, out)
  with open(os.path.join(path, 'progress', 'process-0.json'), 'w') as out:
    json.dump({'batches': 2}, out)
  return values


class VersionOneStoreTest(absltest.TestCase):

  def test_is_read_by_its_sites_and_by_name(self):
    path = tmp_path(self)
    values = write_v1_store(path)
    data = activations.Dataset(path)
    self.assertEqual(data.sites, ('layers.1.h/0', 'kv/0/k'))
    np.testing.assert_array_equal(data.read('layers.1.h/0'),
                                  values['layers.1.h/0'])
    np.testing.assert_array_equal(data.read(('layers', 1, 'h')),
                                  values['layers.1.h/0'])
    np.testing.assert_array_equal(data.read('kv'), values['kv/0/k'])
    self.assertEqual(data.sites_of('layers.*.h'), ('layers.1.h/0',))

  def test_is_not_continued_by_an_export(self):
    path = tmp_path(self)
    write_v1_store(path)
    before = sorted(os.listdir(path))
    with self.assertRaisesRegex(
        ValueError, r"holds an activations store of version 1, whose sites"
        r" are named NAME/ENTRY/LEAF \('h/0'\); this version reads it but"
        r" writes version 2 .* Nothing was written"):
      activations.export(lambda x: sow(x, name='h'), [np.ones((2, 3))],
                         path, progress=False)
    self.assertEqual(sorted(os.listdir(path)), before)


if __name__ == '__main__':
  absltest.main()
