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
"""The caches behind ``capture``: what keys them, what bounds them, and when
they hit.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import sow
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import rewrite
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.rules import custom_derivatives
from flax.nnx.sow.transform.rules import loops
from flax.nnx.sow.transform.selection import Selection


X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


def _info(cached):
  info = cached.cache_info()
  return info.hits, info.misses, info.currsize


class CacheKeyAndBoundTest(parameterized.TestCase):
  """The caches keyed by jaxprs: a hit, a miss, and no unbounded growth."""

  def test_every_weakref_cache_is_bounded(self):
    for cached in (interpreter.cached_plan, rewrite.reemittable,
                   interpreter.rewritten_call, interpreter.transform,
                   loops._scan_body, loops._while_jaxprs, primitive.sow_keys):
      with self.subTest(str(cached)):
        self.assertIsNotNone(cached.cache_info().maxsize)

  def test_sow_keys(self):
    jaxpr = jax.make_jaxpr(
        lambda x: jax.jit(lambda y: sow(y, name='a', tag='t'))(x)
        + sow(x, name='b')
    )(X).jaxpr
    hits, misses, _ = _info(primitive.sow_keys)
    self.assertEqual(primitive.sow_keys(jaxpr), {('a', 't'), ('b', None)})
    # The outer jaxpr and the jit body: two misses; then a hit.
    self.assertEqual(_info(primitive.sow_keys)[1], misses + 2)
    primitive.sow_keys(jaxpr)
    self.assertEqual(_info(primitive.sow_keys)[:2], (hits + 1, misses + 2))

  def test_plan_rewrite_and_reemittable_hit_and_miss(self):
    closed = jax.make_jaxpr(lambda x: jnp.sin(sow(x * 2, name='h')))(X)
    request = Request(Selection())
    other = Request(Selection(names=frozenset(['other'])))
    for cached, call, call_other in (
        (interpreter.cached_plan,
         lambda: interpreter.cached_plan(closed.jaxpr, request, True),
         lambda: interpreter.cached_plan(closed.jaxpr, other, True)),
        (interpreter.rewritten_call,
         lambda: interpreter.rewritten_call(closed.jaxpr, request, True),
         lambda: interpreter.rewritten_call(closed.jaxpr, request, False)),
        (rewrite.reemittable,
         lambda: rewrite.reemittable(closed.jaxpr),
         lambda: rewrite.reemittable(
             jax.make_jaxpr(lambda x: x * 2)(X).jaxpr)),
    ):
      with self.subTest(str(cached)):
        first = call()
        hits, misses, _ = _info(cached)
        self.assertIs(call(), first)
        self.assertEqual(_info(cached)[:2], (hits + 1, misses))
        call_other()
        self.assertEqual(_info(cached)[1], misses + 1)

  def test_is_array_keeps_a_bounded_table_of_types(self):
    saved = dict(primitive._IS_ARRAY)
    try:
      primitive._IS_ARRAY.clear()
      self.assertTrue(primitive.is_array(np.float32(1)))  # a miss: added
      self.assertIn(np.float32, primitive._IS_ARRAY)
      self.assertTrue(primitive.is_array(np.float32(2)))  # a hit
      for i in range(2 * primitive._MAX_TYPES):
        fresh = type(f'Fresh{i}', (), {})
        self.assertFalse(primitive.is_array(fresh()))
      self.assertLen(primitive._IS_ARRAY, primitive._MAX_TYPES)
      self.assertTrue(primitive.is_array(jnp.ones(1)))  # still answers
    finally:
      primitive._IS_ARRAY.clear()
      primitive._IS_ARRAY.update(saved)

  def test_custom_rule_thunks_are_memoized_and_bounded(self):
    calls = []

    def body(*flags):
      calls.append(flags)
      return object()

    memoized = custom_derivatives._memoize(body)
    first = memoized(True, False)
    self.assertIs(memoized(True, False), first)  # a hit
    self.assertIsNot(memoized(False, False), first)  # a miss
    self.assertEqual(calls, [(True, False), (False, False)])
    for i in range(3 * custom_derivatives._MEMO_SIZE):
      memoized(i)
    self.assertLessEqual(memoized.cache_info().currsize, custom_derivatives._MEMO_SIZE)


if __name__ == '__main__':
  absltest.main()
