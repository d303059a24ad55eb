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
"""``perturb`` is an identity under every transformation, forward mode too.

The oracle of each transformation is the same transformation of the
function without ``perturb``. ``perturb`` adds identities only, which JAX
evaluates (eagerly) or XLA compiles (under ``jit``) to nothing, so the
operations are the same and the comparisons are bitwise, except where a
capture's program differs from the plain one (stated there).
"""

import re

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import perturb
from flax.nnx.sow import sow
from flax.nnx.sow.transform import perturbation
from flax.nnx.sow.transform import primitive

import sow_testing


X = jnp.array([0.3, -0.5, 1.2], jnp.float32)
T = jnp.array([1.0, -2.0, 0.5], jnp.float32)
A = jnp.array([[1.0, 2.0, -1.0], [0.5, 0.0, 3.0]], jnp.float32)


def scalar(mark):
  return lambda v: jnp.sum(jnp.sin(mark(v * 2.0)) ** 2)


def vector(mark):
  return lambda v: A @ (jnp.sin(mark(v)) ** 2)


PERTURBED = lambda v: perturb(v, name='g')
PLAIN = lambda v: v


def f(x):
  return scalar(PERTURBED)(x)


def f0(x):
  return scalar(PLAIN)(x)


_FORWARD = {
    'jvp': lambda g: lambda x: jax.jvp(g, (x,), (T,)),
    'jacfwd': jax.jacfwd,
    'linearize': lambda g: lambda x: (lambda y, lin: (y, lin(T)))(
        *jax.linearize(g, x)),
    'hessian': jax.hessian,
    'jacrev': jax.jacrev,
    'grad': jax.grad,
}


def _assert_equal(test, got, want):
  test.assertEqual(jax.tree.structure(got), jax.tree.structure(want))
  for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_array_equal(g, w)


class ForwardModeTest(parameterized.TestCase):
  """Outside any capture: the transformations of ``f`` are those of ``f0``."""

  @parameterized.product(transform=sorted(_FORWARD), jit=[False, True])
  def test_same_as_without_perturb(self, transform, jit):
    run = _FORWARD[transform]
    wrap = jax.jit if jit else (lambda g: g)
    _assert_equal(self, wrap(run(f))(X), wrap(run(f0))(X))

  def test_vector_output_jacobians(self):
    for jac in (jax.jacfwd, jax.jacrev):
      _assert_equal(self, jac(vector(PERTURBED))(X), jac(vector(PLAIN))(X))

  def test_hessian_against_the_closed_form(self):
    # d^2/dx_i^2 sin(2 x_i)^2 = 8 cos(4 x_i); off the diagonal, zero.
    want = np.diag(8 * np.cos(4 * np.asarray(X, np.float64)))
    sow_testing.assert_close(jax.hessian(f)(X), want)

  def test_under_vmap_scan_and_checkpoint(self):
    xs = jnp.stack([X, 2 * X, -X])
    for wrap in (jax.vmap, lambda g: jax.vmap(jax.checkpoint(g))):
      _assert_equal(self, wrap(jax.jacfwd(f))(xs), wrap(jax.jacfwd(f0))(xs))
      _assert_equal(self, wrap(jax.hessian(f))(xs), wrap(jax.hessian(f0))(xs))

    def scanned(g):
      def body(c, x):
        y, t = jax.jvp(g, (x * c,), (T,))
        return c + y, t
      return lambda xs: lax.scan(body, 1.0, xs)

    _assert_equal(self, scanned(f)(xs), scanned(f0)(xs))
    _assert_equal(self, jax.jacfwd(scanned(f))(xs),
                  jax.jacfwd(scanned(f0))(xs))

  def test_grad_of_jvp_and_jvp_of_grad(self):
    def grad_of_jvp(g):
      return jax.grad(lambda x: jax.jvp(g, (x,), (T,))[1])

    def jvp_of_grad(g):
      return lambda x: jax.jvp(jax.grad(g), (x,), (T,))

    for compose in (grad_of_jvp, jvp_of_grad):
      _assert_equal(self, compose(f)(X), compose(f0)(X))

  def test_linear_transpose(self):
    lin = lambda t: perturb(t * 3.0, name='t')
    (ct,) = jax.linear_transpose(lin, X)(T)
    np.testing.assert_array_equal(ct, 3.0 * T)


