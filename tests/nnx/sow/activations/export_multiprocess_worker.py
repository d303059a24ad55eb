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
"""One of the two JAX processes of ``multiprocess_export_test.py``.

Run as ``python export_multiprocess_worker.py PORT PROCESS_ID STORES`` with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` and the repository
root and ``tests/nnx/sow`` on ``PYTHONPATH`` (the test sets both); ``STORES``
is a directory both processes share. It joins a 2-process JAX cluster
(``multiprocess_testing.worker_main``): one 4-device mesh ``('data',
'model')``, the ``'data'`` axis across the processes. For each axis type
(Auto, Explicit) it exports a sharded NNX model's sown values, from global
batches that no process holds whole, into stores under ``STORES`` that both
processes write:

* ``plain``: values only, 3 batches (its compiled step has the collectives
  of the model written by hand: none), then resumed with 5 (the first 3
  given as NaNs, which must not be written);
* ``stats``: values and every statistic, 5 batches (no all-gather either);
* ``top_k``: values and the top 2 features of each row, 2 batches;
* ``read``: 2 batches, process 1 holding back its first until process 0
  has committed its own and read the store: a batch only one process has
  committed is not complete yet.

The sites: ``x`` (the input, ``P('data', None)``: replicated over
``'model'``), ``h`` (``P('data', 'model')``) and ``t`` (computed from a
replicated input: replicated over every device, so over both processes).

The oracle of the values is the model written by hand to return them, run in
this process alone, on one device, on the full host arrays; of the
statistics, NumPy's on the oracle's values. Each check raises on a
mismatch; the report's ``data`` has, per run, every write this process made
to the store (array, target box, bytes), recorded where the writer hands
each shard to tensorstore, for the test to check across processes.
"""

import contextlib
import copy
import importlib
import os
import sys
import time
import traceback

import sow_layout

if not sow_layout.IN_FLAX:  # the repository's flax.nnx.sow, not an installed one
  import _worktree  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
import jax  # pylint: disable=g-import-not-at-top
import jax.numpy as jnp
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from flax import nnx
from flax.nnx.sow import activations
from flax.nnx.sow import sow
from flax.nnx.sow.activations import writer as writer_lib
import multiprocess_testing
import sow_testing

# The module: the package's attribute `export` is the function.
export_lib = importlib.import_module('flax.nnx.sow.activations.export')
_STEP = '_step'  # makes the export's jitted step; the spy wraps it

AXIS_TYPES = ('Auto', 'Explicit')
BATCH, DIN, HIDDEN, TIME = 8, 4, 8, 3
BATCHES, FIRST = 5, 3  # the resumed store: FIRST batches, then the rest
SITES = ('x', 'h', 't')
STATISTICS = ('mean', 'var', 'norm')
TOP_K = 2


class Model(nnx.Module):
  """Parameters sharded over 'model' when created under a mesh."""

  def __init__(self, rngs):
    self.linear = nnx.Linear(
        DIN, HIDDEN, rngs=rngs,
        kernel_metadata={'out_sharding': (None, 'model')},
        bias_metadata={'out_sharding': ('model',)},
    )

  def __call__(self, batch):
    x = sow(batch['x'], name='x')
    h = sow(jnp.tanh(self.linear(x)), name='h')
    sow(jnp.cos(batch['t']), name='t')
    return jnp.sum(h, axis=1)


def run_model(model, batch):
  return model(batch)


def by_hand(kernel, bias, batch):
  """The model's sown values, as outputs."""
  x = batch['x']
  return {'x': x, 'h': jnp.tanh(x @ kernel + jnp.reshape(bias, (1, -1))),
          't': jnp.cos(batch['t'])}


class _RecordedArray:
  """A store's array whose writes are recorded (and done)."""

  def __init__(self, array, path, log):
    self._array, self._path, self._log = array, path, log

  def __getitem__(self, index):
    return _RecordedView(self._array[index], self._path, index, self._log)


class _RecordedView:

  def __init__(self, view, path, index, log):
    self._view, self._path, self._index, self._log = view, path, index, log

  def write(self, data, **options):
    self._log.append({
        'array': self._path,
        'box': [[s.start, s.stop] for s in self._index],
        'bytes': int(np.asarray(data).nbytes),
    })
    return self._view.write(data, **options)


