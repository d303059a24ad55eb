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
"""Jits called inside an eager capture: JAX's compiled path, never for a sow.

An eager capture runs a ``jax.jit`` whose program holds no sow as at the top
level, so that JAX records its compiled fast path and later calls never
reach Python (``transform/eager.py``, ``_jax.set_jit_dispatch``);
a ``jit`` whose program holds a sow at any depth is bound on every call and
reaches its rule. Python dispatches are counted as calls of JAX's
``pjit._infer_params``, which only the Python path makes (the contract of the
funnel's name). Every case runs both ways: with the fast path, and as on a
JAX without the function the funnel relies on (the fallback).
"""

import contextlib
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
# The contract of the funnel's private name, and the count of dispatches.
from jax._src import pjit  # pylint: disable=g-bad-import-order
from jax._src.interpreters import pxla  # pylint: disable=g-bad-import-order
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import capture
from flax.nnx.sow import perturb
from flax.nnx.sow import plant
from flax.nnx.sow import sow
from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import inner_calls


X = jnp.array([0.5, -1.0, 2.0], jnp.float32)


@contextlib.contextmanager
def python_dispatches():
  """Counts the calls of ``jax.jit`` functions that take JAX's Python path."""
  calls = []
  original = pjit._infer_params

  def counted(*args, **kwargs):
    calls.append(getattr(args[0], '__name__', args[0]))
    return original(*args, **kwargs)

  with mock.patch.object(pjit, '_infer_params', counted):
    yield calls


@contextlib.contextmanager
def fast_path(enabled: bool):
  """As here (``True``), or as on a JAX without the funnel's function."""
  if enabled:
    yield
    return
  with mock.patch.object(pjit, '_run_python_pjit', _jax._RUN_PYTHON_JIT):
    assert not _jax.jit_dispatch_is_set()
    yield


# Jitted functions holding a sow at some depth, each with the values it sows
# computed directly: name -> (jitted function, oracle of the sown value).
def _sowing_jits():
  def body(c, x):
    return c + sow(jnp.sin(x), name='h'), c

  @jax.custom_jvp
  def smooth(x):
    return sow(jnp.tanh(x), name='h')

  smooth.defjvp(lambda p, t: (smooth(*p), t[0]))

  def cotangent(x):
    return jax.grad(lambda y: jnp.sum(perturb(y * 2, name='h') ** 2))(x)

  return {
      'direct': (lambda x: sow(jnp.sin(x), name='h') * 2,
                 [jnp.sin(X)]),
      'scan': (lambda x: lax.scan(body, 0.0, x)[0],
               [jnp.sin(X)]),
      'cond': (lambda x: lax.cond(x[0] > 0, lambda y: sow(y + 1, name='h'),
                                  lambda y: sow(y - 1, name='h'), x),
               [X + 1]),
      'while': (lambda x: lax.while_loop(
          lambda c: c[1] < 2,
          lambda c: (sow(c[0] * 2, name='h', mode='clobber'), c[1] + 1),
          (sow(x, name='h', mode='clobber'), 0))[0],
                [X * 4]),
      'custom_jvp': (smooth, [jnp.tanh(X)]),
      'nested_jit': (jax.jit(lambda x: sow(jnp.cos(x), name='h')),
                     [jnp.cos(X)]),
      'remat': (jax.checkpoint(lambda x: sow(jnp.exp(x), name='h')),
                [jnp.exp(X)]),
      'grad': (cotangent, [2 * (X * 2)]),
  }


def _assert_collected(test, collected, expected):
  values = collected['h']
  values = [values] if isinstance(values, jax.Array) else list(values)
  test.assertLen(values, len(expected))
  for value, want in zip(values, expected):
    np.testing.assert_allclose(value, want, rtol=1e-6)


