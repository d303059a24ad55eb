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
"""``perturb``: the gradient of an intermediate, sown under ``grad``."""

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import perturb
from flax.nnx.sow import sow

import sow_testing


X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


W = jnp.array([0.5, -1.5, 2.0], jnp.float32)


X_PLANT_UNREAD = jnp.arange(3.0)


class ProposalPerturbTest(absltest.TestCase):
  """The proposal's examples, verbatim in substance, against oracles."""

  def test_grad_x(self):
    def loss(x):
      return jnp.sum(perturb(x, name='grad_x') ** 2)

    grad, collected = capture(jax.grad(loss))(X)
    np.testing.assert_array_equal(collected['grad_x'][0], 2 * np.asarray(X))
    np.testing.assert_array_equal(grad, 2 * np.asarray(X))


class PerturbTest(parameterized.TestCase):

  @staticmethod
  def loss(w, x):
    h = perturb(jnp.tanh(x * w), name='h')
    return jnp.sum(h**2)

  @staticmethod
  def dloss_dh(w, x):
    return 2 * np.tanh(np.asarray(x) * np.asarray(w))

  def test_grad_and_jit(self):
    for f in (jax.grad(self.loss), jax.jit(jax.grad(self.loss))):
      _, collected = capture(f)(1.5, X)
      sow_testing.assert_close(collected['h'][0], self.dloss_dh(1.5, X))

  def test_value_and_grad(self):
    (value, grad), collected = capture(jax.value_and_grad(self.loss))(1.5, X)
    sow_testing.assert_close(value, self.loss(1.5, X))
    sow_testing.assert_close(grad, jax.grad(self.loss)(1.5, X))
    sow_testing.assert_close(collected['h'][0], self.dloss_dh(1.5, X))

  def test_vjp(self):
    def f(x):
      out, pullback = jax.vjp(lambda v: jnp.sin(perturb(v, name='v')) * 3, x)
      return pullback(jnp.ones_like(out))[0]

    _, collected = capture(f)(X)
    sow_testing.assert_close(collected['v'][0], 3 * np.cos(X))

  def test_per_example_gradients_under_vmap(self):
    xs = jnp.stack([X, X * 2, X * -1])
    per_example = jax.vmap(jax.grad(self.loss), in_axes=(None, 0))
    _, collected = capture(per_example)(1.5, xs)
    expected = np.stack([self.dloss_dh(1.5, x) for x in xs])
    sow_testing.assert_close(collected['h'][0], expected)

  def test_per_step_gradients_under_scan(self):
    ws = jnp.array([0.5, 1.0, 2.0], jnp.float32)

    def loss(x):
      def body(c, w):
        c = perturb(jnp.sin(c * w), name='step')
        return c, None
      return jnp.sum(lax.scan(body, x, ws)[0])

    _, collected = capture(jax.grad(loss))(X)
    # Oracle: back-propagate by hand through c_{k+1} = sin(c_k * w_k).
    cs = [np.asarray(X, np.float64)]
    for w in np.asarray(ws):
      cs.append(np.sin(cs[-1] * w))
    grads = [np.ones(3)]
    for k in reversed(range(len(ws))):
      grads.insert(0, grads[0] * np.cos(cs[k] * ws[k]) * ws[k])
    # d loss / d c_{k+1} for k = 0, 1, 2, stacked in step order.
    sow_testing.assert_close(collected['step'][0], np.stack(grads[1:]))

  def test_symbolically_zero_gradient_runs_no_backward_pass(self):
    # JAX proves the cotangent of `y` is zero and skips perturb's backward
    # rule, so nothing is sown (documented under Limitations).
    def loss(x):
      y = perturb(x, name='blocked')
      return jnp.sum(x) + jnp.sum(lax.stop_gradient(y))

    _, collected = capture(jax.grad(loss))(X)
    self.assertNotIn('blocked', collected)

  def test_numerically_zero_gradient_is_sown(self):
    def loss(x):
      return jnp.sum(perturb(x, name='zero') * 0.0)

    _, collected = capture(jax.grad(loss))(X)
    np.testing.assert_array_equal(collected['zero'][0], np.zeros(3))

  def test_discarded_perturb_has_no_backward_pass(self):
    # The result of perturb is never used, so the loss does not depend on it
    # and JAX never runs its backward rule: there is no gradient to report.
    def loss(x):
      perturb(x, name='discarded')
      return jnp.sum(x)

    _, collected = capture(jax.grad(loss))(X)
    self.assertNotIn('discarded', collected)

  def test_no_gradient_no_sow(self):
    out, collected = capture(self.loss)(1.5, X)
    self.assertEqual(collected, {})
    np.testing.assert_array_equal(out, self.loss(1.5, X))

  def test_integer_value_is_rejected(self):
    with self.assertRaisesRegex(TypeError, r"perturb\(name='i'\): only"):
      perturb(jnp.arange(3), name='i')

  def test_bad_name(self):
    with self.assertRaisesRegex(TypeError, r'perturb\(name=3\)'):
      perturb(X, name=3)


