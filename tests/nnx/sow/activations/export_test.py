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
"""``activations.export``: what a function sows, written to a store on disk.

The oracles: the same values computed directly (the model's blocks called
by hand under ``jax.jit``, or NumPy on the inputs), read back from the store
with tensorstore through ``Dataset``; NumPy's float64 statistics.
"""

import json
import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from flax import nnx
from flax.nnx import capture_compat
from flax.nnx.sow import activations
from flax.nnx.sow import sow
from flax.nnx.sow import tap
from flax.nnx.sow.activations import store as store_lib

import sow_testing

EXAMPLES, POSITIONS, WIDTH, LAYERS = 4, 3, 8, 2


class Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(WIDTH, WIDTH, rngs=rngs)

  def __call__(self, x):
    h = jax.nn.gelu(self.linear(x))
    self.sow(nnx.Intermediate, 'pre_residual', h)
    return x + h


class Model(nnx.Module):

  def __init__(self, rngs):
    self.embed = nnx.Linear(2, WIDTH, rngs=rngs)
    self.blocks = nnx.List([Block(rngs) for _ in range(LAYERS)])

  def __call__(self, x):
    x = self.embed(x)
    for block in self.blocks:
      x = block(x)
    return x.sum(-1)


def inputs(n, seed=0):
  rng = np.random.default_rng(seed)
  return [jnp.asarray(rng.normal(size=(EXAMPLES, POSITIONS, 2)),
                      jnp.float32) for _ in range(n)]


def residuals(model, x):
  """The oracle: each block's output, by hand."""
  x = model.embed(x)
  out = []
  for block in model.blocks:
    x = x + jax.nn.gelu(block.linear(x))
    out.append(x)
  return out


def tmp_path(test) -> str:
  """A path for a store, in a directory removed after the test."""
  folder = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, folder, ignore_errors=True)
  return os.path.join(folder, 'store')


class ExportValuesTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    # Block's Module.sow is a site of the transform (see capture_compat).
    self.enter_context(capture_compat.install())

  def test_taps_of_a_model_equal_its_blocks_called_by_hand(self):
    model = Model(nnx.Rngs(0))
    batches = inputs(3)
    f = tap(lambda m, x: m(x), ('blocks', '*'))
    data = activations.export(f, batches, tmp_path(self), args=(model,),
                              names='blocks.*.__call__.output',
                              progress=False)
    self.assertEqual(data.sites, ('blocks.0.__call__.output',
                                  'blocks.1.__call__.output'))
    expected = [np.concatenate(layer) for layer in zip(
        *(jax.jit(residuals)(model, x) for x in batches))]
    for site, want in zip(data.sites, expected):
      sow_testing.assert_close(data.read(site), want)
    self.assertEqual(data.examples, 3 * EXAMPLES)

  def test_module_sow_sites_are_named_by_path(self):
    model = Model(nnx.Rngs(1))
    data = activations.export(lambda m, x: m(x), inputs(2), tmp_path(self),
                              args=(model,), tag=nnx.Intermediate,
                              progress=False)
    self.assertEqual(data.sites, ('blocks.0.pre_residual',
                                  'blocks.1.pre_residual'))
    self.assertEqual(data.layout.sites['blocks.1.pre_residual']['name'],
                     ['blocks', 1, 'pre_residual'])

  def test_entries_leaves_and_patterns(self):
    def f(x):
      sow(x + 1, name='h')
      sow({'a': x * 2, 'b': x[..., :1]}, name=('layers', 0, 'kv'))
      sow(x + 3, name='h')
      return x

    batches = inputs(2)
    data = activations.export(f, batches, tmp_path(self), progress=False)
    # In capture's order: names by first sow, then entries, then leaves.
    self.assertEqual(
        data.sites,
        ('h[0]', 'h[1]', 'layers.0.kv[0].a', 'layers.0.kv[0].b'))
    x = np.concatenate(batches)
    np.testing.assert_array_equal(data.read('h[0]'), x + 1)
    np.testing.assert_array_equal(data.read('h[1]'), x + 3)
    np.testing.assert_array_equal(data.read('layers.0.kv[0].a'), x * 2)
    np.testing.assert_array_equal(data.read('layers.0.kv[0].b'), x[..., :1])
    only = activations.export(f, batches, tmp_path(self), names='layers.*.kv',
                              progress=False)
    self.assertEqual(only.sites, ('layers.0.kv[0].a', 'layers.0.kv[0].b'))

  def test_a_scan_stacked_site_needs_its_example_axis(self):
    def f(x):
      def body(h, _):
        h = sow(jnp.tanh(h), name='h')
        return h, None
      return lax.scan(body, x, None, length=LAYERS)[0]

    batches = inputs(2)
    with self.assertRaisesRegex(ValueError, r"site 'h'.*axis 0 has 2"
                                r" entries where the batch has 4.*example_axis"):
      activations.export(f, batches, tmp_path(self), progress=False)
    data = activations.export(f, batches, tmp_path(self),
                              example_axis={'h': 1}, progress=False)
    x = np.concatenate(batches)
    first = np.tanh(x)
    got = data.read('h')
    self.assertEqual(got.shape, (2 * EXAMPLES, LAYERS, POSITIONS, 2))
    sow_testing.assert_close(got[:, 0], first)
    sow_testing.assert_close(got[:, 1], np.tanh(first))


