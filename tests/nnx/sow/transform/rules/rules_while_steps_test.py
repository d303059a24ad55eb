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
"""Appending sows inside ``while_loop`` with ``capture(f, max_steps=N)``
(``transform/rules/loops.py``, ``transform/steps.py``): a buffer of ``N``
steps and the count of steps run, against decode loops unrolled by hand in
Python; nested loops, ``scan`` inside and around, ``vmap`` with a count per
example, ``jit`` compiling once for every trip count, NNX's loops, what
happens past the bound, and function plants that read the step.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import capture
from flax.nnx.sow import plant
from flax.nnx.sow import sow
from flax.nnx.sow import Steps
from flax.nnx.sow.transform import inner_calls

import sow_testing

assert_close = sow_testing.assert_close

X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


def step_fn(h, i):
  return jnp.tanh(h * 1.5 + i)


def decode(x, n):
  """A decode loop of ``n`` steps (``n`` may be traced) sowing each state."""

  def body(c):
    i, h = c
    h = sow(step_fn(h, i), name='h')
    return i + 1, h

  return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]


def unrolled(x, n):
  """The oracle: the same steps in a Python loop, every state kept."""
  h, states = x, []
  for i in range(n):
    h = step_fn(h, i)
    states.append(h)
  return h, states


def padded(states, bound, shape):
  """``states`` stacked and padded with zeros to ``bound`` entries."""
  rows = [np.asarray(s) for s in states]
  rows += [np.zeros(shape, np.float32)] * (bound - len(rows))
  return np.stack(rows)


def _running(c):
  return c[0] < c[1]


def _step(c):
  i, n, h = c
  return i + 1, n, sow(step_fn(h, i), name='h')


class BoundedAppendTest(parameterized.TestCase):

  @parameterized.product(n=(0, 1, 3, 5), jit=(False, True))
  def test_values_and_count_equal_the_unrolled_loop(self, n, jit):
    run = capture(decode, max_steps=5)
    if jit:
      run = jax.jit(run)
    out, collected = run(X, n)
    last, states = unrolled(X, n)
    self.assertEqual(list(collected), ['h'])
    steps, = collected['h']
    self.assertIsInstance(steps, Steps)
    self.assertEqual(steps.values.shape, (5, 3))
    self.assertEqual(int(steps.count), n)
    self.assertEqual(steps.count.dtype, jnp.int32)
    # The loop body is compiled, the oracle runs op by op: equal to float32
    # rounding (sow_testing.assert_close).
    assert_close(steps.values, padded(states, 5, (3,)))
    assert_close(out, last)
    np.testing.assert_array_equal(steps.mask, np.arange(5) < n)
    self.assertFalse(steps.truncated)

  def test_filled_gives_the_steps_that_ran(self):
    _, collected = capture(decode, max_steps=8)(X, 3)
    _, states = unrolled(X, 3)
    assert_close(collected['h'][0].filled(), np.stack(states))

  def test_jit_compiles_once_for_every_trip_count(self):
    traces = []

    def f(x, n):
      traces.append(None)
      return decode(x, n)

    run = jax.jit(capture(f, max_steps=6))
    with sow_testing.count_compiles() as compiles:
      for n in (1, 4, 6, 2):
        _, collected = run(X, n)
        self.assertEqual(int(collected['h'][0].count), n)
    self.assertLen(traces, 1)
    self.assertLen(compiles, 1)

  def test_an_eager_capture_compiles_the_loop_as_often_as_jax_does(self):
    calls = []

    def f(x, n):
      calls.append(None)
      return lax.while_loop(_running, _step, (0, n, x))[2]

    run = capture(f, max_steps=6)
    f(X, 2), run(X, 2)
    for g in (f, run):
      with sow_testing.count_compiles() as compiles:
        for n in (3, 5):
          g(X, n)
      # The body and condition are the same functions: JAX compiles the
      # loop once; the capture's rewritten loop is cached with them.
      self.assertEmpty(compiles)
    self.assertLen(calls, 6)  # eager: the Python of f on every call

  def test_pytree_values_clobbers_and_program_order(self):

    def f(x, n):
      sow(jnp.zeros((), jnp.float32), name='last', mode='clobber')

      def body(c):
        i, h = c
        h = step_fn(h, i)
        sow({'h': h, 'sum': jnp.sum(h)}, name='tree')
        sow(jnp.sum(h), name='last', mode='clobber')
        sow(h * 2.0, name='twice')
        return i + 1, h

      return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]

    _, collected = capture(f, max_steps=4)(X, 3)
    _, states = unrolled(X, 3)
    self.assertEqual(list(collected), ['last', 'tree', 'twice'])
    tree, = collected['tree']
    assert_close(tree.values['h'], padded(states, 4, (3,)))
    assert_close(tree.values['sum'],
                 padded([jnp.sum(s) for s in states], 4, ()))
    assert_close(collected['last'][0], jnp.sum(states[-1]))
    assert_close(collected['twice'][0].values,
                 padded([s * 2.0 for s in states], 4, (3,)))

  def test_bounds_by_name(self):

    def f(x, n):
      def body(c):
        i, h = c
        h = sow(step_fn(h, i), name='h')
        sow(h[0], name='first')
        return i + 1, h

      return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]

    _, collected = capture(f, max_steps={'h': 3, 'first': 5})(X, 2)
    self.assertEqual(collected['h'][0].values.shape, (3, 3))
    self.assertEqual(collected['first'][0].values.shape, (5,))

  def test_capture_of_a_jit_function_keeps_the_steps_asked_for(self):
    jitted = jax.jit(decode)
    for bound in (4, 6):
      _, collected = capture(jitted, max_steps=bound)(X, 3)
      steps, = collected['h']
      self.assertEqual(steps.values.shape, (bound, 3))
      assert_close(steps.values, padded(unrolled(X, 3)[1], bound, (3,)))

  def test_a_bound_for_a_name_no_loop_appends_is_an_error(self):
    with self.assertRaisesRegex(
        ValueError, r"max_steps bounds 'nope', which no while_loop"):
      capture(decode, max_steps={'h': 3, 'nope': 2})(X, 2)

  @parameterized.parameters(0, 2)
  def test_a_sown_value_without_leaves_still_counts_steps(self, n):
    # Found by the program fuzzer: a bounded append of an empty pytree has
    # no buffer, and the loop was bound without the step count its body
    # carries (an internal JaxprTypeError).
    def f(x):
      def body(c):
        i, h = c
        sow((), name='e')
        return i + 1, h + 1
      return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]

    out, collected = capture(f, max_steps=3)(jnp.ones(2))
    (steps,) = collected['e']
    self.assertEqual(steps.values, ())
    self.assertEqual(int(steps.count), n)
    np.testing.assert_array_equal(out, jnp.ones(2) + n)

  def test_sows_outside_the_loop_are_unchanged(self):

    def f(x, n):
      sow(x, name='before')
      return sow(decode(x, n), name='after')

    _, collected = capture(f, max_steps=4)(X, 2)
    np.testing.assert_array_equal(collected['before'][0], X)
    assert_close(collected['after'][0], unrolled(X, 2)[0])


class NestedTest(absltest.TestCase):

  def test_while_in_while_gives_steps_of_steps(self):

    def f(x, n):
      def outer(c):
        j, h = c
        h = decode(h, j + 1)  # inner loop: j + 1 steps
        return j + 1, h

      return lax.while_loop(lambda c: c[0] < n, outer, (0, x))[1]

    _, collected = jax.jit(capture(f, max_steps=4))(X, 3)
    steps, = collected['h']
    inner = steps.values
    self.assertIsInstance(inner, Steps)
    self.assertEqual(int(steps.count), 3)
    np.testing.assert_array_equal(inner.count, [1, 2, 3, 0])
    self.assertEqual(inner.values.shape, (4, 4, 3))
    h = X
    for j in range(3):
      h, states = unrolled(h, j + 1)
      assert_close(inner.values[j], padded(states, 4, (3,)))
    np.testing.assert_array_equal(inner.values[3], np.zeros((4, 3)))

  def test_scan_inside_the_loop(self):

    def f(x, n):
      def body(c):
        i, h = c

        def inner(h, k):
          h = sow(step_fn(h, i + k), name='h')
          return h, None

        h, _ = lax.scan(inner, h, jnp.arange(2))
        return i + 1, h

      return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]

    _, collected = capture(f, max_steps=3)(X, 2)
    steps, = collected['h']
    self.assertEqual(steps.values.shape, (3, 2, 3))
    h = X
    for i in range(2):
      for k in range(2):
        h = step_fn(h, i + k)
        assert_close(steps.values[i, k], h)
    np.testing.assert_array_equal(steps.values[2], np.zeros((2, 3)))

  def test_loop_inside_scan(self):

    def f(x, ns):
      def body(h, n):
        return decode(h, n), None

      return lax.scan(body, x, ns)[0]

    ns = jnp.array([2, 0, 3])
    _, collected = capture(f, max_steps=3)(X, ns)
    steps, = collected['h']
    np.testing.assert_array_equal(steps.count, [2, 0, 3])
    self.assertEqual(steps.values.shape, (3, 3, 3))
    h = X
    for row, n in enumerate([2, 0, 3]):
      h, states = unrolled(h, n)
      assert_close(steps.values[row], padded(states, 3, (3,)))
    np.testing.assert_array_equal(
        steps.mask, np.arange(3)[None] < np.array([2, 0, 3])[:, None])


class VmapTest(parameterized.TestCase):

  ROWS = jnp.stack([X, -X, X * 0.5])
  NS = jnp.array([2, 4, 0])

  def check_per_example(self, collected, bound):
    steps, = collected['h']
    np.testing.assert_array_equal(steps.count, self.NS)
    self.assertEqual(steps.values.shape, (3, bound, 3))
    for row, (x, n) in enumerate(zip(self.ROWS, self.NS)):
      _, states = unrolled(x, int(n))
      assert_close(steps.values[row], padded(states, bound, (3,)))

  def test_vmap_of_capture_counts_each_example(self):
    _, collected = jax.vmap(capture(decode, max_steps=5))(self.ROWS, self.NS)
    self.check_per_example(collected, 5)

  def test_capture_of_vmap_counts_each_example(self):
    # The loop's predicate is batched: the loop runs until every example is
    # done and keeps the carries of those done.
    _, collected = jax.jit(capture(jax.vmap(decode), max_steps=5))(
        self.ROWS, self.NS)
    self.check_per_example(collected, 5)

  def test_capture_of_vmap_with_a_shared_trip_count(self):
    _, collected = capture(jax.vmap(decode, in_axes=(0, None)),
                           max_steps=4)(self.ROWS, 3)
    steps, = collected['h']
    np.testing.assert_array_equal(steps.count, [3, 3, 3])
    for row, x in enumerate(self.ROWS):
      _, states = unrolled(x, 3)
      assert_close(steps.values[row], padded(states, 4, (3,)))


class OverflowTest(absltest.TestCase):

  def test_eager_overflow_raises(self):
    with self.assertRaisesRegex(
        ValueError, r"ran 5 steps, more than the 3 kept of 'h'"):
      capture(decode, max_steps=3)(X, 5)

  def test_overflow_under_jit_raises_when_the_program_runs(self):
    run = jax.jit(capture(decode, max_steps=3))
    _, collected = run(X, 3)  # within the bound
    self.assertEqual(int(collected['h'][0].count), 3)
    # The package's error, not the runtime's (runtime_checks_test).
    with self.assertRaisesRegex(ValueError,
                                r"ran 4 steps, more than the 3 kept of 'h'"):
      jax.block_until_ready(run(X, 4))

  def test_truncate_keeps_the_first_steps_and_says_so(self):
    _, collected = jax.jit(capture(decode, max_steps=3,
                                   on_overflow='truncate'))(X, 5)
    steps, = collected['h']
    _, states = unrolled(X, 5)
    self.assertEqual(int(steps.count), 5)
    self.assertTrue(steps.truncated)
    assert_close(steps.values, np.stack(states[:3]))
    with self.assertRaisesRegex(ValueError, 'ran 5 steps, more than the 3'):
      steps.filled()

  def test_without_a_bound_append_is_refused(self):
    with self.assertRaisesRegex(NotImplementedError,
                                r"sows 'h' with mode='append'.*max_steps=N"):
      capture(decode)(X, 2)


class BadBoundsTest(parameterized.TestCase):

  @parameterized.parameters(0, -1, True, 2.5, '3')
  def test_bad_max_steps(self, bound):
    with self.assertRaisesRegex(ValueError, 'max_steps must be a positive'):
      capture(decode, max_steps=bound)

  def test_bad_bound_by_name(self):
    with self.assertRaisesRegex(ValueError, r"max_steps\['h'\] must be"):
      capture(decode, max_steps={'h': 0})

  def test_empty_mapping(self):
    with self.assertRaisesRegex(ValueError, 'max_steps is an empty mapping'):
      capture(decode, max_steps={})

  def test_bad_on_overflow(self):
    with self.assertRaisesRegex(ValueError, 'on_overflow must be one of'):
      capture(decode, max_steps=3, on_overflow='drop')

  def test_filled_needs_one_concrete_count(self):
    _, collected = jax.vmap(capture(decode, max_steps=3))(
        jnp.stack([X, X]), jnp.array([1, 2]))
    with self.assertRaisesRegex(ValueError, 'needs one concrete count'):
      collected['h'][0].filled()


class NnxLoopsTest(absltest.TestCase):

  def test_nnx_while_loop_and_fori_loop_with_dynamic_bounds(self):

    class Cell(nnx.Module):

      def __init__(self):
        self.scale = nnx.Param(jnp.float32(1.5))
        self.steps = nnx.Variable(jnp.int32(0))

      def __call__(self, h, i):
        self.steps[...] += 1
        return sow(jnp.tanh(h * self.scale[...] + i), name='h')

    def with_while(cell, x, n):
      def body(c):
        cell, i, h = c
        return cell, i + 1, cell(h, i)

      return nnx.while_loop(lambda c: c[1] < n, body, (cell, 0, x))[2]

    def with_fori(cell, x, n):
      return nnx.fori_loop(
          0, n, lambda i, c: (c[0], c[0](c[1], i)), (cell, x))[1]

    for f in (with_while, with_fori):
      for jit in (False, True):
        with self.subTest(f.__name__, jit=jit):
          cell = Cell()
          run = capture(f, max_steps=6)
          # nnx.jit writes the updates back, as the eager call does.
          out, collected = (nnx.jit(run) if jit else run)(cell, X, 4)
          last, states = unrolled(X, 4)
          steps, = collected['h']
          if f is with_fori and not jit:
            # Eagerly its bounds are concrete and JAX makes it a scan, as
            # in a direct call: the 4 steps stacked.
            assert_close(steps, np.stack(states))
          else:
            self.assertEqual(int(steps.count), 4)
            assert_close(steps.values, padded(states, 6, (3,)))
          assert_close(out, last)
          self.assertEqual(int(cell.steps[...]), 4)


def decode_and_read(x, n):
  """``decode``, also sowing what each step's planted value becomes."""

  def body(c):
    i, h = c
    h = sow(step_fn(h, i), name='h')
    sow(h * 2.0, name='read')
    return i + 1, h

  return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]