class PerturbTagTest(absltest.TestCase):

  def test_the_gradient_is_sown_with_the_perturbation_tag(self):
    def loss(x):
      x = perturb(x, name='dx', tag='grads')
      return jnp.sum(sow(x, name='x', tag='values') ** 2)

    _, grads = capture(jax.grad(loss), tag='grads')(X)
    _, values = capture(jax.grad(loss), tag='values')(X)
    self.assertEqual(list(grads), ['dx'])
    self.assertEqual(list(values), ['x'])
    np.testing.assert_array_equal(grads['dx'][0], 2 * np.asarray(X))


class PerturbInsideRematTest(parameterized.TestCase):

  def test_perturb_inside_remat_matches_no_remat(self):
    def block(x):
      return jnp.sum(perturb(jnp.sin(x * W), name='g') ** 2)

    _, with_remat = capture(jax.grad(jax.checkpoint(block)))(X)
    _, without = capture(jax.grad(block))(X)
    sow_testing.assert_close(with_remat['g'][0], without['g'][0])
    sow_testing.assert_close(with_remat['g'][0], 2 * np.sin(np.asarray(X * W)))


class PerturbNumpyIntegerNameTest(parameterized.TestCase):

  def test_perturb_name_with_numpy_integer(self):
    def loss(x):
      return jnp.sum(perturb(x, name=('grad', np.int64(0))) ** 2)

    _, collected = capture(jax.grad(loss))(X_PLANT_UNREAD)
    self.assertEqual(list(collected), [('grad', 0)])
    np.testing.assert_array_equal(collected[('grad', 0)][0], 2 * X_PLANT_UNREAD)


if __name__ == '__main__':
  absltest.main()


def _grads_of_sin(v):
  """d sum(sin(v)) / dv per row of ``v``: the oracle of the loops below."""
  return jax.vmap(jax.grad(lambda row: jnp.sum(jnp.sin(row))))(v)


# Per-row gradients of the loss at `perturb(y * c)`, each through a different
# stack of transforms around the perturbation; all sow cos(x * c) per row of
# `x`, with the vmapped axis leading. The name says the stack.
_LOSS = lambda c: lambda y: jnp.sum(jnp.sin(perturb(y * c, name='g')))
_PER_ROW = {
    'vmap(grad)': lambda x, c: jax.vmap(jax.grad(_LOSS(c)))(x),
    'vmap(grad(checkpoint))': (
        lambda x, c: jax.vmap(jax.grad(jax.checkpoint(_LOSS(c))))(x)),
    'vmap(checkpoint(grad))': (
        lambda x, c: jax.vmap(jax.checkpoint(jax.grad(_LOSS(c))))(x)),
    'vmap(jit(grad))': lambda x, c: jax.vmap(jax.jit(jax.grad(_LOSS(c))))(x),
    'vmap(grad(cond))': lambda x, c: jax.vmap(jax.grad(
        lambda y: lax.cond(c > 0, _LOSS(c), _LOSS(c), y)))(x),
    'vmap(in_axes=1)(grad)': lambda x, c: jax.vmap(
        jax.grad(_LOSS(c)), in_axes=1, out_axes=1)(x.T).T,
}