class CaptureForwardModeTest(parameterized.TestCase):
  """What a capture collects under forward and mixed modes."""

  @parameterized.parameters('jvp', 'jacfwd', 'linearize')
  def test_forward_mode_sows_nothing(self, transform):
    run = _FORWARD[transform]
    for wrap in (lambda g: g, jax.jit):
      out, collected = capture(wrap(run(f)))(X)
      self.assertEqual(collected, {})
      # Compiled by a capture, eager here: other programs, equal to ulps.
      jax.tree.map(sow_testing.assert_close, out, run(f0)(X))

  def test_a_sow_under_jacfwd_keeps_the_primal_unbatched(self):
    # jacfwd requires its primal output unbatched: the sown primal is
    # recorded once per basis vector, and the program goes on unbatched.
    g = lambda x: jnp.sin(sow(x * 2.0, name='s'))
    jac, collected = capture(jax.jacfwd(g))(X)
    sow_testing.assert_close(jac, jax.jacfwd(g)(X))
    np.testing.assert_array_equal(
        collected['s'][0], np.broadcast_to(X * 2.0, (3, 3)))

  @parameterized.named_parameters(
      ('checkpoint', jax.checkpoint),
      ('jit', jax.jit),
      ('scan', lambda g: lambda x: lax.scan(
          lambda c, _: (g(c), None), x, None, length=2)[0]),
      ('cond', lambda g: lambda x: lax.cond(
          jnp.sum(x) > -1e9, g, lambda v: g(v * 0.5), x)),
  )
  def test_jacfwd_of_a_transform_that_batches_its_jvp_later(self, inner):
    # The transform batches the JVP'd program it holds after the JVP rules
    # have returned: the perturbation's primal output must still stay
    # unbatched there, as jacfwd requires (JAX raised `at vmap out_axes[0],
    # got axis spec None` for checkpoint, scan and cond).
    g = lambda v: jnp.sin(perturb(v * 2.0, name='g'))
    g0 = lambda v: jnp.sin(v * 2.0)
    for wrap in (lambda h: h, jax.jit):
      jac, collected = capture(wrap(jax.jacfwd(inner(g))))(X)
      self.assertEqual(collected, {})  # forward mode sows nothing
      sow_testing.assert_close(jac, jax.jacfwd(inner(g0))(X))

  def test_jacfwd_of_grad_through_checkpoint(self):
    # As hessian, with a grad (no vmap of its own) and a checkpoint between:
    # the cotangent of v * 2, broadcast along jacfwd's basis.
    jac, collected = capture(jax.jacfwd(jax.grad(jax.checkpoint(f))))(X)
    sow_testing.assert_close(jac, jax.hessian(f0)(X))
    (got,) = collected['g']
    ct = jax.grad(lambda u: jnp.sum(jnp.sin(u) ** 2))(X * 2.0)
    self.assertEqual(got.shape, (3, 3))
    sow_testing.assert_close(got, np.broadcast_to(ct, (3, 3)))

  def test_grad_is_unchanged(self):
    grad, collected = capture(jax.grad(f))(X)
    _assert_equal(self, grad, jax.grad(f0)(X))
    # The cotangent of v * 2 is d f0 / dx halved: bitwise, as the backward
    # pass computes it before multiplying by 2 (the same operations).
    want = jax.grad(lambda u: jnp.sum(jnp.sin(u) ** 2))(X * 2.0)
    self.assertEqual(list(collected), ['g'])
    (got,) = collected['g']
    np.testing.assert_array_equal(got, want)

  def test_hessian_sows_the_cotangents_of_its_jacrev(self):
    hess, collected = capture(jax.hessian(f))(X)
    # A capture's program broadcasts the sown values: the hessian is the
    # same math by other operations, hence a tolerance in ulps.
    sow_testing.assert_close(hess, jax.hessian(f0)(X))
    (got,) = collected['g']
    # The inner jacrev pulls back the basis of its (scalar) output, one
    # vector, under a vmap; jacfwd pushes forward each of the 3 basis
    # vectors of its input, under a vmap. The primal cotangent is the same
    # for every direction, so it is broadcast along jacfwd's axis.
    ct = jax.grad(lambda u: jnp.sum(jnp.sin(u) ** 2))(X * 2.0)
    self.assertEqual(got.shape, (3, 1, 3))
    sow_testing.assert_close(got, np.broadcast_to(ct, (3, 1, 3)))

  def test_jacfwd_of_jacrev_of_a_vector_function(self):
    g = vector(PERTURBED)
    jac, collected = capture(jax.jacfwd(jax.jacrev(g)))(X)
    sow_testing.assert_close(jac, jax.jacfwd(jax.jacrev(vector(PLAIN)))(X))
    (got,) = collected['g']
    # Output basis e_k pulls back to row k of the Jacobian at the perturbed
    # value (here the input itself).
    rows = jax.jacrev(vector(PLAIN))(X)  # (2, 3)
    self.assertEqual(got.shape, (3, 2, 3))
    sow_testing.assert_close(got, np.broadcast_to(rows, (3, 2, 3)))

  def test_grad_of_jvp_sows_the_cotangent_of_the_primal_value(self):
    # The tangent of the perturbed value is no intermediate: only the
    # cotangent of the value u, d <grad h(u), du> / du, is sown, once.
    def directional(g):
      return lambda x: jax.jvp(g, (x,), (T,))[1]

    grad, collected = capture(jax.grad(directional(f)))(X)
    _assert_equal(self, grad, jax.grad(directional(f0))(X))
    (got,) = collected['g']
    # At u = 2x, with the tangent 2T of u.
    h = lambda u: jnp.sum(jnp.sin(u) ** 2)
    want = jax.grad(lambda u: jax.jvp(h, (u,), (2.0 * T,))[1])(X * 2.0)
    sow_testing.assert_close(got, want)

  def test_hessian_under_vmap_jit_scan_and_checkpoint(self):
    xs = jnp.stack([X, 2 * X])
    ct = jax.vmap(jax.grad(lambda u: jnp.sum(jnp.sin(u) ** 2)))(xs * 2.0)
    want = np.broadcast_to(ct[:, None, None], (2, 3, 1, 3))
    for wrap in (jax.vmap, lambda g: jax.jit(jax.vmap(g)),
                 lambda g: jax.vmap(jax.checkpoint(g))):
      hess, collected = capture(wrap(jax.hessian(f)))(xs)
      sow_testing.assert_close(hess, jax.vmap(jax.hessian(f0))(xs))
      (got,) = collected['g']
      self.assertEqual(got.shape, (2, 3, 1, 3))
      sow_testing.assert_close(got, want)

    def scanned(x):
      step = lambda c, _: (c + jnp.sum(jax.hessian(f)(x * c)), None)
      return lax.scan(step, 1.0, None, length=2)[0]

    out, collected = capture(scanned)(X)
    (got,) = collected['g']
    self.assertEqual(got.shape, (2, 3, 1, 3))  # the loop axis first
    c1 = 1.0 + jnp.sum(jax.hessian(f0)(X))
    for k, c in enumerate((jnp.float32(1.0), c1)):
      ct = jax.grad(lambda u: jnp.sum(jnp.sin(u) ** 2))(X * c * 2.0)
      sow_testing.assert_close(got[k], np.broadcast_to(ct, (3, 1, 3)))
    sow_testing.assert_close(out, c1 + jnp.sum(jax.hessian(f0)(X * c1)))


