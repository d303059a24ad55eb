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
"""Threads and leaks across the transform.

* 8 threads x 50 calls over shared functions and a shared model: the 7 that
  capture and plant each get exactly their own values, and the one that
  calls them plainly (recording JAX's compiled fast paths meanwhile) its own;
* the core cases pass under ``jax.checking_leaks()``; after an exception in
  a captured function nothing remains; 1,000 eager captures keep memory flat.
"""

import gc
import threading
import tracemalloc

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import capture
from flax.nnx.sow import perturb
from flax.nnx.sow import plant
from flax.nnx.sow import sow
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import inner_calls

import sow_testing


X = jnp.array([0.5, -1.0, 2.0], jnp.float32)


def _jit_body(v):
  return sow(v * 2.0, name='jit')


def _scan_step(c, _):
  return sow(jnp.tanh(c), name='scan'), None


def _cond_true(v):
  return sow(v + 1.0, name='cond')


def _cond_false(v):
  return sow(v - 1.0, name='cond')


def _remat_body(v):
  return sow(jnp.sin(v), name='remat')


def _vmap_body(v):
  return sow(v * v, name='vmap')


# Functions defined once: JAX retraces and recompiles a jit, loop or branch
# whose function is a new closure on each call, with or without capture.
_jit_fn = jax.jit(_jit_body)
_remat_fn = jax.checkpoint(_remat_body)
_vmap_fn = jax.vmap(_vmap_body)


def program(x):
  """A sow at each kind of site: top level, jit, scan, cond, remat, vmap."""
  h = sow(jnp.sin(x), name='top')
  h = _jit_fn(h)
  h = lax.scan(_scan_step, h, None, length=3)[0]
  h = lax.cond(h[0] > 0, _cond_true, _cond_false, h)
  h = _remat_fn(h)
  return _vmap_fn(h)


def program_by_hand(x):
  """``program`` without sows: the oracle of every value it sows."""
  values = {}
  h = values['top'] = jnp.sin(x)
  h = values['jit'] = jax.jit(lambda v: v * 2.0)(h)
  steps = []
  for _ in range(3):
    h = jnp.tanh(h)
    steps.append(h)
  values['scan'] = jnp.stack(steps)
  h = values['cond'] = h + 1.0 if h[0] > 0 else h - 1.0
  h = values['remat'] = jnp.sin(h)
  h = values['vmap'] = h * h
  return h, values


class Model(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 4, rngs=rngs)

  def __call__(self, x):
    h = sow(jnp.tanh(self.linear(x)), name='hidden')
    return sow(jnp.sum(h * h), name='energy')


# Module-level functions: JAX itself retraces and recompiles a loop whose body
# is a new closure on each call.
def _below_3(c):
  return c[0] < 3.0


def _clobber_step(c):
  return sow(c + 1.0, name='w', mode='clobber')


# The functions of the memory test are defined once: a new closure per call
# would be a new function to JAX, traced and compiled anew on each call
# (with or without capture), which is JAX's cache growing, not ours.
_memory_jitted = jax.jit(lambda v: sow(jnp.tanh(v), name='jit') * 2.0)


def _memory_step(c, _):
  return sow(c * 0.5, name='scan'), None


def _memory_program(x):
  x = sow(jnp.sin(x), name='top')
  x = _memory_jitted(x)
  return lax.scan(_memory_step, x, None, length=2)[0]


class ConcurrencyTest(absltest.TestCase):

  def test_threads_get_their_own_values(self):
    model = Model(nnx.Rngs(0))
    jitted = jax.jit(program)
    n_threads, n_calls = 8, 50
    inputs = [[X + 0.01 * (t * n_calls + i) for i in range(n_calls)]
              for t in range(n_threads)]
    # Oracles, single-threaded and without sow machinery.
    expected = [[(program_by_hand(x), jnp.tanh(model.linear(x)))
                 for x in xs] for xs in inputs]
    kernel_before = np.asarray(model.linear.kernel[...]).copy()
    barrier = threading.Barrier(n_threads)

    # Shared by every thread.
    runs = [capture(program), jax.jit(capture(program)), capture(jitted)]
    captured_model = capture(model)

    def work(t):
      barrier.wait()
      if t == n_threads - 1:
        plain(t)
        return
      for i, x in enumerate(inputs[t]):
        (want_out, want), want_hidden = expected[t][i]
        out, collected = runs[(t + i) % 3](x)
        # The oracles are other programs (Python loops for scan and vmap,
        # an eager matmul): equal to float rounding; a value of another
        # thread would differ at order 1.
        sow_testing.assert_close(out, want_out)
        self.assertEqual(list(collected), list(want))
        for name, value in want.items():
          self.assertLen(collected[name], 1)
          sow_testing.assert_close(collected[name][0], value)
        energy, sown = captured_model(x)
        sow_testing.assert_close(sown['hidden'][0], want_hidden)
        np.testing.assert_array_equal(sown['energy'][0], energy)  # itself
        sow_testing.assert_close(plant(program, collected)(x), want_out)

    def plain(t):
      # One thread captures nothing: its jits record their compiled fast
      # paths (those of `jitted` hold sows) while the others capture, which
      # must neither drop those threads' sows nor change its own values.
      for i, x in enumerate(inputs[t]):
        (want_out, _), want_hidden = expected[t][i]
        sow_testing.assert_close(jitted(x), want_out)
        sow_testing.assert_close(program(x), want_out)
        sow_testing.assert_close(
            model(x), jnp.sum(want_hidden * want_hidden))

    failures = sow_testing.run_in_threads(work, n_threads)
    self.assertEqual(failures, [])
    np.testing.assert_array_equal(model.linear.kernel[...], kernel_before)
    self.assertFalse(primitive.harvesting.value)


class LeakTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('eager', capture),
      ('jit_of_capture', lambda f: jax.jit(capture(f))),
  )
  def test_core_cases_under_checking_leaks(self, wrap):
    with jax.checking_leaks():
      out, collected = wrap(program)(X)
      want_out, want = program_by_hand(X)
      sow_testing.assert_close(out, want_out)
      for name, value in want.items():
        sow_testing.assert_close(collected[name][0], value)

      def loss(x):
        return jnp.sum(perturb(jnp.sin(x), name='g') ** 2)

      _, collected = wrap(jax.grad(loss))(X)
      sow_testing.assert_close(collected['g'][0], 2 * np.sin(X))

      def clobbered(x):
        sow(x, name='c', mode='clobber')
        return lax.while_loop(lambda c: c[0] < 3.0,
                              lambda c: sow(c + 1.0, name='c', mode='clobber'),
                              x)

      _, collected = wrap(clobbered)(X)
      np.testing.assert_array_equal(collected['c'][0], X + 1.0 + 1.0 + 1.0)
      with self.assertWarns(inner_calls.TakenByInnerCall):
        (_, inner), outer = wrap(capture(program, names=['scan']))(X)
      self.assertEqual(list(inner), ['scan'])
      self.assertEqual(list(outer), ['top', 'jit', 'cond', 'remat', 'vmap'])
      _, collected = capture(program)(X)
      with self.assertWarns(inner_calls.TakenByInnerCall):
        planted, _ = wrap(plant(program, collected))(X)
      np.testing.assert_array_equal(planted, program(X))

  @parameterized.named_parameters(
      ('in_f', 'f'),
      ('in_the_interpreter', 'interpreter'),
      ('in_plant', 'plant'),
      ('in_a_nested_capture', 'nested'),
  )
  def test_nothing_remains_after_an_exception(self, where):
    class Boom(Exception):
      pass

    def failing(x):
      sow(x, name='before')
      if where == 'f':
        raise Boom('raised while tracing f')
      if where == 'interpreter':  # an append sow in a while_loop: refused
        return lax.while_loop(lambda c: c[0] < 3.0,
                              lambda c: sow(c + 1.0, name='w'), x)
      return x

    runs = {
        'f': lambda: capture(failing)(X),
        'interpreter': lambda: capture(failing)(X),
        'plant': lambda: plant(failing, {'before': (X[:2],)})(X),
        'nested': lambda: capture(jax.jit(capture(
            lambda x: failing(x) + jnp.asarray(Boom('no array')))))(X),
    }
    with self.assertRaises(Exception):
      runs[where]()
    # Nothing remains: no harvesting flag, sow is the identity without an
    # effect, and the next capture is normal.
    self.assertFalse(primitive.harvesting.value)
    jaxpr = jax.make_jaxpr(lambda x: sow(x * 2.0, name='after'))(X)
    self.assertEqual(jaxpr.effects, set())
    self.assertIs(sow(X, name='after'), X)
    out, collected = capture(program)(X)
    want_out, want = program_by_hand(X)
    sow_testing.assert_close(out, want_out)
    self.assertEqual(list(collected), list(want))
    for name in want:
      self.assertLen(collected[name], 1)

  def test_memory_is_flat_over_1000_eager_captures(self):
    def run(n):
      for i in range(n):
        out, collected = capture(_memory_program)(X + i)
        del out, collected

    def measure():
      gc.collect()
      return (tracemalloc.get_traced_memory()[0], len(gc.get_objects()),
              len(jax.live_arrays()))

    run(100)  # warm up: compilation and every cache filled once
    tracemalloc.start()
    try:
      before = measure()
      run(1000)
      after = measure()
    finally:
      tracemalloc.stop()
    memory, objects, arrays = (a - b for a, b in zip(after, before))
    # A leak of one record, jaxpr or array per call would be >= 1,000 objects
    # and far more than 1 MB of Python memory.
    self.assertLess(memory, 1 << 20)
    self.assertLess(objects, 1000)
    self.assertLessEqual(arrays, 0)


  def test_eager_capture_of_loops_compiles_once(self):
    # Found by the memory test: the scan and while_loop rules built a new
    # body jaxpr on every call, so JAX's compilation cache never hit and an
    # eager capture compiled its loops again on each call (about 100x slower,
    # and memory grew with every call).
    def f(x):
      sow(x, name='w', mode='clobber')
      x = lax.while_loop(_below_3, _clobber_step, x)
      return lax.scan(_memory_step, x, None, length=2)[0]

    inputs = [X + i for i in range(3)]
    capture(f)(X)  # warm up: compiles once
    with sow_testing.count_compiles() as compiles:
      for x in inputs:
        out, collected = capture(f)(x)
    self.assertEmpty(compiles)
    # Oracle: the loops by hand.
    c = np.asarray(X + 2)
    while c[0] < 3.0:
      c = c + 1.0
    np.testing.assert_array_equal(collected['w'][0], c)
    np.testing.assert_array_equal(collected['scan'][0],
                                  np.stack([c * 0.5, c * 0.25]))
    np.testing.assert_array_equal(out, c * 0.25)


if __name__ == '__main__':
  absltest.main()
