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
"""Tests of capture_compat.install/uninstall when threads overlap.

The interleavings are driven step by step with ``threading.Event``s (no
sleeps), so each test runs the same order on every run; a stress test then
runs many blocks and captures at once. Oracles: the state each block
documents, and values recomputed with NumPy from the model's parameters.
"""

import threading
import typing as tp

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import capture_compat
import sow_testing

# How long any step may wait for another thread: a wrong interleaving then
# fails the test instead of hanging it.
TIMEOUT = 60.0

X = np.array([0.5, -1.0], np.float32)


class Layer(nnx.Module):

  def __init__(self, din, dout, rngs):
    self.linear = nnx.Linear(din, dout, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    self.sow(nnx.Intermediate, 'h', y)
    return jnp.tanh(y)


class Model(nnx.Module):

  def __init__(self, rngs):
    self.first = Layer(2, 3, rngs)
    self.second = Layer(3, 2, rngs)

  def __call__(self, x):
    return self.second(self.first(x))


def by_hand(model, x):
  """Model's output and sown values, recomputed in NumPy: {path: value}."""
  values = {}
  for name in ('first', 'second'):
    linear = getattr(model, name).linear
    h = (np.asarray(x) @ np.asarray(linear.kernel[...])
         + np.asarray(linear.bias[...]))
    values[(name, 'h')] = h
    x = np.tanh(h)
  return x, values


# The static mark by which a module knows its path while a capture of it
# runs (flax.nnx.sow.lift.module_paths): an eager capture marks the caller's own
# modules, so other threads' captures may show theirs; it is no attribute
# of the model's and is gone once every capture has returned.
_MARK = '_pytree__sow_paths'


def attributes(model, modules=None) -> dict[tuple, dict[str, tp.Any]]:
  """Every module's own attributes, by module path, without capture marks.

  While other threads capture the model, pass ``modules`` (listed before
  they started): a walk of the model would be a Python loop over a module's
  attributes, which another thread adding or removing the mark of its first
  or last capture may change under it; ``dict(...)`` copies them at once.
  """
  if modules is None:
    modules = list(nnx.iter_modules(model))
  return {
      path: {k: v for k, v in dict(vars(m)).items() if k != _MARK}
      for path, m in modules
  }


def wait(event: threading.Event) -> None:
  if not event.wait(TIMEOUT):
    raise AssertionError('timed out: the other thread never got there')


def run_threads(*targets: tp.Callable[[], None]) -> None:
  """Runs each target in its own thread; re-raises the first error."""
  errors = []

  def guarded(target):
    try:
      target()
    except BaseException as e:  # pylint: disable=broad-except
      errors.append(e)

  threads = [
      threading.Thread(target=guarded, args=(target,), name=target.__name__)
      for target in targets
  ]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join(TIMEOUT)
  if errors:
    raise errors[0]
  alive = [t.name for t in threads if t.is_alive()]
  if alive:
    raise AssertionError(f'threads still running: {alive}')


class ThreadsTestCase(sow_testing.StateAssertions, absltest.TestCase):
  """Each test starts with the overlay off and leaves the process as it
  found it (also where the overlay was installed at import).

  Not with a ``with uninstall():`` block, as the other compat tests do: it
  would hold the overlay off for the main thread, so that no other thread
  could enter a ``with install():`` block.
  """

  def setUp(self):
    super().setUp()
    if capture_compat.is_installed():
      capture_compat.uninstall()
      self.addCleanup(capture_compat.install)
    self.model = Model(nnx.Rngs(0))

  def assertCaptured(self, result, model, x):
    """``result`` is ``capture(model, Intermediate)(x)``, recomputed."""
    out, state = result
    expected_out, expected = by_hand(model, x)
    self.assertTreeClose(out, expected_out)
    got = sow_testing.flat(state)
    self.assertEqual([(p, t) for p, t, _ in got],
                     [(p, nnx.Intermediate) for p in expected])
    for path, _, value in got:
      self.assertLen(value, 1)
      self.assertTreeClose(value[0], expected[path])


class OverlappingBlocksTest(ThreadsTestCase):

  def test_first_to_enter_exits_first(self):
    # The order that used to switch the overlay off under B's block (A's
    # exit restored A's "off"), then leave it on (B's restored B's "on").
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    results = {}

    def thread_a():
      with capture_compat.install():
        a_in.set()
        wait(b_in)
      a_out.set()

    def thread_b():
      wait(a_in)
      with capture_compat.install():
        b_in.set()
        wait(a_out)
        results['installed'] = capture_compat.is_installed()
        results['captured'] = nnx.capture(self.model, nnx.Intermediate)(X)

    before = attributes(self.model)
    run_threads(thread_a, thread_b)
    self.assertTrue(results['installed'])
    self.assertCaptured(results['captured'], self.model, X)
    self.assertEqual(attributes(self.model), before)
    self.assertFalse(capture_compat.is_installed())

  def test_last_to_enter_exits_first(self):
    a_in, b_in, b_out = threading.Event(), threading.Event(), threading.Event()
    results = {}

    def thread_a():
      with capture_compat.install():
        a_in.set()
        wait(b_out)
        results['installed'] = capture_compat.is_installed()
        results['captured'] = nnx.capture(self.model, nnx.Intermediate)(X)

    def thread_b():
      wait(a_in)
      with capture_compat.install():
        b_in.set()
      b_out.set()

    run_threads(thread_a, thread_b)
    self.assertTrue(results['installed'])
    self.assertCaptured(results['captured'], self.model, X)
    self.assertFalse(capture_compat.is_installed())

  def test_uninstall_blocks_overlap_alike(self):
    # The mirror: the overlay on, two overlapping `with uninstall()` blocks
    # hold it off until both exit; then it is on again.
    capture_compat.install()
    self.addCleanup(capture_compat.uninstall)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    results = {}

    def thread_a():
      with capture_compat.uninstall():
        a_in.set()
        wait(b_in)
      a_out.set()

    def thread_b():
      wait(a_in)
      with capture_compat.uninstall():
        b_in.set()
        wait(a_out)
        results['installed'] = capture_compat.is_installed()

    run_threads(thread_a, thread_b)
    self.assertFalse(results['installed'])
    self.assertTrue(capture_compat.is_installed())

  def test_nested_in_one_thread(self):
    with capture_compat.install():
      with capture_compat.install():
        self.assertTrue(capture_compat.is_installed())
      self.assertTrue(capture_compat.is_installed())
      with capture_compat.uninstall():  # the innermost block holds
        self.assertFalse(capture_compat.is_installed())
        with capture_compat.install():
          self.assertCaptured(
              nnx.capture(self.model, nnx.Intermediate)(X), self.model, X)
        self.assertFalse(capture_compat.is_installed())
      self.assertTrue(capture_compat.is_installed())
    self.assertFalse(capture_compat.is_installed())

  def test_blocks_nest_in_each_thread(self):
    # A's blocks nest inside B's and B's inside A's.
    a_outer, b_outer, a_inner_out = (threading.Event() for _ in range(3))
    b_inner_out, a_done = threading.Event(), threading.Event()
    seen = []

    def thread_a():
      with capture_compat.install():
        a_outer.set()
        wait(b_outer)
        with capture_compat.install():
          pass
        a_inner_out.set()
        wait(b_inner_out)
        seen.append(capture_compat.is_installed())
      a_done.set()

    def thread_b():
      with capture_compat.install():
        wait(a_outer)
        b_outer.set()
        wait(a_inner_out)
        with capture_compat.install():
          seen.append(capture_compat.is_installed())
        b_inner_out.set()
        wait(a_done)
        seen.append(capture_compat.is_installed())

    run_threads(thread_a, thread_b)
    self.assertEqual(seen, [True, True, True])
    self.assertFalse(capture_compat.is_installed())


class ConflictTest(ThreadsTestCase):
  """A request that would switch the overlay under another thread's block
  raises, naming that thread, and changes nothing."""

  def hold(self, block: tp.Callable[[], tp.Any], name: str):
    """Runs ``with block():`` in a thread until the returned release()."""
    entered, release = threading.Event(), threading.Event()
    errors = []

    def holder():
      try:
        with block():
          entered.set()
          wait(release)
      except BaseException as e:  # pylint: disable=broad-except
        errors.append(e)
        entered.set()

    thread = threading.Thread(target=holder, name=name)
    thread.start()
    wait(entered)

    def done():
      release.set()
      thread.join(TIMEOUT)
      self.assertFalse(thread.is_alive())
      self.assertEmpty(errors)

    return done

  def test_uninstall_under_another_threads_install_block(self):
    release = self.hold(capture_compat.install, 'holder')
    try:
      message = (r"capture_compat\.uninstall\(\): thread 'holder' is inside"
                 r' a `with capture_compat\.install\(\):` block')
      with self.assertRaisesRegex(RuntimeError, message):
        with capture_compat.uninstall():
          self.fail('the block ran')
      with self.assertRaisesRegex(RuntimeError, message):
        capture_compat.uninstall()
      self.assertTrue(capture_compat.is_installed())
      self.assertCaptured(
          nnx.capture(self.model, nnx.Intermediate)(X), self.model, X)
    finally:
      release()
    self.assertFalse(capture_compat.is_installed())

  def test_install_under_another_threads_uninstall_block(self):
    capture_compat.install()
    self.addCleanup(capture_compat.uninstall)
    release = self.hold(capture_compat.uninstall, 'holder')
    try:
      message = (r"capture_compat\.install\(\): thread 'holder' is inside"
                 r' a `with capture_compat\.uninstall\(\):` block')
      with self.assertRaisesRegex(RuntimeError, message):
        with capture_compat.install():
          self.fail('the block ran')
      with self.assertRaisesRegex(RuntimeError, message):
        capture_compat.install()
      self.assertFalse(capture_compat.is_installed())
    finally:
      release()
    self.assertTrue(capture_compat.is_installed())

  def test_plain_install_outlasts_the_blocks(self):
    # Agreeing with the running block, a plain install() sets the state
    # for after it: the overlay stays on until uninstall().
    release = self.hold(capture_compat.install, 'holder')
    try:
      capture_compat.install()
    finally:
      release()
    self.assertTrue(capture_compat.is_installed())
    capture_compat.uninstall()
    self.assertFalse(capture_compat.is_installed())


class StressTest(ThreadsTestCase):

  def test_blocks_and_captures_in_many_threads(self):
    n_threads, n_calls = 8, 200
    model = self.model
    modules = list(nnx.iter_modules(model))
    before = attributes(model, modules)
    params = [np.array(v.get_value())
              for _, v in nnx.to_flat_state(nnx.state(model))]

    def forward(model, x):
      return model(x)

    def call(i, x):
      """One capture, in the form i selects."""
      form = i % 4
      if form == 0:
        return nnx.capture(model, nnx.Intermediate)(x)
      if form == 1:
        return nnx.capture(nnx.Intermediate)(forward)(model, x)
      if form == 2:
        return nnx.capture(model.__call__, nnx.Intermediate)(x)
      with capture_compat.install():  # nested in the thread's block
        return nnx.capture(forward, nnx.Intermediate)(model, x)

    def worker(t):
      rng = np.random.default_rng(t)
      for i in range(n_calls):
        x = rng.uniform(-1.0, 1.0, size=2).astype(np.float32)
        with capture_compat.install():
          if i % 5 == 0:
            capture_compat.install()  # plain, inside: lasts the block
          self.assertTrue(capture_compat.is_installed())
          result = call(i, x)
        self.assertCaptured(result, model, x)
        self.assertFalse(hasattr(model, 'h'))
        self.assertEqual(attributes(model, modules), before,
                         f'thread {t} call {i}')

    targets = []
    for t in range(n_threads):
      target = lambda t=t: worker(t)
      target.__name__ = f'worker-{t}'
      targets.append(target)
    run_threads(*targets)
    self.assertFalse(capture_compat.is_installed())
    self.assertEqual(attributes(model), before)
    self.assertFalse(
        any(_MARK in vars(m) for _, m in nnx.iter_modules(model)))
    after = [v.get_value() for _, v in nnx.to_flat_state(nnx.state(model))]
    self.assertTreeEqual(after, params)


if __name__ == '__main__':
  absltest.main()