class TransposeRuleTest(absltest.TestCase):
  """The rule itself, for cotangents JAX's own paths rarely hand it."""

  def _sows_staged(self, cotangents):
    aval = jax.typeof(X)
    rule = jax.interpreters.ad.primitive_transposes[perturbation.tangent_p]
    params = dict(sow_name='g', tag=None, tree=jax.tree.structure(X),
                  vmapped=0)

    def transpose():
      out = rule(cotangents(), jax.interpreters.ad.UndefinedPrimal(aval),
                 **params)
      return [o for o in out if isinstance(o, jax.Array)]

    with primitive.harvesting(True):
      jaxpr = jax.make_jaxpr(transpose)().jaxpr
    return list(primitive.sow_equations(jaxpr))

  def test_zero_cotangents_sow_nothing(self):
    zero = jax.interpreters.ad.Zero(jax.typeof(X))
    self.assertEqual(self._sows_staged(lambda: [zero]), [])

  def test_a_cotangent_is_sown(self):
    (eqn,) = self._sows_staged(lambda: [jnp.ones(3)])
    self.assertEqual(eqn.params['sow_name'], 'g')


class VmapInsideGradTest(parameterized.TestCase):
  """A vmap inside ``jax.grad`` batches the perturbation, not its sow."""

  @parameterized.product(n=[0, 1, 2], jit=[False, True])
  def test_loop_axis_first_per_example_cotangents(self, n, jit):
    xs = jnp.arange(6.0).reshape(2, 3) / 7

    def per_example(c):
      loss = lambda y: jnp.sum(
          jax.vmap(lambda r: jnp.sin(perturb(r * c, name='g')))(y))
      return jax.grad(loss)(xs)

    def f():
      step = lambda i, c: c + 0.1 * jnp.sum(per_example(c))
      return lax.fori_loop(0, n, step, 1.0)

    run = jax.jit(capture(f)) if jit else capture(f)
    _, collected = run()
    (got,) = collected['g']
    cs, c = [], jnp.float32(1.0)
    for _ in range(n):
      cs.append(c)
      c = c + 0.1 * jnp.sum(jnp.cos(xs * c) * c)
    want = (np.stack([np.cos(xs * c) for c in cs]) if n
            else np.zeros((0, 2, 3), np.float32))
    sow_testing.assert_close(got, want)


