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
"""Checks made when a program runs reach the caller as the package's errors.

A ``while_loop`` that runs more steps than ``capture(f, max_steps=N)`` keeps,
or than a ``plant`` holds values for, is found when the program runs. Under
``jax.jit`` the check is a host callback; the caller must get the check's
``ValueError``, whose first line names the site and the bound, and not the
runtime's ``JaxRuntimeError`` (``INTERNAL: CpuCallback error ...``). The
family: eager, jitted (first and later calls), nested jits, a value consumed
inside the jit, ``vmap`` inside and outside ``jit``, ``nnx.jit``, loops of
traced ``fori_loop`` bounds, and threads running one program at once.
"""

import concurrent.futures
import logging
import re

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
from flax.nnx.sow.transform import runtime_checks

X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


def decode(x, n):
  """``n`` steps of a while_loop (``n`` may be traced), each state sown."""

  def body(c):
    i, h = c
    return i + 1, sow(jnp.tanh(h * 1.5 + i), name='h')

  return lax.while_loop(lambda c: c[0] < n, body, (0, x))[1]


def fori_decode(x, n):
  """The same steps as a fori_loop: with a traced ``n``, a while_loop."""
  return lax.fori_loop(
      0, n, lambda i, h: sow(jnp.tanh(h * 1.5 + i), name='h'), x)


OVERFLOW = (
    "capture: a while_loop (at {at}) ran 5 steps, more than the 3 kept of"
    " 'h' (max_steps). Raise max_steps, or pass on_overflow='truncate' to"
    ' keep the first steps (Steps.count says how many ran).'
)
TOO_SHORT = (
    "plant: a while_loop (at {at}) ran 5 steps, but the values planted into"
    " 'h' hold 3: plant a value for every step."
)


def captured(loop):
  return capture(loop, max_steps=3)


def planted(loop):
  return plant(loop, {'h': (jnp.zeros((3, 3), jnp.float32),)})


# Each way of running the program: (x, n) -> the result, ready.
RUNS = {
    'eager': lambda g: g,
    'jit': jax.jit,
    'jit_called_twice': lambda g: _twice(jax.jit(g)),
    'jit_in_jit': lambda g: jax.jit(lambda x, n: jax.jit(g)(x, n)),
    'consumed_inside_jit': lambda g: jax.jit(
        lambda x, n: jax.tree.map(jnp.sum, g(x, n))),
    'vmap': lambda g: lambda x, n: jax.vmap(g, (0, None))(
        jnp.stack([x, -x]), n),
    'jit_of_vmap': lambda g: lambda x, n: jax.jit(jax.vmap(g, (0, None)))(
        jnp.stack([x, -x]), n),
    'nnx_jit': nnx.jit,
}


# A fori_loop's trip count is checked at run time only when traced: eagerly
# it has static bounds, and is a scan of that length.
CASES = [(run, 'decode') for run in sorted(RUNS)] + [
    (run, 'fori_decode') for run in sorted(RUNS) if run not in ('eager', 'vmap')
]


def _twice(jitted):
  def run(x, n):
    # The first call compiles the program; the second is where a compiled
    # fast path would raise the runtime's error.
    try:
      jitted(x, n)
    except ValueError:
      pass
    return jitted(x, n)

  return run


def _first_line(template, loop):
  """A pattern of the whole first line, at any line of ``loop``'s file."""
  at = f'{re.escape(__file__)}:\\d+ \\({loop.__name__}\\)'
  return '^' + re.escape(template).replace(re.escape('{at}'), at) + '$'


class RuntimeChecksTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    # JAX logs a failed callback with its traceback before it raises.
    logger = logging.getLogger('jax._src.debugging')
    self.enter_context(absltest.mock.patch.object(logger, 'disabled', True))

  def assert_error(self, expected, run, loop):
    with self.assertRaises(ValueError) as raised:
      jax.block_until_ready(run(X, 5))
    self.assertNotIsInstance(raised.exception, jax.errors.JaxRuntimeError)
    first = str(raised.exception).splitlines()[0]
    self.assertRegex(first, _first_line(expected, loop))

  @parameterized.parameters(*CASES)
  def test_overflow_of_max_steps(self, run, loop):
    loop = globals()[loop]
    self.assert_error(OVERFLOW, RUNS[run](captured(loop)), loop)

  @parameterized.parameters(*CASES)
  def test_a_plant_shorter_than_the_loop(self, run, loop):
    loop = globals()[loop]
    self.assert_error(TOO_SHORT, RUNS[run](planted(loop)), loop)

  @parameterized.parameters('jit', 'jit_called_twice', 'nnx_jit')
  def test_within_the_bound_the_values_are_the_loops(self, run):
    # The oracle: the steps in Python.
    h, states = X, []
    for i in range(3):
      h = jnp.tanh(h * 1.5 + i)
      states.append(h)
    out, collected = RUNS[run](captured(decode))(X, 3)
    steps, = collected['h']
    np.testing.assert_allclose(out, h, rtol=1e-6)
    np.testing.assert_allclose(steps.values, np.stack(states), rtol=1e-6)
    self.assertEqual(int(steps.count), 3)
    # A plant that holds the steps runs them.
    values = jnp.stack(states) * 0.0 + 0.25
    np.testing.assert_array_equal(
        RUNS[run](plant(decode, {'h': (values,)}))(X, 3), values[2])

  def test_threads_each_get_their_own_error(self):
    run = jax.jit(captured(decode))
    counts = [2, 5, 3, 6, 1, 5, 4, 7] * 2

    def call(n):
      try:
        jax.block_until_ready(run(X, n))
      except ValueError as error:
        return str(error).splitlines()[0]
      return None

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
      firsts = list(pool.map(call, counts))
    for n, first in zip(counts, firsts):
      if n <= 3:
        self.assertIsNone(first)
      else:
        self.assertIn(f'ran {n} steps, more than the 3 kept of', first)

  def test_failures_not_raised_through_jit_are_not_kept_forever(self):
    run = jax.vmap(captured(decode), (0, None))
    for _ in range(runtime_checks._KEPT + 10):
      with self.assertRaises(ValueError):
        run(jnp.stack([X, X]), 5)
    self.assertLessEqual(len(runtime_checks._failures), runtime_checks._KEPT)

  def test_ahead_of_time_compiled_raises_the_runtimes_error(self):
    # Documented: what does not run through jax.jit's dispatch is not
    # translated; the runtime's text still ends with the check's message.
    compiled = jax.jit(captured(decode)).lower(X, 5).compile()
    with self.assertRaises(jax.errors.JaxRuntimeError) as raised:
      jax.block_until_ready(compiled(X, 5))
    self.assertIn('ran 5 steps, more than the 3 kept of', str(raised.exception))

  def test_only_a_program_with_a_check_loses_its_fast_path(self):
    # A jit's cache miss goes through the funnel's dispatch; a fast path,
    # once recorded, does not. JAX records none for a program with effects,
    # as one holding a check is: what `set_jit_errors` relies on (the JAX
    # contract of the translation: a JAX that records one fails here).
    misses = []
    dispatched = runtime_checks._jax._dispatched

    def counting(p, *rest):
      if p.params['name'] in ('checked', 'unchecked'):
        misses.append(p.params['name'])
      return dispatched(p, *rest)

    def unchecked(x):
      return capture(fori_decode)(x, 3)  # a scan: nothing to check

    def checked(x):
      return captured(decode)(x, 3)

    with absltest.mock.patch.object(
        runtime_checks._jax, '_dispatched', counting):
      for f in (unchecked, checked):
        run = jax.jit(f)
        for _ in range(4):
          jax.block_until_ready(run(X))
    self.assertEqual(misses, ['unchecked'] + ['checked'] * 4)


if __name__ == '__main__':
  absltest.main()
