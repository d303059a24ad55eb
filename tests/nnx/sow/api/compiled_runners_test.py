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
"""``capture`` of a ``jax.jit`` function: it keeps the function's compiled
program, keyed by what keys ``jit`` (static and donated arguments, weak
types, layouts, placement), bounded, and per selection.
"""

import functools
import gc
import importlib
import logging
import threading

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax.experimental.layout import Format, Layout
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import capture
from flax.nnx.sow import sow

import sow_testing


# The module, not the function of the same name that flax.nnx.sow exports.
capture_lib = importlib.import_module('flax.nnx.sow.capture')

X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)
_ONE_DEVICE = jax.sharding.SingleDeviceSharding(jax.devices()[0])


def _pyramid(x):
  """Sums neighbours level by level, sowing each level: as many sows as
  halvings of ``x``'s length, so the result structure depends on shape."""
  while x.shape[0] > 1:
    x = sow(x[::2] + x[1::2], name='level')
  return x


def _pyramid_oracle(x):
  levels = []
  x = np.asarray(x)
  while x.shape[0] > 1:
    x = (x[::2] + x[1::2]).astype(x.dtype)
    levels.append(x)
  return x, levels


def _runners(f) -> dict:
  return capture_lib._RUNNERS[f].runners


class CompiledRunnerTest(parameterized.TestCase):
  """Eager ``capture(jax.jit(f))``: JAX's own rules for ``f`` decide."""

  def assert_pyramid(self, result, x):
    out, collected = result
    want_out, want_levels = _pyramid_oracle(x)
    np.testing.assert_array_equal(out, want_out)
    self.assertEqual(out.dtype, want_out.dtype)
    got_levels = collected.get('level', ())
    self.assertLen(got_levels, len(want_levels))
    for got, want in zip(got_levels, want_levels):
      np.testing.assert_array_equal(got, want)
      self.assertEqual(got.dtype, want.dtype)

  def test_signatures_do_not_share_a_result_structure(self):
    # Shapes A, B, A: 3 sows, then 2, then 3 again.
    captured = capture(jax.jit(_pyramid))
    for n in (8, 4, 8, 2, 4):
      x = jnp.arange(n, dtype=jnp.float32)
      self.assert_pyramid(captured(x), x)

  def test_python_scalars_are_traced_as_jit_traces_them(self):
    def scaled(x, lr):
      return sow(x * lr, name='s') + 1

    direct, jitted = jax.jit(scaled), jax.jit(scaled)
    lrs = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
    with sow_testing.count_compiles() as direct_compiles:
      for lr in lrs:
        direct(X, lr)
    with sow_testing.count_compiles() as compiles:
      for lr in lrs:
        out, collected = capture(jitted)(X, lr)
        np.testing.assert_array_equal(
            collected['s'][0], np.asarray(X) * np.float32(lr)
        )
        sow_testing.assert_close(out, direct(X, lr))
    self.assertLen(direct_compiles, 1)
    self.assertLen(compiles, len(direct_compiles))
    # Traced with a weak type, as jit traces a Python scalar: an int32 input
    # stays int32.
    out, _ = capture(jitted)(jnp.arange(3, dtype=jnp.int32), 2)
    self.assertEqual(out.dtype, jnp.int32)

  def test_static_arguments_key_compilations_as_jit_does(self):
    traces = []

    def power(x, n, *, offset):
      traces.append((n, offset))
      y = x
      for _ in range(n - 1):  # Python control flow: n must be static
        y = y * x
      return sow(y, name='p') + offset

    # `n` named static: jit infers its position, so it is static by
    # position and by keyword.
    direct = jax.jit(power, static_argnames=('n', 'offset'))
    jitted = jax.jit(power, static_argnames=('n', 'offset'))
    calls = [(2, 0.0), (3, 0.0), (2, 0.0), (3, 1.0), (2, 0.0)]
    with sow_testing.count_compiles() as direct_compiles:
      for n, offset in calls:
        direct(X, n, offset=offset)
    direct_traces, traces[:] = list(traces), []
    with sow_testing.count_compiles() as compiles:
      for n, offset in calls:
        out, collected = capture(jitted)(X, n, offset=offset)
        sow_testing.assert_close(out, direct(X, n, offset=offset))
        sow_testing.assert_close(collected['p'][0], np.asarray(X) ** n)
    self.assertLen(direct_compiles, 3)
    self.assertLen(compiles, len(direct_compiles))
    self.assertEqual(traces, direct_traces)
    # A static argument passed by keyword is still static, as for jit.
    with sow_testing.count_compiles() as compiles:
      out, _ = capture(jitted)(X, n=3, offset=1.0)
    self.assertEqual(len(compiles), 1)  # by keyword: a new call signature
    sow_testing.assert_close(out, direct(X, 3, offset=1.0))

  @parameterized.parameters(1, -1)
  def test_a_static_numpy_scalar_reaches_f_as_given(self, argnum):
    seen = []

    def f(x, k):
      seen.append(type(k))
      return sow(x * int(k), name='s')  # int(k): k must be concrete

    jitted = jax.jit(f, static_argnums=argnum)
    for k in (2, 3):
      _, collected = capture(jitted)(X, np.int32(k))
      np.testing.assert_array_equal(collected['s'][0], X * k)
    self.assertEqual(seen, [np.int32, np.int32])

  def test_a_jitted_module_is_closed_over_as_jit_does(self):
    class Scale(nnx.Module):

      def __init__(self, update):
        self.update = update
        self.count = nnx.BatchStat(jnp.zeros(()))
        self.w = nnx.Param(jnp.arange(3, dtype=jnp.float32))

      def __call__(self, x):
        if self.update:
          self.count[...] = self.count[...] + 1
        return sow(x * self.w[...], name='y')

    model = Scale(update=False)
    out, collected = capture(jax.jit(model))(X)
    np.testing.assert_array_equal(out, jax.jit(model)(X))
    np.testing.assert_array_equal(collected['y'][0], out)
    # A closed-over model updated inside the jit: the direct call's error.
    with self.assertRaises(Exception) as direct:
      jax.jit(Scale(update=True))(X)
    with self.assertRaises(type(direct.exception)):
      capture(jax.jit(Scale(update=True)))(X)

  def test_keyword_arguments_are_traced_as_jit_traces_them(self):
    def scaled(x, *, lr, bias=0.0):
      return sow(x * lr, name='s') + bias

    direct, jitted = jax.jit(scaled), jax.jit(scaled)
    calls = [dict(lr=0.1), dict(lr=0.2), dict(lr=0.3, bias=1.0),
             dict(lr=jnp.float32(0.4)), dict(lr=0.5, bias=2.0)]
    with sow_testing.count_compiles() as direct_compiles:
      for kwargs in calls:
        direct(X, **kwargs)
    with sow_testing.count_compiles() as compiles:
      for kwargs in calls:
        out, collected = capture(jitted)(X, **kwargs)
        sow_testing.assert_close(out, direct(X, **kwargs))
        np.testing.assert_array_equal(
            collected['s'][0], np.asarray(X) * np.float32(kwargs['lr'])
        )
    self.assertLen(compiles, len(direct_compiles))

  def test_an_unhashable_static_argument_fails_as_in_a_direct_call(self):
    f = jax.jit(lambda x, opts: sow(x * opts[0], name='s'), static_argnums=1)
    with self.assertRaisesRegex(ValueError, 'hashable') as direct:
      f(X, [2.0])
    with self.assertRaisesRegex(ValueError, 'hashable') as captured:
      capture(f)(X, [2.0])
    self.assertEqual(type(captured.exception), type(direct.exception))

  @parameterized.parameters(
      dict(argnums=0), dict(argnames='x'),
  )
  def test_donated_arguments_are_donated(self, argnums=None, argnames=None):
    def f(x):
      return sow(x * 2, name='h') + 1

    options = dict(donate_argnums=argnums, donate_argnames=argnames)
    direct_x = jnp.ones(4)
    jax.jit(f, **options)(direct_x)
    # The oracle: a direct call donates (deletes) its argument here.
    self.assertTrue(direct_x.is_deleted())
    jitted = jax.jit(f, **options)
    x = jnp.ones(4)
    out, collected = capture(jitted)(x) if argnums == 0 else capture(jitted)(
        x=x
    )
    self.assertTrue(x.is_deleted())
    np.testing.assert_array_equal(out, np.full(4, 3.0, np.float32))
    np.testing.assert_array_equal(collected['h'][0], np.full(4, 2.0))
    kept = jnp.ones(4)
    capture(jax.jit(f))(kept)  # without donation: kept
    self.assertFalse(kept.is_deleted())

  @parameterized.named_parameters(
      ('unplaced', {}),
      # A placed jit: the runner takes its shardings, and still writes the
      # updates back (capturing the jitted function itself dropped them).
      ('in_shardings', {'in_shardings': (None, _ONE_DEVICE)}),
      ('out_shardings', {'out_shardings': _ONE_DEVICE}),
  )
  def test_hijax_variables_are_updated_as_jit_updates_them(self, options):
    class Counter(nnx.Module):

      def __init__(self):
        self.count = nnx.BatchStat(jnp.zeros((), jnp.float32))
        self.w = nnx.Param(jnp.arange(3, dtype=jnp.float32))

      def __call__(self, x):
        self.count[...] = self.count[...] + 1
        return sow(x * self.w[...], name='y')

    def forward(model, x):
      return model(x)

    with nnx.var_defaults(hijax=True):
      direct_model, model = Counter(), Counter()
    jitted = jax.jit(forward, **options)
    for _ in range(2):
      direct_out = jitted(direct_model, X)
      out, collected = capture(jitted)(model, X)
      np.testing.assert_array_equal(out, direct_out)
      np.testing.assert_array_equal(collected['y'][0], direct_out)
    # The oracle: the direct call updated its model's Hijax BatchStat twice.
    self.assertEqual(float(direct_model.count[...]), 2.0)
    self.assertEqual(float(model.count[...]), float(direct_model.count[...]))
    self.assertIsInstance(model.count, nnx.variablelib.HijaxVariable)

  def test_a_jit_with_layouts_refuses_hijax_arguments(self):
    # A jit with layouts is captured as it is; the copies it would receive
    # hold ordinary Variables, whose updates jax.jit drops: refused, by name.
    class Scaled(nnx.Module):

      def __init__(self):
        self.w = nnx.Param(jnp.arange(3, dtype=jnp.float32))

    def scaled(model, x):
      return sow(x * model.w[...][None], name='y')  # (2, 3) * (1, 3)

    x = jnp.ones((2, 3))
    jitted = jax.jit(
        scaled, in_shardings=(None, Format(Layout((0, 1)), _ONE_DEVICE))
    )
    model = Scaled()
    out, collected = capture(jitted)(model, x)  # ordinary Variables: works
    np.testing.assert_array_equal(out, x * np.arange(3)[None])
    np.testing.assert_array_equal(collected['y'][0], out)
    with nnx.var_defaults(hijax=True):
      hijax_model = Scaled()
    with self.assertRaisesRegex(
        NotImplementedError, r"'scaled' has layouts.*1 Hijax Variable"
    ):
      capture(jitted)(hijax_model, x)

  def test_a_placed_jit_is_captured_with_its_placement(self):
    # in_shardings and out_shardings given: the runner is jitted with them,
    # so the sharding stays in the program.
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    jitted = jax.jit(lambda x: sow(x * 2, name='h') + 1,
                     in_shardings=sharding, out_shardings=sharding)
    for x in (X, X + 1):
      out, collected = capture(jitted)(x)
      np.testing.assert_array_equal(out, jitted(x))
      np.testing.assert_array_equal(collected['h'][0], x * 2)
    self.assertEqual(out.sharding, sharding)

  def test_predicates_are_compared_by_what_they_select(self):
    jitted = jax.jit(lambda x: sow(x + 1, name='a') * sow(x * 2, name='b'))
    capture(jitted, names=lambda n: n == 'a')(X)  # the one compilation
    # Computed before counting: run first in a process, the oracle's own
    # eager addition compiles.
    want = X + 1
    with sow_testing.count_compiles() as compiles:
      for _ in range(20):
        _, collected = capture(jitted, names=lambda n: n == 'a')(X)
        self.assertEqual(list(collected), ['a'])
        np.testing.assert_array_equal(collected['a'][0], want)
    self.assertEmpty(compiles)
    self.assertLen(_runners(jitted), 1)
    # The same names as a set: the same program.
    capture(jitted, names={'a'})(X)
    self.assertLen(_runners(jitted), 1)
    # Another predicate selecting other names: its own runner.
    _, collected = capture(jitted, names=lambda n: n != 'a')(X)
    self.assertEqual(list(collected), ['b'])
    np.testing.assert_array_equal(collected['b'][0], X * 2)
    self.assertLen(_runners(jitted), 2)

  def test_a_predicate_is_resolved_per_call_signature(self):
    # The names sown depend on the shape: one level name per halving.
    @jax.jit
    def named_levels(x):
      level = 0
      while x.shape[0] > 1:
        x = sow(x[::2] + x[1::2], name=('level', level))
        level += 1
      return x

    deep = lambda name: name[1] >= 1
    for n in (2, 8, 4, 2):
      x = jnp.arange(n, dtype=jnp.float32)
      _, collected = capture(named_levels, names=deep)(x)
      _, levels = _pyramid_oracle(x)
      self.assertEqual(list(collected), [('level', i)
                                         for i in range(1, len(levels))])
      for i, level in enumerate(levels[1:], 1):
        np.testing.assert_array_equal(collected['level', i][0], level)

  def test_the_runners_of_a_function_are_bounded(self):
    jitted = jax.jit(
        lambda x: sum(sow(x * i, name=f's{i}') for i in range(10))
    )
    for i in range(10):
      _, collected = capture(jitted, names=f's{i}')(X)
      self.assertEqual(list(collected), [f's{i}'])
      np.testing.assert_array_equal(collected[f's{i}'][0], X * i)
      self.assertLessEqual(
          len(_runners(jitted)), capture_lib._CompiledRunners._MAX_RUNNERS
      )
    self.assertLen(
        _runners(jitted), capture_lib._CompiledRunners._MAX_RUNNERS
    )

  def test_the_runners_go_with_their_function(self):
    gc.collect()
    before = len(capture_lib._RUNNERS)
    for i in range(8):
      jitted = jax.jit(lambda x, i=i: sow(x * i, name='s'))
      _, collected = capture(jitted, names=lambda n: True)(X)
      np.testing.assert_array_equal(collected['s'][0], X * i)
    del jitted
    gc.collect()
    self.assertLessEqual(len(capture_lib._RUNNERS), before)

  def test_threads_at_different_shapes_and_dtypes(self):
    # 8 threads, 200 calls each, every signature in flight at once: each
    # thread walks the 8 (shape, dtype) signatures from its own start.
    captured = capture(jax.jit(lambda x, k: _pyramid(x * k)))
    signatures = [(n, dtype) for n in (2, 4, 8, 16)
                  for dtype in (np.float32, np.int32)]
    inputs = {s: jnp.arange(s[0], dtype=s[1]) for s in signatures}
    errors = []
    barrier = threading.Barrier(8)

    def worker(start):
      try:
        barrier.wait()
        for call in range(200):
          signature = signatures[(start + call) % len(signatures)]
          k = call % 3 + 1  # a Python int, traced: no compilation per value
          x = inputs[signature]
          self.assert_pyramid(captured(x, k), np.asarray(x) * k)
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)

    with sow_testing.count_compiles() as compiles:
      threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
      for thread in threads:
        thread.start()
      for thread in threads:
        thread.join()
    self.assertEqual(errors, [])
    # At most one compilation per signature (two threads may both miss).
    self.assertGreaterEqual(len(compiles), len(signatures))
    self.assertLessEqual(len(compiles), 8 * len(signatures))