def _ops(hlo: str) -> list[str]:
  """The operations of a lowered module, in order."""
  return re.findall(r'\b(?:stablehlo|chlo|mhlo)\.[a-z_]+', hlo)


class LoweringTest(parameterized.TestCase):
  """Under ``jit`` a perturbation compiles to nothing."""

  @parameterized.parameters('grad', 'jvp', 'jacfwd', 'hessian')
  def test_no_extra_ops(self, transform):
    run = _FORWARD[transform]
    for g, g0 in ((f, f0), (run(f), run(f0))):
      got = jax.jit(g).lower(X).as_text()
      self.assertEqual(_ops(got), _ops(jax.jit(g0).lower(X).as_text()))
      self.assertNotIn('perturb', got)

  def test_the_jaxpr_keeps_the_marker(self):
    # The marker is seen in the jaxpr (by capture), not in the HLO.
    jaxpr = jax.make_jaxpr(jax.jit(f))(X)
    (inner,) = (e.params['jaxpr'] for e in jaxpr.eqns)
    self.assertEqual([e.primitive.name for e in inner.eqns
                      if 'perturb' in e.primitive.name], ['perturb'])
    self.assertNotIn('custom_vjp', str(jaxpr))


class UserCustomVjpTest(absltest.TestCase):
  """A user's ``custom_vjp`` whose backward rule sows is still collected."""

  def test_sow_in_a_backward_rule(self):
    @jax.custom_vjp
    def clip_grad(x):
      return x

    def fwd(x):
      return x, None

    def bwd(_, ct):
      return (jnp.clip(sow(ct, name='ct'), -1.0, 1.0),)

    clip_grad.defvjp(fwd, bwd)

    def loss(x):
      return jnp.sum(3.0 * jnp.sin(perturb(clip_grad(x), name='g')))

    grad, collected = capture(jax.grad(loss))(X)
    want_ct = 3.0 * jnp.cos(X)
    np.testing.assert_array_equal(collected['ct'][0], want_ct)
    np.testing.assert_array_equal(collected['g'][0], want_ct)
    np.testing.assert_array_equal(grad, jnp.clip(want_ct, -1.0, 1.0))

    xs = jnp.stack([X, -X])
    _, collected = capture(jax.vmap(jax.grad(loss)))(xs)
    want = 3.0 * jnp.cos(xs)
    sow_testing.assert_close(collected['ct'][0], want)
    sow_testing.assert_close(collected['g'][0], want)


if __name__ == '__main__':
  absltest.main()