class ReductionsTest(parameterized.TestCase):

  def export(self, **kwargs):
    self.batches = inputs(3, seed=2)
    self.x = np.concatenate(self.batches)
    return activations.export(lambda x: sow(x * 3, name='h'), self.batches,
                              tmp_path(self), progress=False, **kwargs)

  @parameterized.parameters(
      (slice(1, None), np.s_[:, 1:]),
      (0, np.s_[:, 0]),
      ((2, 0), np.s_[:, [2, 0]]),
  )
  def test_positions(self, positions, index):
    data = self.export(positions=positions)
    np.testing.assert_array_equal(data.read('h'), (self.x * 3)[index])

  def test_dtype_cast_on_device_is_stored_as_that_dtype(self):
    data = self.export(dtype=jnp.bfloat16)
    self.assertEqual(data.spec('h').dtype, 'bfloat16')
    got = data.read('h')
    self.assertEqual(got.dtype, ml_dtypes.bfloat16)
    np.testing.assert_array_equal(
        got, (self.x * 3).astype(ml_dtypes.bfloat16))
    self.assertEqual(data.array('h').spec().to_json()['dtype'], 'bfloat16')

  def test_norm_and_top_k_equal_numpy(self):
    data = self.export(statistics=['norm'], top_k=1, values=False)
    self.assertNotIn('values', [a.output for a in data.layout.arrays])
    y = self.x * 3
    sow_testing.assert_close(data.read('h', 'norm'),
                             np.sqrt((y.astype(np.float64) ** 2).sum(-1)))
    np.testing.assert_array_equal(data.read('h', 'top_k_values'),
                                  y.max(-1, keepdims=True))
    np.testing.assert_array_equal(data.read('h', 'top_k_indices'),
                                  y.argmax(-1)[..., None])

  def test_statistics_equal_numpy_over_every_row(self):
    data = self.export(statistics=['mean', 'var'], values=False)
    flat = (self.x * 3).astype(np.float64).reshape(-1, 2)
    stats = data.statistics('h')
    self.assertEqual(stats.count, len(flat))
    # float32 means and sums of squares of 36 rows of |x| < 20, combined in
    # float64: a relative error of a few float32 ulps.
    np.testing.assert_allclose(stats.mean, flat.mean(0), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(stats.var, flat.var(0), rtol=1e-5)

  def test_mean_without_var_has_no_var(self):
    stats = self.export(statistics='mean').statistics('h')
    self.assertIsNone(stats.var)


class ResumeTest(absltest.TestCase):

  def test_a_rerun_continues_after_the_complete_batches(self):
    executed = []

    def f(x):
      jax.debug.callback(lambda v: executed.append(float(v)), x[0, 0, 0])
      return sow(x * 2, name='h')

    batches = inputs(5, seed=3)
    path = tmp_path(self)
    activations.export(f, batches[:2], path, progress=False)
    self.assertLen(executed, 2)
    data = activations.export(f, batches, path, progress=False)
    # The first two batches were skipped, not run again.
    self.assertEqual(executed[2:], [float(b[0, 0, 0]) for b in batches[2:]])
    self.assertEqual(data.complete_batches, 5)
    np.testing.assert_array_equal(data.read('h'),
                                  np.concatenate(batches) * 2)
    # The arrays are trimmed to the complete batches, for any zarr reader.
    self.assertEqual(data.array('h').shape[0], 5 * EXAMPLES)
    self.assertEqual(
        store_lib.Store.open(path).arrays['h/values'].shape[0],
        5 * EXAMPLES)
    with open(os.path.join(path, '.zattrs')) as f:
      attrs = json.load(f)
    self.assertEqual((attrs['complete_batches'], attrs['examples']),
                     (5, 5 * EXAMPLES))
    self.assertEqual(attrs[store_lib.ATTRIBUTE]['sites']['h']['name'], 'h')

  def test_a_second_export_reads_the_function_anew(self):
    # Re-exporting at successive checkpoints: the weights of a model the
    # function closes over are updated in place and a global it reads
    # changes; each export writes what a direct call computes then.
    model = nnx.Linear(2, WIDTH, rngs=nnx.Rngs(0))
    scale = {'by': 1.0}

    def f(x):
      return sow(model(x) * scale['by'], name='h')

    for checkpoint in range(3):
      data = activations.export(f, inputs(2), tmp_path(self), progress=False)
      want = np.concatenate([f(x) for x in inputs(2)])
      sow_testing.assert_close(data.read('h'), want)
      model.kernel[...] = model.kernel[...] + 1.0
      scale['by'] = 20.0 * (checkpoint + 1)
    self.assertEqual(scale['by'], 60.0)

  def test_each_export_compiles_its_step_once(self):
    def program():
      def f(x):
        return sow(x * 2, name='h')
      return f

    activations.export(program(), inputs(1), tmp_path(self), progress=False)
    counts = []
    for n in (1, 4):  # a new function each time, as a new export sees it
      with sow_testing.count_compiles() as compiles:
        data = activations.export(program(), inputs(n, seed=4),
                                  tmp_path(self), progress=False)
      counts.append(len(compiles))
      np.testing.assert_array_equal(data.read('h'),
                                    np.concatenate(inputs(n, seed=4)) * 2)
    # As many programs for 4 batches as for 1: the step is compiled once.
    self.assertEqual(counts[0], counts[1])
    self.assertGreater(counts[0], 0)

  def test_one_function_of_models_with_other_sites(self):
    # The sites come with each compiled program: a function exported with a
    # model of 2 blocks, then of 3, then of 2 again, names the sites of the
    # model of each call.
    self.enter_context(capture_compat.install())
    f = tap(lambda m, x: m(x), 'blocks.*', inputs=False)
    small, large = Model(nnx.Rngs(0)), Model(nnx.Rngs(1))
    large.blocks.append(Block(nnx.Rngs(2)))
    sites = lambda n: tuple(f'blocks.{i}.__call__.output' for i in range(n))
    for model, n in ((small, 2), (large, 3)):
      data = activations.export(f, inputs(1), tmp_path(self), args=(model,),
                                names='blocks.*.__call__.output',
                                progress=False)
      self.assertEqual(data.sites, sites(n))
    data = activations.export(f, inputs(1), tmp_path(self), args=(small,),
                              names='blocks.*.__call__.output',
                              progress=False)
    self.assertEqual(data.sites, sites(2))
    sow_testing.assert_close(data.read(sites(2)[1]),
                             jax.jit(residuals)(small, inputs(1)[0])[1])

  def test_an_exported_function_is_not_kept_alive(self):
    import gc  # pylint: disable=g-import-not-at-top
    import weakref  # pylint: disable=g-import-not-at-top

    def f(x):
      return sow(x * 2, name='h')

    activations.export(f, inputs(1), tmp_path(self), progress=False)
    ref = weakref.ref(f)
    del f
    gc.collect()
    self.assertIsNone(ref())

  def test_a_bound_method(self):
    class Probe:

      def __init__(self, scale):
        self.scale = scale

      def run(self, x):
        return sow(x * self.scale, name='h')

    batches = inputs(2)
    data = activations.export(Probe(3.0).run, batches, tmp_path(self),
                              progress=False)
    np.testing.assert_array_equal(data.read('h'),
                                  np.concatenate(batches) * 3.0)

  def test_a_rerun_with_nothing_new_writes_nothing(self):
    batches = inputs(2)
    path = tmp_path(self)
    activations.export(lambda x: sow(x, name='h'), batches, path,
                       progress=False)
    again = activations.export(lambda x: sow(x, name='h'), batches, path,
                               progress=False)
    self.assertEqual(again.complete_batches, 2)


class PipelineTest(absltest.TestCase):

  def test_the_next_batch_is_computed_before_the_last_is_committed(self):
    BATCHES = 12  # pylint: disable=invalid-name
    events = []
    committed = store_lib.Store.commit

    def commit(store, process, batches):
      committed(store, process, batches)
      if batches:  # not the progress file a run starts with
        events.append(('committed', batches - 1))

    def batches():
      for i, x in enumerate(inputs(BATCHES)):
        events.append(('read', i))
        yield x

    with absltest.mock.patch.object(store_lib.Store, 'commit', commit):
      activations.export(lambda x: sow(x, name='h'), batches(),
                         tmp_path(self), in_flight=2, progress=False)
    order = [e for e in events]
    self.assertCountEqual(
        order, [(k, i) for k in ('read', 'committed')
                for i in range(BATCHES)])
    # Batch k + 1 was read (and dispatched) before batch k was committed, at
    # least once: the host writes while the device computes.
    self.assertTrue(any(order.index(('read', i + 1)) <
                        order.index(('committed', i))
                        for i in range(BATCHES - 1)))
    # And never more than in_flight + 3 batches read and not committed (the
    # queue's, the two being written, the one being queued): host memory is
    # bounded, here by 5 batches, not by the dataset's 12.
    for i in range(BATCHES):
      ahead = sum(1 for e in order[:order.index(('committed', i))]
                  if e[0] == 'read') - i
      self.assertLessEqual(ahead, 2 + 3)

  def test_progress_is_drawn_only_when_asked_or_on_a_terminal(self):
    import contextlib  # pylint: disable=g-import-not-at-top
    import io  # pylint: disable=g-import-not-at-top

    for progress, drawn in ((None, False), (True, True), (False, False)):
      err = io.StringIO()
      with contextlib.redirect_stderr(err):
        activations.export(lambda x: sow(x, name='h'), inputs(2),
                           tmp_path(self), progress=progress)
      self.assertEqual('examples/s' in err.getvalue(), drawn, progress)
      if drawn:
        self.assertIn('2/2', err.getvalue())


if __name__ == '__main__':
  absltest.main()
