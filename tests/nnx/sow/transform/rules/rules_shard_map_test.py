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
"""capture with shardings, shard_map and pmap on 8 simulated CPU devices.

The device count is fixed when JAX starts, so under pytest this module runs
its own tests in a child process with XLA_FLAGS set (``SowShardingTest``);
the child is this file run as ``python rules_shard_map_test.py``.
"""

import os
import subprocess
import sys

from absl.testing import absltest
import sow_layout

_CHILD = os.environ.get('FLAX_SOW_SHARDING_CHILD') == '1'

if _CHILD:
  import jax  # pylint: disable=g-import-not-at-top
  from jax import lax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from jax.sharding import AxisType  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding  # pylint: disable=g-import-not-at-top
  from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top

  from flax.nnx.sow import capture, perturb, plant, sow  # pylint: disable=g-import-not-at-top,g-multiple-import
  import sow_testing  # pylint: disable=g-import-not-at-top

  class ShardingTest(absltest.TestCase):

    def setUp(self):
      super().setUp()
      self.assertEqual(jax.device_count(), 8)
      self.mesh = jax.make_mesh((4, 2), ('x', 'y'),
                                axis_types=(AxisType.Auto,) * 2)
      self.x = jnp.arange(16.0).reshape(8, 2)

    def test_jit_with_in_and_out_shardings(self):
      sharding = NamedSharding(self.mesh, P('x', 'y'))

      @jax.jit
      def inner(v):
        return sow(jnp.sin(v) * 2, name='inner') + 1

      f = jax.jit(lambda v: inner(sow(v * 3, name='outer')),
                  in_shardings=sharding, out_shardings=sharding)
      for run in (capture(f), jax.jit(capture(f))):
        out, collected = run(self.x)
        np.testing.assert_array_equal(collected['outer'][0], self.x * 3)
        sow_testing.assert_close(collected['inner'][0], np.sin(self.x * 3) * 2)
        np.testing.assert_array_equal(out, f(self.x))
      out, _ = capture(f)(self.x)
      self.assertEqual(out.sharding, sharding)

    def _shard_mapped(self, check_vma):
      def body(block):
        sow(block * 2, name='local')
        total = lax.psum(jnp.sum(block), 'x')
        sow(total, name='total')
        return block + total
      return jax.shard_map(body, mesh=self.mesh, in_specs=P('x', 'y'),
                           out_specs=P('x', 'y'), check_vma=check_vma)

    def test_shard_map_layout(self):
      for check_vma in (True, False):
        f = self._shard_mapped(check_vma)
        for run in (jax.jit(capture(f)), capture(jax.jit(f))):
          out, collected = run(self.x)
          np.testing.assert_array_equal(out, f(self.x))
          local = collected['local'][0]
          # One leading axis per mesh axis: local[i, j] is shard (i, j).
          self.assertEqual(local.shape, (4, 2, 2, 1))
          x = np.asarray(self.x)
          for i in range(4):
            for j in range(2):
              np.testing.assert_array_equal(
                  local[i, j], 2 * x[2 * i:2 * i + 2, j:j + 1])
          total = collected['total'][0]
          self.assertEqual(total.shape, (4, 2))
          for j in range(2):  # small integers: exact in any summation order
            np.testing.assert_array_equal(total[:, j], np.sum(x[:, j]))

    def test_perturb_inside_shard_map_under_grad(self):
      def body(block):
        return jnp.sum(perturb(jnp.sin(block), name='g') ** 2, keepdims=True)

      f = jax.shard_map(body, mesh=self.mesh, in_specs=P('x', 'y'),
                        out_specs=P('x', 'y'))
      loss = lambda v: jnp.sum(f(v))
      grad, collected = jax.jit(capture(jax.grad(loss)))(self.x)
      g = collected['g'][0]  # (4, 2, 2, 1): d loss / d sin(block) per shard
      x = np.asarray(self.x)
      for i in range(4):
        for j in range(2):
          sow_testing.assert_close(
              g[i, j], 2 * np.sin(x[2 * i:2 * i + 2, j:j + 1]))
      sow_testing.assert_close(grad, jax.grad(loss)(self.x))

    def test_bounded_appends_in_a_while_loop_inside_shard_map(self):
      # Found by the program fuzzer: the buffers of a bounded append were
      # zeros without the varying manual axes of the values written into
      # them, and JAX refused the loop's carry ("varying manual axes to
      # match"). Oracle: each shard's loop unrolled by hand.
      def body(block):
        def step(c):
          i, h = c
          h = jnp.sin(h * 0.5)
          sow(h, name='h')
          return i + 1, h
        return lax.while_loop(lambda c: c[0] < 2, step, (0, block))[1]

      f = jax.jit(jax.shard_map(body, mesh=self.mesh, in_specs=P('x', 'y'),
                                out_specs=P('x', 'y')))
      out, collected = capture(f, max_steps=3)(self.x)
      (steps,) = collected['h']
      self.assertEqual(steps.values.shape, (4, 2, 3, 2, 1))
      np.testing.assert_array_equal(steps.count, np.full((4, 2), 2))
      for i in range(4):
        for j in range(2):
          h = self.x[2 * i:2 * i + 2, j:j + 1]
          for k in range(2):
            h = jnp.sin(h * 0.5)
            np.testing.assert_array_equal(steps.values[i, j, k], h)
          np.testing.assert_array_equal(steps.values[i, j, 2], 0 * h)
      np.testing.assert_array_equal(out, f(self.x))

    def test_pmap_stacks_per_device(self):
      xs = jnp.arange(8.0)
      f = jax.pmap(lambda v: sow(v * 3, name='p') + 1)
      out, collected = capture(f)(xs)
      np.testing.assert_array_equal(collected['p'][0], np.arange(8.0) * 3)
      np.testing.assert_array_equal(out, f(xs))

    def test_planting_into_shard_map_is_refused(self):
      f = self._shard_mapped(True)
      with self.assertRaisesRegex(NotImplementedError,
                                  'planting into a shard_map'):
        plant(f, {'total': (jnp.zeros((4, 2)),)})(self.x)


class SowShardingTest(absltest.TestCase):
  """Runs the tests above in a process that has 8 CPU devices."""

  def test_in_child_process(self):
    env = dict(os.environ)
    env['FLAX_SOW_SHARDING_CHILD'] = '1'
    env['XLA_FLAGS'] = (
        env.get('XLA_FLAGS', '') + ' --xla_force_host_platform_device_count=8'
    ).strip()
    env['JAX_PLATFORMS'] = 'cpu'
    env['PYTHONPATH'] = sow_layout.child_pythonpath(env)
    result = subprocess.run(
        [sys.executable, '-c',
         f'{sow_layout.CHILD_PRELUDE}import runpy, sys;'
         ' sys.argv = [sys.argv[0]];'
         f' runpy.run_path({os.path.abspath(__file__)!r},'
         ' run_name="__main__")'],
        env=env, cwd=sow_layout.ROOT, capture_output=True, text=True,
        timeout=600,
        check=False,
    )
    self.assertEqual(result.returncode, 0, result.stderr[-4000:])
    self.assertIn('Ran 6 tests', result.stderr)
    self.assertIn('OK', result.stderr)


if _CHILD:
  del SowShardingTest  # the child runs the sharding tests only


if __name__ == '__main__':
  absltest.main()