class EagerDispatchTest(parameterized.TestCase):

  def test_this_jax_has_the_function_the_funnel_relies_on(self):
    # The contract: if JAX renames or changes it, this fails (and eager
    # captures stay correct, only slower: see `fast_path(False)`).
    self.assertTrue(_jax.jit_dispatch_is_set())
    self.assertTrue(_jax._can_set_jit_dispatch())
    # Its result: 8 values, the compiled executable at `_jax._EXECUTABLE`,
    # whose absence makes the cache miss record no fast path.
    results = []

    def recorded(*args):
      results.append(_jax._RUN_PYTHON_JIT(*args))
      return results[-1]

    g = jax.jit(lambda x: x + 1)
    with mock.patch.object(pjit, '_run_python_pjit', recorded):
      g(X)
      with python_dispatches() as calls:
        g(X)
    # The last to return is g's own (jnp's add was traced inside it).
    self.assertLen(results[-1], 8)
    self.assertIsInstance(results[-1][_jax._EXECUTABLE],
                          pxla.MeshExecutable)
    self.assertEqual(calls, [])  # its fast path was recorded

  @parameterized.parameters(True, False)
  def test_a_jit_without_sows_dispatches_in_python_only_once(self, enabled):
    g = jax.jit(lambda x: jnp.cos(x) * 3)
    f = capture(lambda x: sow(g(x), name='out'))
    with fast_path(enabled):
      f(X)  # the first call traces and compiles
      with python_dispatches() as calls:
        for _ in range(5):
          out, collected = f(X)
    np.testing.assert_array_equal(out, jnp.cos(X) * 3)
    np.testing.assert_array_equal(collected['out'][0], jnp.cos(X) * 3)
    self.assertLen(calls, 0 if enabled else 5)

  @parameterized.parameters(True, False)
  def test_jax_numpy_functions_take_the_compiled_path(self, enabled):
    # jax.numpy's own functions are jits (jnp.where, nnx.relu, einsum...):
    # with the fast path, none reaches Python after its first call.
    def f(x, w):
      h = jnp.einsum('i,ij->j', x, w)
      h = sow(nnx.relu(h) + jnp.where(h > 0, h, 0.1 * h), name='a')
      h = jnp.clip(jnp.tanh(h) * jnp.sin(h), -0.5, 0.5)
      return sow(jnp.sum(h ** 2), name='b')

    w = jnp.arange(9.0).reshape(3, 3) / 9
    captured = capture(f)
    with fast_path(enabled):
      captured(X, w)
      with python_dispatches() as calls:
        out, collected = captured(X, w)
    np.testing.assert_array_equal(out, f(X, w))
    h = jnp.einsum('i,ij->j', X, w)
    np.testing.assert_array_equal(
        collected['a'][0], nnx.relu(h) + jnp.where(h > 0, h, 0.1 * h))
    if enabled:
      self.assertEqual(calls, [])
    # (Without it, they dispatch in Python unless a fast path was recorded
    # earlier in the process: the count depends on the tests before.)

  @parameterized.product(
      case=sorted(_sowing_jits()), enabled=(True, False))
  def test_a_jit_holding_a_sow_never_takes_the_fast_path(self, case,
                                                         enabled):
    fn, expected = _sowing_jits()[case]
    g = jax.jit(fn)
    with fast_path(enabled):
      # Compiled and run at the top level first (its own fast path there),
      # then inside captures selecting something else, which hand it on.
      np.testing.assert_allclose(g(X), fn(X), rtol=1e-6)
      g(X)
      other = capture(lambda x: g(sow(x, name='x')), names='x')
      for _ in range(2):
        _, collected = other(X)
        self.assertEqual(list(collected), ['x'])
      captured = capture(g)
      with python_dispatches() as calls:
        for _ in range(3):
          out, collected = captured(X)
          np.testing.assert_allclose(out, fn(X), rtol=1e-6)
          _assert_collected(self, collected, expected)
      # A capture of a function calling it: bound on each call.
      calling = capture(lambda x: g(x) + 1)
      for _ in range(3):
        _, collected = calling(X)
        _assert_collected(self, collected, expected)
    del calls  # a captured jax.jit function runs as a compiled capture

  @parameterized.parameters(True, False)
  def test_a_jit_called_inside_is_bound_on_every_call(self, enabled):
    g = jax.jit(lambda x: sow(jnp.sin(x), name='h') * 2)
    f = capture(lambda x: g(x) + 1)
    with fast_path(enabled):
      f(X)
      with python_dispatches() as calls:
        for _ in range(4):
          _, collected = f(X)
          np.testing.assert_array_equal(collected['h'][0], jnp.sin(X))
    self.assertLen(calls, 4)

  @parameterized.parameters(True, False)
  def test_nested_captures_and_plants(self, enabled):
    g = jax.jit(lambda x: sow(x * 2, name='inner') + 1)
    free = jax.jit(lambda x: x - 1)

    def f(x):
      return sow(free(g(x)), name='outer')

    with fast_path(enabled):
      for k in (1.0, 2.0, 3.0):
        planted = plant(f, {'inner': (X * k,)})
        with self.assertWarns(inner_calls.TakenByInnerCall):
          (out, inner), outer = capture(capture(planted, names='outer'))(X)
        np.testing.assert_array_equal(out, X * k)
        np.testing.assert_array_equal(inner['outer'][0], X * k)
        self.assertEqual(list(outer), [])  # the plant consumed 'inner'
      with self.assertWarns(inner_calls.TakenByInnerCall):
        (_, inner), outer = capture(capture(f, names='outer'))(X)
      np.testing.assert_array_equal(inner['outer'][0], X * 2)
      np.testing.assert_array_equal(outer['inner'][0], X * 2)

  @parameterized.parameters(True, False)
  def test_a_jit_called_by_a_plant_function_records_no_fast_path(self,
                                                                 sows):
    # A plant's function runs at the top level while the capture runs: a
    # fast path recorded there would be taken by later eager captures and
    # plants (found by the program fuzzer: a planted value read only by
    # such a jit counted as unread).
    g = jax.jit(lambda x: sow(x * 2, name='g') if sows else x * 2)
    f = lambda x: sow(jnp.sin(x), name='h') + 1
    planted = plant(f, {'h': lambda v, i: g(v)})
    for _ in range(2):
      np.testing.assert_array_equal(planted(X), jnp.sin(X) * 2 + 1)
    for _ in range(2):
      _, collected = capture(lambda x: g(x) + 1)(X)
      if sows:
        np.testing.assert_array_equal(collected['g'][0], X * 2)
      else:
        self.assertEqual(collected, {})
    # A value planted by hand, read only by the jit: seen to be read.
    read_by_g = lambda x: g(sow(x + 1, name='h'))
    for _ in range(2):
      np.testing.assert_array_equal(
          plant(read_by_g, {'h': (jnp.ones(3, X.dtype),)})(X), jnp.full(3, 2.0, X.dtype))

  def test_without_the_dispatch_an_eager_plant_is_staged(self):
    # It could not tell which planted values a jit on a fast path reads.
    def f(x):
      h = sow(x * 2, name='h')
      if isinstance(h, jax.core.Tracer):
        return h + 100  # staged
      return h + 1

    for enabled, added in ((True, 1), (False, 100)):
      with fast_path(enabled):
        np.testing.assert_array_equal(
            plant(f, {'h': (jnp.zeros(3, X.dtype),)})(X), jnp.full(3, added))

  def test_the_top_level_fast_path_of_a_sowing_jit_is_not_taken(self):
    # Outside a capture a sow is an identity and the compiled program runs
    # unseen; inside one, that program must not be reused.
    g = jax.jit(lambda x: sow(jnp.sin(x), name='h'))
    for _ in range(3):
      g(X)
    for _ in range(3):
      _, collected = capture(lambda x: g(x) * 1)(X)
      np.testing.assert_array_equal(collected['h'][0], jnp.sin(X))


if __name__ == '__main__':
  absltest.main()
