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
"""A long process: 10,000 calls of each kind (eager, jitted, a module's, a
tap, a plant, the drop-in ``nnx.capture``) keep the recursion depth Python
can reach and the live objects flat, as a training loop that captures every
step needs."""

import gc
import sys

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp

from flax import nnx
from flax.nnx.sow import capture
from flax.nnx.sow import plant
from flax.nnx.sow import sow
from flax.nnx.sow import tap

import sow_layout
import sow_testing


X = jnp.array([0.5, -1.0, 2.0], jnp.float32)


def _reachable_depth() -> int:
  """How many more Python frames fit on the stack from here.

  A C extension that enters a recursive call and returns without leaving it
  (jaxlib's pytree flattening does, when a nested dict's keys cannot be
  sorted) lowers this by one for good: after a few thousand such calls in
  one process, every deep enough call raises ``RecursionError``.
  """
  def down(n):
    try:
      return down(n + 1)
    except RecursionError:
      return n
  return down(0)


class _Sowing(nnx.Module):

  def __init__(self):
    self.linear = nnx.Linear(3, 3, rngs=nnx.Rngs(0))

  def __call__(self, x):
    y = self.linear(x)
    self.sow(nnx.Intermediate, 'y', y)
    return sow(jnp.sin(y), name='s')


class _Plain(nnx.Module):

  def __init__(self):
    self.linear = nnx.Linear(3, 3, rngs=nnx.Rngs(0))

  def __call__(self, x):
    return jnp.tanh(self.linear(x))


def _doubled(x):
  return sow(x * 2.0, name='a') + 1.0


_jitted_capture = jax.jit(capture(_doubled))


class LongProcessTest(parameterized.TestCase):

  CALLS = 10_000

  @parameterized.named_parameters(
      ('eager', 'eager'), ('jitted', 'jitted'), ('module', 'module'),
      ('tap', 'tap'), ('plant', 'plant'), ('nnx_capture', 'nnx_capture'))
  def test_10000_calls_keep_depth_and_objects_flat(self, kind):
    self.enterContext(sow_layout.overlay())  # Module.sow sows; nnx.capture
    sowing, plain = _Sowing(), _Plain()
    zeros = (jnp.zeros(3),)
    call, check = {
        'eager': (lambda x: capture(_doubled)(x),
                  lambda out: out[1]['a'][0]),
        'jitted': (_jitted_capture, lambda out: out[1]['a'][0]),
        'module': (lambda x: capture(sowing)(x),
                   lambda out: out[1]['y'][0]),
        'tap': (lambda x: capture(tap(plain, 'linear'))(x),
                lambda out: out[1]['linear.__call__.output'][0]),
        'plant': (lambda x: plant(_doubled, {'a': zeros})(x),
                  lambda out: out - 1.0),
        'nnx_capture': (
            lambda x: nnx.capture(sowing, nnx.Intermediate)(x),
            lambda out: out[1]['y'][0]),
    }[kind]
    # The oracles, once: what each call returns, computed directly.
    want = {
        'eager': X * 2.0, 'jitted': X * 2.0,
        'module': sowing.linear(X), 'tap': plain.linear(X),
        'plant': jnp.zeros(3), 'nnx_capture': sowing.linear(X),
    }[kind]

    def run(n):
      for _ in range(n):
        out = call(X)
      return out

    run(100)  # warm up: compilation and every cache filled once
    gc.collect()
    depth, objects = _reachable_depth(), len(gc.get_objects())
    out = run(self.CALLS)
    gc.collect()
    sow_testing.assert_close(check(out), want)
    self.assertEqual(_reachable_depth(), depth)
    # A leak of one record, frame or array per call would be >= 10,000.
    self.assertLess(len(gc.get_objects()) - objects, 1000)
    self.assertGreater(depth, sys.getrecursionlimit() // 2)


if __name__ == '__main__':
  absltest.main()
