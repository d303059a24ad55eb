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
"""``capture_compat.capture`` (``nnx.capture`` on the sow transform): the
Variable updates a call makes, as after a direct call, and the path marks of
module copies.

Oracles: Flax 0.12.8's own implementation (``sow_legacy.capture``, where it
works), values recomputed directly from the model's parameters.
"""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx

from compat_testing import CompatTestCase, flat, Net, UpdatingModel, X  # pylint: disable=g-multiple-import
import sow_legacy


class VariableUpdatesTest(CompatTestCase):
  """Variable updates inside the capture are visible as after a direct call.
  """

  Model = UpdatingModel

  def test_updates_like_a_direct_call(self):
    model = self.Model(nnx.Rngs(0))
    twin = nnx.clone(model)
    x = jnp.stack([X, X * 2, -X])
    graphdef = nnx.graphdef(model)

    def forward(m, x):
      # An eager call runs on the model itself, unchanged: nothing is
      # written onto it, where Flax 0.12.8 adds `__captures__`.
      self.assertIs(m, model)
      self.assertEqual(nnx.graphdef(m), graphdef)
      self.assertNotIn('__captures__', vars(m))
      return m(x)

    with jax.checking_leaks():
      out, state = nnx.capture(forward, nnx.Intermediate)(model, x)
    # Flax 0.12.8 adds __captures__ to every module while it runs.
    during = []
    sow_legacy.capture(
        lambda m, x: during.append(nnx.graphdef(m)) or m(x), nnx.Intermediate
    )(nnx.clone(model), x)
    self.assertNotEqual(during[0], graphdef)
    with self.assertWarns(DeprecationWarning):  # a direct call sows
      expected_out = twin(x)
    self.assertTreeClose(out, expected_out)
    self.assertEqual(nnx.graphdef(model), graphdef)
    twin_state = nnx.state(twin, nnx.Not(nnx.Intermediate))
    self.assertLen(nnx.to_flat_state(twin_state),
                   len(nnx.to_flat_state(nnx.state(model))))
    for (path, a), (_, b) in zip(
        nnx.to_flat_state(nnx.state(model)), nnx.to_flat_state(twin_state)
    ):
      a, b = a.get_value(), b.get_value()
      if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
        a, b = jax.random.key_data(a), jax.random.key_data(b)
      np.testing.assert_array_equal(a, b, err_msg=str(path))
    self.assertEqual(model.calls.get_value(), 1)
    self.assertFalse(np.allclose(model.norm.mean.get_value(), 0))
    self.assertLen(state['h'].get_value(), 1)


class NothingOnModulesTest(CompatTestCase):
  """No mark of a call's module paths is on any module, inside or after."""

  def unmarked(self, node):
    return all(
        '_pytree__sow_paths' not in vars(m)
        for _, m in nnx.iter_graph(node)
        if isinstance(m, nnx.Module)
    )

  def test_returned_modules_carry_no_mark(self):
    net = Net(nnx.Rngs(0))
    graphdef = nnx.graphdef(net)

    def forward(m, x):
      return m, nnx.clone(m), Net(nnx.Rngs(1)), m(x)

    (same, clone, new, _), state = nnx.capture(forward, nnx.Intermediate)(
        net, X
    )
    self.assertIs(same, net)
    for node in (same, clone, new):
      self.assertTrue(self.unmarked(node))
    self.assertEqual(nnx.graphdef(clone), graphdef)
    self.assertLen(flat(state), 3)

  def test_a_clone_returned_by_a_nested_capture_sows_by_its_arrays(self):
    net = Net(nnx.Rngs(0))

    def inner(m, x):
      return nnx.clone(m), m(x)

    def outer(m, x):
      (clone, _), inner_state = nnx.capture(inner, nnx.Intermediate)(m, x)
      # Still inside the outer capture: the clone, unmarked, sows under the
      # path of the module whose arrays its Variables hold.
      self.assertTrue(self.unmarked(clone))
      return clone(x), inner_state

    (_, inner_state), state = nnx.capture(outer, nnx.Intermediate)(net, X)
    self.assertEqual([p for p, _, _ in flat(inner_state)],
                     [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('out',)])
    self.assertEqual(
        [p for p, _, _ in flat(state)],
        [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('out',)],
    )
    # The inner capture collects its own sows; the outer one gets the
    # clone's, under the paths of the module it was cloned from.
    self.assertStatesEqual(state, inner_state)
    self.assertTrue(self.unmarked(net))


if __name__ == '__main__':
  absltest.main()