class Spy:
  """Within ``recording()``: each export's step, and every shard its writer
  hands to tensorstore."""

  def __init__(self, before_write=None, after_write=None):
    self.steps, self.writers, self.writes = [], [], []
    # Called on the writer's thread with each batch, around its writing.
    self.before_write = before_write or (lambda batch: None)
    self.after_write = after_write or (lambda batch: None)

  @contextlib.contextmanager
  def recording(self):
    spy = self
    make_step, writer_class = getattr(export_lib, _STEP), writer_lib.Writer

    def step(*args, **kwargs):
      found = make_step(*args, **kwargs)
      spy.steps.append(found)
      return found

    class Writer(writer_class):

      def __init__(self, store, *args, **kwargs):
        store = copy.copy(store)  # the writer's alone; trim() uses export's
        store.arrays = {k: _RecordedArray(a, k, spy.writes)
                        for k, a in store.arrays.items()}
        super().__init__(store, *args, **kwargs)
        spy.writers.append(self)

      def _start(self, batch, outputs):
        spy.before_write(batch)
        return super()._start(batch, outputs)

      def _finish(self, batch, futures, nbytes):
        super()._finish(batch, futures, nbytes)
        spy.after_write(batch)

    setattr(export_lib, _STEP, step)
    writer_lib.Writer = Writer
    try:
      yield self
    finally:
      setattr(export_lib, _STEP, make_step)
      writer_lib.Writer = writer_class


class Setup:
  """The mesh, the model, the global batches and the oracle, per mode."""

  def __init__(self, axis_type: str, stores: str):
    kind = getattr(AxisType, axis_type)
    self.stores = os.path.join(stores, axis_type)
    self.mesh = jax.make_mesh((2, 2), ('data', 'model'),
                              axis_types=(kind, kind))
    # The 'data' row of the mesh this process's devices are on: its rows of
    # each batch, by the layout's definition.
    rows = {row for (row, _), d in np.ndenumerate(self.mesh.devices)
            if d.process_index == jax.process_index()}
    assert len(rows) == 1, f'this process spans data rows {rows}'
    self.data_row = rows.pop()
    rng = np.random.default_rng(0)  # the same on both processes
    self.host = [
        {'x': rng.normal(size=(BATCH, DIN)).astype(np.float32),
         't': rng.uniform(-3, 3, size=(BATCH, TIME)).astype(np.float32)}
        for _ in range(BATCHES)
    ]
    # Before the mesh is entered: a single-device jit refuses to run under a
    # context mesh of other devices.
    with nnx.use_eager_sharding(False):  # no mesh yet: the host values
      host_model = Model(nnx.Rngs(0))
    self.params = (np.asarray(host_model.linear.kernel.value),
                   np.asarray(host_model.linear.bias.value))
    device = jax.local_devices()[0]
    oracle = jax.jit(by_hand)
    per_batch = [
        jax.tree.map(np.asarray, oracle(*jax.device_put(
            (*self.params, batch), device)))
        for batch in self.host
    ]
    self.expected = {site: np.concatenate([b[site] for b in per_batch])
                     for site in SITES}

  def batch(self, host):
    """A global batch: ``x`` from each process's own rows, ``t`` whole on
    every device."""
    x_sharding = NamedSharding(self.mesh, P('data', None))
    half = BATCH // 2
    mine = host['x'][self.data_row * half:(self.data_row + 1) * half]
    x = jax.make_array_from_process_local_data(x_sharding, mine, (BATCH, DIN))
    t = jax.make_array_from_callback(
        host['t'].shape, NamedSharding(self.mesh, P()),
        lambda index: host['t'][index])
    assert not x.is_fully_addressable and t.is_fully_replicated
    return {'x': x, 't': t}

  def batches(self):
    return [self.batch(host) for host in self.host]


