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
"""Float comparisons of *different* programs, with tolerances any CPU meets.

(Also :func:`count_compiles`, for tests that pin how often JAX compiles, and
:class:`StateAssertions`, the comparisons of pytrees and NNX States the
compat tests share.)

The suite compares floats in two ways, and each assertion says which:

* **Bitwise** (``np.testing.assert_array_equal``), where both sides run the
  same floating-point operations in the same order: the legacy and the new
  ``nnx.capture`` running one model, ``capture(f)`` against ``f`` (a sow adds
  no operation), or an oracle made only of correctly rounded IEEE operations
  that the program performs one by one (``x * 2``, ``x + 1``, ``-x``), whose
  results are the same on every CPU.
* **Within rounding** (``assert_close`` below), where the two sides are
  different programs for the same maths: a NumPy or hand-stepped oracle
  against a compiled JAX program, an eager op-by-op evaluation against a
  fused one, gradients of an unrolled program against a scanned one. XLA's
  CPU code differs between CPUs and flags (AVX2 or AVX-512 vector widths,
  FMA contraction, how a dot's reduction is tiled, ``OPENBLAS_CORETYPE`` for
  NumPy's matmul), so these agree to float rounding only, on no machine
  bitwise by design.

How far different programs may drift is bounded relative to the magnitude
of the values, not to each element: reassociating a sum of ``n`` terms moves
it by up to about ``n * eps * sum|terms|`` (Higham, *Accuracy and Stability
of Numerical Algorithms*, section 4.2), so an element that is a small
difference of large terms (a near-zero output of a dot product or an LSTM
gate) carries an absolute error set by the terms, which an element-wise
relative tolerance cannot hold. Hence::

  max |actual - expected| <= ulps * eps * max(|expected|, |actual|)

with ``eps`` the machine epsilon of the less precise of the two dtypes, and
the maximum over the whole array. ``DEFAULT_ULPS = 64`` covers the programs
of this suite: reductions of at most a few dozen terms chained through a few
layers, and transcendental functions (``tanh``, ``exp``, ``sin``) whose XLA
and NumPy implementations differ by a few ulps; for float32 it is 7.6e-6 of
the largest magnitude, far below what any bug in the transform produces (a
value from the wrong site, step or member differs at order 1).
"""

from __future__ import annotations

import contextlib
import gc
import threading

import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow.transform.primitive import sow

DEFAULT_ULPS = 64


def eps_of(*arrays) -> float:
  """Machine epsilon of the least precise floating dtype among ``arrays``."""
  floats = [a.dtype for a in arrays if np.issubdtype(a.dtype, np.inexact)]
  if not floats:
    return 0.0
  return max(float(np.finfo(d).eps) for d in floats)


def assert_close(actual, expected, *, ulps: float = DEFAULT_ULPS,
                 err_msg: str = '') -> None:
  """Asserts equal shapes and values equal to ``ulps`` of their magnitude.

  Integer and boolean arrays are compared exactly.

  Args:
    actual: the value the code under test produced (array-like).
    expected: the independently computed value (array-like).
    ulps: how many units in the last place of the largest magnitude the two
      may differ by; see the module docstring for why 64 by default.
    err_msg: added to the failure message.
  """
  actual, expected = np.asarray(actual), np.asarray(expected)
  eps = eps_of(actual, expected)
  if not eps:
    np.testing.assert_array_equal(actual, expected, err_msg=err_msg)
    return
  np.testing.assert_equal(actual.shape, expected.shape, err_msg=err_msg)
  scale = max(np.max(np.abs(expected), initial=0.0),
              np.max(np.abs(actual), initial=0.0))
  np.testing.assert_allclose(
      actual, expected, rtol=0.0, atol=ulps * eps * float(scale),
      err_msg=(f'{err_msg} (tolerance: {ulps} ulps of the largest magnitude,'
               f' {scale:.3g})'))


# jax.monitoring's event for each XLA compilation (jax._src.dispatch).
_BACKEND_COMPILE_EVENT = '/jax/core/compile/backend_compile_duration'


@contextlib.contextmanager
def count_compiles():
  """Yields a list that gets an entry for each XLA compilation meanwhile."""
  compiles = []

  def listener(event, duration_secs, **kwargs):
    del duration_secs, kwargs
    if event == _BACKEND_COMPILE_EVENT:
      compiles.append(event)

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    yield compiles
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)