class PerturbInLoopsTest(parameterized.TestCase):
  """A ``perturb`` under ``vmap`` of ``grad`` inside a loop.

  Its gradient is sown by the backward rule of a ``custom_vjp``, staged
  under name stacks that JAX writes with copies of the vmaps around the
  ``grad`` (see ``sites._readings``): the loop axis of its
  values must still come first, before the axis of the vmap inside the loop,
  as for a plain ``sow`` there.
  """

  @parameterized.product(
      stack=sorted(_PER_ROW), loop=['fori_loop', 'scan'], n=[0, 1, 2],
      jit=[False, True])
  def test_loop_axis_first_and_values_against_jax_grad(self, stack, loop, n,
                                                       jit):
    per_row = _PER_ROW[stack]
    x = jnp.arange(6.0).reshape(2, 3) / 7

    def step(c):
      return c + 0.1 * jnp.sum(per_row(x, c))

    def f(x):
      del x  # closed over by `per_row`'s callers, as a model's weights are
      if loop == 'fori_loop':
        return lax.fori_loop(0, n, lambda i, c: step(c), 1.0)
      return lax.scan(lambda c, _: (step(c), None), 1.0, None, length=n)[0]

    run = jax.jit(capture(f)) if jit else capture(f)
    _, collected = run(x)
    (got,) = collected['g']
    # The oracle: the carries by a Python loop, and the gradient of each
    # step's loss by jax.grad of the function without perturb.
    cs, c = [], jnp.float32(1.0)
    for _ in range(n):
      cs.append(c)
      c = c + 0.1 * jnp.sum(_grads_of_sin(x * c) * c)
    want = (np.stack([_grads_of_sin(x * c) for c in cs]) if n
            else np.zeros((0, 2, 3), np.float32))
    sow_testing.assert_close(got, want)

  @parameterized.parameters(0, 1, 2)
  def test_same_axes_as_a_plain_sow_of_the_same_gradient(self, n):
    x = jnp.arange(6.0).reshape(2, 3) / 7

    def f(mark):
      def loss(y, c):
        return jnp.sum(jnp.sin(mark(y * c)))

      def step(i, c):
        del i
        return c + jnp.sum(jax.vmap(jax.grad(loss), (0, None))(x, c))

      return lambda: lax.fori_loop(0, n, step, 1.0)

    _, perturbed = capture(f(lambda v: perturb(v, name='g')))()
    _, sown = capture(f(lambda v: sow(v, name='g')))()
    self.assertEqual(perturbed['g'][0].shape, (n, 2, 3))
    self.assertEqual(sown['g'][0].shape, (n, 2, 3))

  def test_vmap_outside_the_loop_comes_before_the_loop_axis(self):
    x = jnp.arange(12.0).reshape(2, 2, 3) / 7

    def f(xs):
      def one(x):
        def step(i, c):
          del i
          return c + 0.1 * jnp.sum(jax.vmap(jax.grad(_LOSS(c)))(x))
        return lax.fori_loop(0, 3, step, 1.0)

      return jax.vmap(one)(xs)

    _, collected = capture(f)(x)
    (got,) = collected['g']
    self.assertEqual(got.shape, (2, 3, 2, 3))  # outer vmap, loop, inner vmap
    for k in range(2):
      cs, c = [], jnp.float32(1.0)
      for _ in range(3):
        cs.append(c)
        c = c + 0.1 * jnp.sum(_grads_of_sin(x[k] * c) * c)
      sow_testing.assert_close(
          got[k], np.stack([_grads_of_sin(x[k] * c) for c in cs]))