class PerStepPlantTest(parameterized.TestCase):

  def test_planting_the_captured_steps_gives_the_clean_run(self):
    # Activation patching through a decode loop: what capture returned for
    # the clean run, planted back, step by step.
    _, collected = capture(decode, max_steps=6)(X, 4)
    clean, = collected['h']
    out = jax.jit(plant(decode, {'h': (clean,)}))(-X, 4)  # another input
    assert_close(out, unrolled(X, 4)[0])

  @parameterized.parameters(False, True)
  def test_a_stack_is_planted_step_by_step(self, jit):
    stack = jnp.stack([jnp.full(3, 0.25 * i, jnp.float32) for i in range(5)])
    run = capture(plant(decode_and_read, {'h': (stack,)}), max_steps=5)
    with self.assertWarns(inner_calls.TakenByInnerCall):
      out, collected = (jax.jit(run) if jit else run)(X, 4)
    read, = collected['read']
    self.assertEqual(int(read.count), 4)
    # The loop carries the planted value: step i reads stack[i].
    np.testing.assert_array_equal(read.values[:4], stack[:4] * 2.0)
    np.testing.assert_array_equal(out, stack[3])

  def test_two_loops_take_one_entry_each_in_order(self):
    first = jnp.stack([jnp.full(3, 1.0 + i, jnp.float32) for i in range(2)])
    second = jnp.stack([jnp.full(3, -1.0 - i, jnp.float32) for i in range(4)])
    out = plant(lambda x: decode(decode(x, 2), 3),
                {'h': (first, second)})(X)
    np.testing.assert_array_equal(out, second[2])

  def test_a_loop_longer_than_the_planted_steps_raises(self):
    short = jnp.zeros((2, 3), jnp.float32)
    with self.assertRaisesRegex(
        ValueError, r"ran 3 steps, but the values planted into 'h' hold 2"):
      plant(decode, {'h': (short,)})(X, 3)
    with self.assertRaisesRegex(
        ValueError, r"ran 3 steps, but the values planted into 'h' hold 2"):
      jax.block_until_ready(jax.jit(plant(decode, {'h': (short,)}))(X, 3))

  def test_planted_steps_are_checked_against_the_sow(self):
    with self.assertRaisesRegex(
        ValueError, r"values\['h'\]\[0\] has a leaf of float32\[5, 4\], but"
        r' the sow has float32\[5, 3\]'):
      plant(decode, {'h': (jnp.zeros((5, 4), jnp.float32),)})(X, 2)

  def test_a_function_plant_reads_the_step(self):
    # "Add a steering vector at steps 1..2": one compiled program.
    steer = jnp.array([0.5, -0.5, 0.25], jnp.float32)

    def steering(value, step):
      return jnp.where((step >= 1) & (step <= 2), value + steer, value)

    out = jax.jit(plant(decode, {'h': steering}))(X, 5)
    h = X
    for i in range(5):
      h = step_fn(h, i)
      if 1 <= i <= 2:
        h = h + steer
    assert_close(out, h)


