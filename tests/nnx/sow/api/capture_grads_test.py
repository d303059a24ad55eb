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
"""``capture_grads``: values and gradients at sites, against ``jax.grad`` of
the function edited by hand to take each value as an input."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from flax import nnx
from flax.nnx.sow import capture, capture_grads, sow, tap
import sow_testing

LAYERS = 3
X = jnp.linspace(-1.0, 1.0, 4)
W = jnp.linspace(0.5, 1.5, 16).reshape(4, 4)


def loss(x):
  for i in range(LAYERS):
    x = sow(jnp.tanh(x @ W + i), name=('layers', i, 'h'))
  return jnp.sum(x ** 2)


def loss_from(layer, h):
  """The oracle: `loss` edited by hand to start from layer `layer`'s h."""
  x = h
  for i in range(layer + 1, LAYERS):
    x = jnp.tanh(x @ W + i)
  return jnp.sum(x ** 2)


RUNS = {'eager': lambda f: f, 'jit': jax.jit}


class CaptureGradsTest(parameterized.TestCase):

  @parameterized.parameters(list(RUNS))
  def test_every_layer_in_one_pass(self, run):
    out, values, grads = RUNS[run](capture_grads(loss, 'layers.*.h'))(X)
    sow_testing.assert_close(out, loss(X))
    _, sown = capture(loss)(X)
    self.assertEqual(list(grads), list(sown))
    self.assertEqual(list(values), list(sown))
    for i in range(LAYERS):
      name = ('layers', i, 'h')
      sow_testing.assert_close(values.one(name), sown.one(name))
      sow_testing.assert_close(
          grads.one(name), jax.grad(loss_from, argnums=1)(i, sown.one(name)))

  def test_in_a_scan(self):
    def scanned(x):
      def body(x, i):
        return sow(jnp.tanh(x @ W + i), name='h'), None
      x, _ = lax.scan(body, x, jnp.arange(LAYERS, dtype=jnp.float32))
      return jnp.sum(x ** 2)

    _, values, grads = capture_grads(scanned, 'h')(X)
    self.assertEqual(grads['h'][0].shape, (LAYERS, 4))
    for i in range(LAYERS):
      sow_testing.assert_close(
          grads['h'][0][i],
          jax.grad(loss_from, argnums=1)(i, values['h'][0][i]))

  def test_one_name_sown_per_layer(self):
    def same_name(x):
      for i in range(LAYERS):
        x = sow(jnp.tanh(x @ W + i), name='h')
      return jnp.sum(x ** 2)

    _, values, grads = jax.jit(capture_grads(same_name, 'h'))(X)
    self.assertLen(grads['h'], LAYERS)
    for i in range(LAYERS):
      sow_testing.assert_close(
          grads['h'][i], jax.grad(loss_from, argnums=1)(i, values['h'][i]))

  def test_a_site_the_output_does_not_depend_on(self):
    def f(x):
      unused = lax.stop_gradient(sow(x * 2, name='unused'))
      return jnp.sum(sow(jnp.sin(x), name='used')) + 0.0 * jnp.sum(unused)

    _, _, grads = capture_grads(f, ['unused', 'used'])(X)
    np.testing.assert_array_equal(grads.one('unused'), jnp.zeros_like(X))
    np.testing.assert_array_equal(grads.one('used'), jnp.ones_like(X))
    _, _, grads = capture_grads(f, 'unused')(X)
    np.testing.assert_array_equal(grads.one('unused'), jnp.zeros_like(X))

  def test_at_a_tap(self):
    model = nnx.Sequential(
        nnx.Linear(4, 4, rngs=nnx.Rngs(0)), nnx.relu,
        nnx.Linear(4, 1, rngs=nnx.Rngs(1)))
    tapped = tap(lambda m, x: jnp.sum(m(x)), 'layers.0', inputs=False)
    out, values, grads = capture_grads(
        tapped, 'layers.0.__call__.output')(model, X)
    h = values.one('layers.0.__call__.output')
    by_hand = lambda h: jnp.sum(model.layers[2](nnx.relu(h)))
    sow_testing.assert_close(out, by_hand(h))
    sow_testing.assert_close(grads.one('layers.0.__call__.output'),
                             jax.grad(by_hand)(h))

  def test_the_model_is_not_changed(self):
    model = nnx.Linear(4, 4, rngs=nnx.Rngs(0))
    kernel = np.asarray(model.kernel[...])
    tapped = tap(lambda m, x: jnp.sum(m(x)), (), inputs=False)
    capture_grads(tapped, '__call__.output')(model, X)
    np.testing.assert_array_equal(model.kernel[...], kernel)
    self.assertIs(type(model), nnx.Linear)

  def test_a_sow_whose_value_is_discarded(self):
    def f(x):
      sow(x * 2, name='discarded')
      return jnp.sum(x)
    with self.assertRaisesRegex(ValueError, r"the sow 'discarded'.*never uses"):
      capture_grads(f, 'discarded')(X)

  def test_bad_inputs(self):
    with self.assertRaisesRegex(ValueError, r"'layers\.\*\.g' selects no sow"):
      capture_grads(loss, 'layers.*.g')(X)
    with self.assertRaisesRegex(TypeError, r'must return a real scalar'):
      capture_grads(lambda x: sow(x, name='h'), 'h')(X)
    with self.assertRaisesRegex(TypeError, r'names must be a name or'):
      capture_grads(loss, 3)
    with self.assertRaisesRegex(TypeError, r'expected a callable'):
      capture_grads(3, 'h')


if __name__ == '__main__':
  absltest.main()
