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
"""What ``capture`` keeps alive: an eager capture frees the intermediates of
``f`` as ``f`` itself does, and drops the values a clobber supersedes.
"""


from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture, sow
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform import selection
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.scope import Scope

from sow_testing import CHAIN, SHAPE, LiveArrays, chain  # pylint: disable=g-multiple-import


def in_custom_jvp(f):
  """``f`` under a ``custom_jvp`` (its body evaluated in place)."""
  wrapped = jax.custom_jvp(f)
  wrapped.defjvp(lambda primals, tangents: (wrapped(*primals), tangents[0]))
  return wrapped


def clobbers(x, observe):
  """``CHAIN`` steps, each value sown with ``mode='clobber'``; observed once.

  Only the last clobbered value is collected: the ones before it are
  superseded and must not stay alive. An appended value under the same name
  before the first clobber is superseded too.
  """
  sow(x, name='last', mode='append')
  for _ in range(CHAIN):
    x = sow(jnp.sin(x) + 1.0, name='last', mode='clobber')
  jax.debug.callback(observe, x)
  return jnp.sum(x)


class EagerMemoryTest(parameterized.TestCase):

  def observe(self, wrap):
    """Live counts running ``wrap(chain)`` directly and under capture."""
    x = jnp.ones(SHAPE)
    direct, captured = LiveArrays(), LiveArrays()
    # As NumPy copies, so that one run's output is not counted in the other.
    out = np.array(wrap(lambda x: chain(x, direct))(x), copy=True)
    out_c, collected = capture(wrap(lambda x: chain(x, captured)))(x)
    np.testing.assert_array_equal(out_c, out)  # the same operations
    self.assertEqual(list(collected), ['middle', 'end'])
    return direct.counts, captured.counts

  def test_plain_function(self):
    direct, captured = self.observe(lambda f: f)
    self.assertLen(direct, 2)
    self.assertLess(max(direct), CHAIN)  # the oracle itself drops values
    self.assertEqual(captured, direct)

  def test_custom_jvp_body(self):
    # An eager capture runs a custom_jvp function as a direct call does:
    # once. (Inside a jit, its body runs twice: evaluated in place for its
    # sown values, then re-bound without its sows for the outputs.)
    direct, captured = self.observe(in_custom_jvp)
    self.assertLen(direct, 2)
    self.assertEqual(captured, direct)


class SupersededClobberTest(absltest.TestCase):

  def test_superseded_values_are_freed(self):
    x = jnp.ones(SHAPE)
    direct, captured = LiveArrays(), LiveArrays()
    out = clobbers(x, direct)
    out_c, collected = capture(lambda x: clobbers(x, captured))(x)
    self.assertEqual(float(out_c), float(out))
    # The collected value is the last one, recomputed directly.
    last = x
    for _ in range(CHAIN):
      last = jnp.sin(last) + 1.0
    self.assertLen(collected['last'], 1)
    np.testing.assert_array_equal(collected['last'][0], last)
    self.assertLen(direct.counts, 1)
    # The capture keeps the last clobbered value, which is `x` at the
    # callback anyway: nothing more is live than in the direct run.
    self.assertEqual(captured.counts, direct.counts)

  def test_names_keep_the_order_of_their_first_sow(self):
    # The clobber of 'b' supersedes its first value, which set the order.
    def f(x):
      sow(x, name='b')
      sow(x + 1, name='a')
      sow(x + 2, name='b', mode='clobber')
      return x

    x = jnp.arange(3.0)
    _, collected = capture(f)(x)
    self.assertEqual(list(collected), ['b', 'a'])
    np.testing.assert_array_equal(collected['b'][0], x + 2)
    self.assertLen(collected['b'], 1)

  def test_a_clobber_replaces_every_tag_of_its_name(self):
    # capture groups by name: the clobber replaces the other tag's value too.
    def f(x):
      sow(x, name='b', tag='one')
      sow(x + 1, name='b', tag='two')
      sow(x + 2, name='b', tag='one', mode='clobber')
      return x

    x = jnp.arange(3.0)
    _, collected = capture(f)(x)
    self.assertLen(collected['b'], 1)
    np.testing.assert_array_equal(collected['b'][0], x + 2)

  def test_other_tags_are_kept(self):
    # nnx.capture keys values by name and tag: a clobber replaces only its
    # own tag's values there, so the scope must keep the other tag's.
    def f(x):
      sow(x, name='a', tag='keep')
      sow(x + 1, name='a', tag='other', mode='clobber')
      return x

    scope = Scope(Request(selection.Selection()))
    jaxpr = jax.make_jaxpr(f)(jnp.zeros(2))
    interpreter.evaluate(jaxpr.jaxpr, jaxpr.consts, [jnp.zeros(2)], scope)
    self.assertEqual(
        [(site.name, site.tag) for site, _ in scope.records],
        [('a', 'keep'), ('a', 'other')],
    )


if __name__ == '__main__':
  absltest.main()