def assert_values(data, s: Setup, batches: int, what: str):
  assert set(data.sites) == set(SITES), (what, data.sites)
  assert data.complete_batches == batches, (what, data.complete_batches)
  for site in SITES:
    got, want = data.read(site), s.expected[site][:batches * BATCH]
    if site == 'x':  # the input itself, copied: bitwise
      np.testing.assert_array_equal(got, want, err_msg=f'{what}: {site}')
    else:  # XLA on 4 devices and on one: within rounding
      sow_testing.assert_close(got, want, err_msg=f'{what}: {site}')


def assert_no_all_gather(spy: Spy, model, batch, *, by_hand_args=None):
  """The export's compiled step (its jitted step, lowered again on the same
  arguments) has no all-gather; with ``by_hand_args``, it has exactly the
  collectives of the model written by hand to return its sown values."""
  (step,) = spy.steps
  jitted = step._jitted  # pylint: disable=protected-access
  text = jitted.lower((model,), batch).compile().as_text()
  got = multiprocess_testing.collectives(text)
  assert got['all-gather'] == 0, f'an all-gather: {got}'
  if by_hand_args is not None:
    want = multiprocess_testing.collectives(
        jax.jit(by_hand).lower(*by_hand_args).compile().as_text())
    assert got == want, f'collectives {got}, written by hand {want}'


def assert_writes(spy: Spy):
  """The writer wrote what it counted, and only what it recorded."""
  (writer,) = spy.writers
  recorded = sum(w['bytes'] for w in spy.writes)
  assert writer.bytes_written == recorded, (writer.bytes_written, recorded)


def check_plain(s: Setup, model, batches, path):
  spy = Spy()
  with spy.recording():
    data = activations.export(run_model, batches[:FIRST], path,
                              args=(model,), progress=False)
  assert_values(data, s, FIRST, 'plain')
  assert_writes(spy)
  kernel, bias = model.linear.kernel.value, model.linear.bias.value
  assert not kernel.is_fully_addressable
  assert_no_all_gather(spy, model, batches[0],
                       by_hand_args=(kernel, bias, batches[0]))
  return spy.writes


def check_resumed(s: Setup, model, batches, path):
  """Batches already complete are skipped, not recomputed: given as NaNs
  here, they would show if they were written again."""
  poison = {k: np.full_like(v, np.nan) for k, v in s.host[0].items()}
  given = [s.batch(poison)] * FIRST + batches[FIRST:]
  spy = Spy()
  with spy.recording():
    data = activations.export(run_model, given, path, args=(model,),
                              progress=False)
  assert_values(data, s, BATCHES, 'resumed')
  assert_writes(spy)
  assert_values(activations.Dataset(path), s, BATCHES, 'resumed, reopened')
  return spy.writes


def check_stats(s: Setup, model, batches, path):
  spy = Spy()
  with spy.recording():
    data = activations.export(run_model, batches, path, args=(model,),
                              statistics=STATISTICS, progress=False)
  assert_values(data, s, BATCHES, 'stats')
  assert_writes(spy)
  for site in SITES:
    # The oracle's values in float64: what the statistics are of.
    values = s.expected[site].astype(np.float64)
    stats = data.statistics(site)
    assert stats.count == BATCHES * BATCH, (site, stats.count)
    # Means and squared deviations summed on device in float32 over 8 rows
    # (in whatever order XLA reduces across the 4 devices), combined in
    # float64: within 64 float32 ulps of the values' (and squares')
    # magnitude, as sow_testing says.
    mean = values.mean(axis=0)
    var = values.var(axis=0)
    eps = np.finfo(np.float32).eps * sow_testing.DEFAULT_ULPS
    scale = np.max(np.abs(values))
    np.testing.assert_allclose(stats.mean, mean, rtol=0, atol=eps * scale,
                               err_msg=f'{site}: mean')
    np.testing.assert_allclose(stats.var, var, rtol=0,
                               atol=eps * scale**2, err_msg=f'{site}: var')
    norm = np.sqrt(np.sum(np.square(values), axis=-1))
    sow_testing.assert_close(
        data.read(site, 'norm'), norm.astype(np.float32),
        err_msg=f'{site}: norm')
  # Statistics reduce across devices with all-reduces; nothing is gathered.
  assert_no_all_gather(spy, model, batches[0])
  return spy.writes