class LeaflessSowTest(parameterized.TestCase):
  """A sow of a value with no leaves (``{}``, ``()``) in a while_loop under
  ``vmap``: no leaf carries the mapped axis, yet the step count has one
  entry per example, as for any other sow (the program fuzzer's case:
  ``Vmap(size=2, While(trips=0, bound=1, Sow(kind='empty')))`` gave a count
  of shape ``()``). The oracle: each example run alone, its counts stacked.
  """

  @staticmethod
  def loop(x, n):
    def body(c):
      i, h = c
      sow({}, name='w')
      return i + 1, h * 2.0

    return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]

  def oracle(self, xs, ns):
    counts = []
    for x, n in zip(xs, ns):
      _, collected = capture(self.loop, max_steps=3)(x, n)
      steps, = collected['w']
      self.assertEqual(steps.values, {})
      counts.append(int(steps.count))
    return np.asarray(counts, np.int32)

  @parameterized.product(ns=[(0, 0), (2, 2), (1, 3)], jit=[False, True],
                         where=['inside', 'outside'])
  def test_one_count_per_example(self, ns, jit, where):
    xs = jnp.stack([X, -X])
    # Equal trip counts: the predicate is not batched; unequal: it is.
    n = ns[0] if ns[0] == ns[1] else jnp.asarray(ns)
    axes = (0, None) if ns[0] == ns[1] else (0, 0)
    if where == 'inside':
      run = capture(jax.vmap(self.loop, axes), max_steps=3)
    else:
      run = jax.vmap(capture(self.loop, max_steps=3), axes)
    if jit:
      run = jax.jit(run)
    _, collected = run(xs, n)
    steps, = collected['w']
    self.assertEqual(steps.values, {})
    np.testing.assert_array_equal(steps.count, self.oracle(xs, ns))

  def test_nested_vmaps(self):
    xs = jnp.stack([jnp.stack([X, -X])] * 4)
    run = capture(jax.vmap(jax.vmap(self.loop, (0, None)), (0, None)),
                  max_steps=3)
    _, collected = run(xs, 2)
    steps, = collected['w']
    np.testing.assert_array_equal(steps.count, np.full((4, 2), 2, np.int32))


if __name__ == '__main__':
  absltest.main()