class CacheKeyTest(absltest.TestCase):
  """A cache never answers for a call whose result it did not compute."""

  def test_compiled_runner_per_selection(self):
    jitted = jax.jit(lambda x: sow(x + 1, name='a') + sow(x * 2, name='b'))
    _, only_a = capture(jitted, names='a')(X)
    _, only_b = capture(jitted, names='b')(X)
    with self.assertRaisesRegex(ValueError, r"tag='other'.*selected no sow"):
      capture(jitted, tag='other')(X)
    self.assertEqual(list(only_a), ['a'])
    self.assertEqual(list(only_b), ['b'])
    sow_testing.assert_close(only_b['b'][0], np.asarray(X) * 2)

  def test_compiled_runner_per_static_argument(self):
    jitted = jax.jit(
        lambda x, power: sow(x**power, name='p'), static_argnums=1
    )
    for power in (2, 3, 2):
      _, collected = capture(jitted)(X, power)
      sow_testing.assert_close(collected['p'][0], np.asarray(X) ** power)


  def test_numpy_scalar_arguments_are_traced_as_jit_traces_them(self):
    jitted = jax.jit(lambda x, scale: sow(x * scale, name='s'))
    capture(jitted)(X, np.float32(1.0))  # the one compilation
    with sow_testing.count_compiles() as compiles:
      for scale in (2.0, 3.0, 0.5):
        _, collected = capture(jitted)(X, np.float32(scale))
        np.testing.assert_array_equal(
            collected['s'][0], np.asarray(X) * np.float32(scale)
        )
    self.assertEmpty(compiles)