def flat(state) -> list[tuple[tuple, type, object]]:
  """A State as a list of (path, Variable type, value)."""
  return [
      (tuple(path), type(var), var.get_value())
      for path, var in nnx.to_flat_state(state)
  ]


def state_leaves(node) -> list[tuple[tuple, np.ndarray]]:
  """Every Variable value (and raw array leaf) of ``node`` as NumPy, keys as
  raw data."""
  out = []
  for path, var in nnx.to_flat_state(nnx.state(node)):
    if isinstance(var, nnx.Variable):
      var = var.get_value()
    for value in jax.tree.leaves(var):
      if jax.numpy.issubdtype(value.dtype, jax.dtypes.prng_key):
        value = jax.random.key_data(value)
      out.append((path, np.asarray(value)))
  return out


class StateAssertions:
  """Comparisons of pytrees and States, for ``absltest.TestCase`` classes."""

  def _assertTrees(self, compare, actual, expected, err_msg=''):
    actual_leaves, actual_tree = jax.tree.flatten(actual)
    expected_leaves, expected_tree = jax.tree.flatten(expected)
    self.assertEqual(actual_tree, expected_tree, err_msg)
    for a, e in zip(actual_leaves, expected_leaves):
      compare(a, e, err_msg=err_msg)

  def assertTreeEqual(self, actual, expected, err_msg=''):
    """Bitwise: both sides run the same operations (legacy and new)."""
    self._assertTrees(np.testing.assert_array_equal, actual, expected,
                      err_msg)

  def assertTreeClose(self, actual, expected, err_msg=''):
    """To float rounding: ``expected`` is another program."""
    self._assertTrees(assert_close, actual, expected, err_msg)

  def assertSameState(self, actual, expected):
    """The same Variable values (and raw array leaves), bitwise, at the
    same paths: a model after a capture against its twin after a direct
    call."""
    actual, expected = state_leaves(actual), state_leaves(expected)
    self.assertEqual([p for p, _ in actual], [p for p, _ in expected])
    for (path, a), (_, e) in zip(actual, expected):
      np.testing.assert_array_equal(a, e, err_msg=str(path))

  def assertStatesEqual(self, actual, expected):
    """Same paths, Variable types and, bitwise, values."""
    actual, expected = flat(actual), flat(expected)
    self.assertEqual(
        [(p, t) for p, t, _ in actual], [(p, t) for p, t, _ in expected]
    )
    for (path, _, a), (_, _, e) in zip(actual, expected):
      self.assertTreeEqual(a, e, str(path))


# A program whose memory the tests watch: its arrays have a shape of their own.
SHAPE = (3, 5, 11)  # no other test makes arrays of this shape
CHAIN = 12  # intermediates between two observations


class LiveArrays:
  """Counts, at each call, the live arrays of ``SHAPE``."""

  def __init__(self):
    self.counts: list[int] = []

  def __call__(self, _):
    gc.collect()  # a value only a reference cycle holds is not live
    self.counts.append(
        sum(1 for a in jax.live_arrays() if a.shape == SHAPE)
    )


def run_in_threads(work, n_threads: int) -> list[tuple[int, Exception]]:
  """Runs ``work(t)`` in ``n_threads`` threads at once; returns the
  ``(t, exception)`` of those that raised."""
  failures = []

  def run(t):
    try:
      work(t)
    except Exception as e:  # pylint: disable=broad-except
      failures.append((t, e))

  threads = [threading.Thread(target=run, args=(t,))
             for t in range(n_threads)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  return failures


def chain(x, observe):
  """``CHAIN`` elementwise steps, a sow, ``CHAIN`` more; observed twice.

  The sown values are scalars, so they are not counted: a capture must keep
  them, and they are all it may keep beyond what ``f`` keeps.
  """
  for _ in range(CHAIN):
    x = jnp.sin(x) + 1.0
  jax.debug.callback(observe, x)
  sow(jnp.sum(x), name='middle')
  for _ in range(CHAIN):
    x = jnp.cos(x) * 0.5
  jax.debug.callback(observe, x)
  sow(jnp.sum(x), name='end')
  return x
