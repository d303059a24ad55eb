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
"""activations.export across two JAX processes (multi-controller).

Two workers (``export_multiprocess_worker.py``) join one JAX cluster on
localhost, 2 CPU devices each, gloo collectives, and share a 4-device mesh
``('data', 'model')``, once with Auto and once with Explicit axes. Both
export a sharded NNX model's sown values into one store directory (given
here), from global batches no process holds whole. Each worker checks that
the store holds the values of the model written by hand and run in one
process, and (with statistics) NumPy's statistics of them; that a store
continues after its complete batches; and that the export's compiled step
gathers nothing. Here, from the writes each process reports (every shard
its writer handed to tensorstore), the test checks that the two processes
together wrote every element of every array exactly once, each process its
own rows of the sharded sites, and that a replicated site was written by one
process only (the worker's docstring has the rest).

The workers are separate processes (``multiprocess_testing`` says why);
this test only starts them and asserts on their reports.
"""

import collections
import math
import os
import tempfile

from absl.testing import absltest
import multiprocess_testing
import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_WORKER = os.path.join(_HERE, 'export_multiprocess_worker.py')

# As the worker has them, written out so that a change there fails here.
_AXIS_TYPES = ('Auto', 'Explicit')
_RUNS = ('plain', 'resumed', 'stats', 'top_k', 'read_while_written')
_EXPECTED = frozenset(f'{a}/{r}' for a in _AXIS_TYPES for r in _RUNS)
_BATCH = 8  # examples per batch
_FEATURES = {'x': 4, 'h': 8, 't': 3}
# The batches each run writes: the resumed run only those after the first's.
_WRITTEN = {'plain': range(0, 3), 'resumed': range(3, 5),
            'stats': range(0, 5), 'top_k': range(0, 2),
            'read_while_written': range(0, 2)}
# The arrays of a run, by the rows each holds per batch (the statistics of a
# batch are one row).
_ROW_OUTPUTS = {'plain': ('values',), 'resumed': ('values',),
                'stats': ('values', 'norm'),
                'top_k': ('values', 'top_k_values', 'top_k_indices'),
                'read_while_written': ('values',)}
_BATCH_OUTPUTS = {'plain': (), 'resumed': (), 'stats': ('mean', 'm2'),
                  'top_k': (), 'read_while_written': ()}
_TOP_K = 2
# The sites sharded over 'data' (each process holds its half of the rows) and
# the one replicated on every device.
_DATA_SHARDED = ('x', 'h')
_REPLICATED = 't'
_ITEMSIZE = 4  # float32 and int32 (the top-k indices)

# About 40 s on 2 busy cores; the deadline only turns a hang into a failure.
_DEADLINE_S = 300


def _arrays(run: str) -> dict[str, tuple[int, ...]]:
  """Each array a run writes, and the shape of what it writes of it."""
  batches = len(_WRITTEN[run])
  shapes = {}
  for site, features in _FEATURES.items():
    for output in _ROW_OUTPUTS[run]:
      row = {'values': (features,), 'norm': ()}.get(output, (_TOP_K,))
      shapes[f'{site}/{output}'] = (batches * _BATCH, *row)
    for output in _BATCH_OUTPUTS[run]:
      shapes[f'{site}/{output}'] = (batches, features)
  return shapes


class MultiprocessExportTest(absltest.TestCase):

  def test_two_processes_write_one_store(self):
    with tempfile.TemporaryDirectory() as stores:
      run = multiprocess_testing.run_workers(_WORKER, stores,
                                             deadline_s=_DEADLINE_S)
      data = multiprocess_testing.assert_workers_passed(self, run, _EXPECTED)
    for axis_type in _AXIS_TYPES:
      rows = [d[axis_type]['data_row'] for d in data]
      self.assertCountEqual(rows, [0, 1], f'{axis_type}: the data rows')
      for run_name in _RUNS:
        with self.subTest(axis_type=axis_type, run=run_name):
          self.check_writes(
              run_name, rows,
              [d[axis_type]['writes'][run_name] for d in data])

  def check_writes(self, run: str, data_rows: list[int],
                   writes: list[list[dict]]):
    """Together the processes wrote every element once; each its own part."""
    shapes = _arrays(run)
    first_row = {
        path: _WRITTEN[run].start * (
            _BATCH if path.rsplit('/', 1)[1] in _ROW_OUTPUTS[run] else 1)
        for path in shapes
    }
    counts = {path: np.zeros(shape, np.int64)
              for path, shape in shapes.items()}
    written = collections.Counter()  # (process, array): bytes
    for process, process_writes in enumerate(writes):
      for w in process_writes:
        path = w['array']
        self.assertIn(path, shapes)
        box = [slice(a, b) for a, b in w['box']]
        box[0] = slice(box[0].start - first_row[path],
                       box[0].stop - first_row[path])
        self.assertGreaterEqual(box[0].start, 0,
                                f'{path}: {w} rewrites a complete batch')
        counts[path][tuple(box)] += 1
        self.assertEqual(
            w['bytes'],
            math.prod(s.stop - s.start for s in box) * _ITEMSIZE, w)
        written[process, path] += w['bytes']
        if self.data_sharded_rows(run, path):
          # Within this process's rows of a batch: its half, by its data row.
          half = _BATCH // 2
          start = box[0].start // _BATCH * _BATCH + data_rows[process] * half
          self.assertTrue(
              start <= box[0].start and box[0].stop <= start + half,
              f'process {process} (data row {data_rows[process]}) wrote rows'
              f' {w["box"][0]} of {path}')
    for path, count in counts.items():
      self.assertTrue(
          (count == 1).all(),
          f'{path}: elements written {np.unique(count)} times, not once each')
      total = count.size * _ITEMSIZE
      shares = sorted(written[p, path] for p in range(len(writes)))
      if self.data_sharded_rows(run, path):
        self.assertEqual(shares, [total // 2] * 2, path)
      elif path.startswith(_REPLICATED + '/'):
        self.assertEqual(shares, [0, total], f'{path}: written by both')

  def data_sharded_rows(self, run: str, path: str) -> bool:
    site, output = path.rsplit('/', 1)
    return site in _DATA_SHARDED and output in _ROW_OUTPUTS[run]


if __name__ == '__main__':
  absltest.main()