class CompiledSpeedTest(absltest.TestCase):

  def test_eager_capture_of_jit_compiles_once(self):
    @jax.jit
    def f(x):
      for i in range(4):
        x = sow(jnp.tanh(x * (i + 1)), name='layer')
      return x

    capture(f)(X)  # warm up: one trace, one compilation
    x1 = X + 1.0
    # A jitted function is captured as a jitted runner per call structure:
    # later calls neither trace nor compile.
    with self.assertNoLogs(level=logging.WARNING):
      with jax.log_compiles(True):
        for _ in range(3):
          out, collected = capture(f)(x1)
    np.testing.assert_array_equal(out, f(x1))
    self.assertLen(collected['layer'], 4)
    np.testing.assert_array_equal(collected['layer'][3], out)

  def test_eager_capture_of_inner_jit_compiles_once(self):
    inner = jax.jit(lambda x: sow(jnp.tanh(x), name='h') * 2)
    f = lambda x: inner(x) + 1  # not a jit function: the general path

    capture(f)(X)  # warm up: one compilation of the transformed body
    x1 = X + 1.0
    # An eager `capture` runs f's Python on each call; the jitted body JAX
    # hands over is the one it cached, and so is its transformed body: it
    # is neither traced nor compiled again.
    with sow_testing.count_compiles() as compiles:
      with jax.log_compiles(True), self.assertNoLogs(level=logging.WARNING):
        for _ in range(3):
          out, collected = capture(f)(x1)
    self.assertEmpty(compiles)
    np.testing.assert_array_equal(out, f(x1))
    np.testing.assert_array_equal(collected['h'][0], jnp.tanh(x1))

  def test_compiled_runners_cover_static_and_unhashable_arguments(self):
    @functools.partial(jax.jit, static_argnums=(1,))
    def f(x, power, scale=None):
      del scale
      return sow(x**power, name='p')

    for power in (2, 3, 2):
      out, collected = capture(f)(X, power)
      sow_testing.assert_close(collected['p'][0], X**power)
      np.testing.assert_array_equal(out, f(X, power))
    # An unhashable static leaf cannot key a runner: the general path runs.
    g = jax.jit(lambda x, opts: sow(x * opts['k'], name='g'),
                static_argnums=())
    out, collected = capture(g)(X, {'k': 2.0})
    np.testing.assert_array_equal(collected['g'][0], X * 2)

  def test_eager_capture_runs_the_compiled_body(self):
    # The jit is re-bound, not unrolled: the eager jaxpr has a single jit.
    f = jax.jit(lambda x: sow(jnp.sin(x), name='h') * 2)
    jaxpr = jax.make_jaxpr(capture(f))(X)
    self.assertEqual([e.primitive.name for e in jaxpr.eqns], ['jit'])


if __name__ == '__main__':
  absltest.main()