def check_top_k(s: Setup, model, batches, path):
  """The 2 largest features of each row, which a sharded feature axis must
  be gathered for (under Explicit axes resharded first)."""
  spy = Spy()
  with spy.recording():
    data = activations.export(run_model, batches[:2], path, args=(model,),
                              top_k=TOP_K, progress=False)
  assert_values(data, s, 2, 'top_k')
  assert_writes(spy)
  for site in SITES:
    values = s.expected[site][:2 * BATCH]
    # Descending; the oracle's random features are far apart (no ties, and
    # no two within rounding), so the indices are exact.
    indices = np.argsort(-values, axis=-1, kind='stable')[:, :TOP_K]
    np.testing.assert_array_equal(
        data.read(site, 'top_k_indices'), indices, err_msg=site)
    top = np.take_along_axis(values, indices, axis=-1)
    if site == 'x':  # the input's own elements: bitwise
      np.testing.assert_array_equal(data.read(site, 'top_k_values'), top)
    else:
      sow_testing.assert_close(data.read(site, 'top_k_values'), top,
                               err_msg=site)
  return spy.writes


def check_read_while_written(s: Setup, model, batches, path):
  """A batch one process has committed and the other not yet written is not
  complete: a reader then (or after the other process died) would read its
  unwritten shards. Process 1 writes its first batch only once process 0
  has committed its own and opened the store."""
  flag = f'{path}.process-0-read'
  seen = []

  def process_0_reads(batch):
    if batch == 0 and jax.process_index() == 0:
      try:
        seen.append(activations.Dataset(path).complete_batches)
      except Exception as e:  # pylint: disable=broad-exception-caught
        seen.append(repr(e))  # not raised here: process 1 waits for the flag
      finally:
        open(flag, 'w').close()

  def process_1_waits(batch):
    deadline = time.monotonic() + 120
    while (batch == 0 and jax.process_index() == 1
           and not os.path.exists(flag) and time.monotonic() < deadline):
      time.sleep(0.01)

  spy = Spy(before_write=process_1_waits, after_write=process_0_reads)
  with spy.recording():
    data = activations.export(run_model, batches[:2], path, args=(model,),
                              progress=False)
  assert os.path.exists(flag), 'process 0 never read the store'
  if jax.process_index() == 0:
    assert seen == [0], (
        f'with only process 0\'s first batch written, a reader saw {seen}'
        ' complete batches, not [0]')
  assert_values(data, s, 2, 'read while written')
  return spy.writes


def run_checks(stores: str):
  """Every check in every mode; both processes run the same sequence (each
  export synchronizes them), so a failing check fails on both."""
  checks, data = {}, {}
  for axis_type in AXIS_TYPES:
    s = Setup(axis_type, stores)
    data[axis_type] = {'data_row': s.data_row, 'writes': {}}
    with jax.set_mesh(s.mesh):
      model = Model(nnx.Rngs(0))  # the same parameters on both processes
      batches = s.batches()
      plain = os.path.join(s.stores, 'plain')
      runs = {
          'plain': lambda: check_plain(s, model, batches, plain),
          'resumed': lambda: check_resumed(s, model, batches, plain),
          'stats': lambda: check_stats(
              s, model, batches, os.path.join(s.stores, 'stats')),
          'top_k': lambda: check_top_k(
              s, model, batches, os.path.join(s.stores, 'top_k')),
          'read_while_written': lambda: check_read_while_written(
              s, model, batches, os.path.join(s.stores, 'read')),
      }
      for name, run in runs.items():
        key = f'{axis_type}/{name}'
        try:
          data[axis_type]['writes'][name] = run()
          checks[key] = None
        # Any error is a failed check, reported with its traceback.
        except Exception:  # pylint: disable=broad-exception-caught
          checks[key] = traceback.format_exc()
  return checks, data


def run(args):
  (stores,) = args
  # As Flax's CI runs its tests: the export's own code must not rely on
  # implicit rank promotion (this process's setting, its own alone).
  jax.config.update('jax_numpy_rank_promotion', 'raise')
  return run_checks(stores)


if __name__ == '__main__':
  multiprocess_testing.worker_main(sys.argv, run)
