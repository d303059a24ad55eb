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
"""The rule of cond and switch, for what JAX sows after the cond's batching
rule returned: a custom_vjp's backward rule, a custom_jvp's JVP rule and a
perturb's cotangent, in a branch of a cond whose index is batched.

Oracles: each example differentiated and captured alone, and the refusal
that names the sow and where JAX runs it.
"""

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


# -- Sows that JAX runs after the cond's batching rule ------------------------
# A custom_vjp's backward rule, a custom_jvp's JVP rule (in a loop body,
# differentiated after being batched) and a perturb's cotangent are sown
# when the program is differentiated, after the rule that ran the branch for
# every example returned: each example's untaken branch was once recorded,
# with zeros (issue 46).
KINDS = ('custom_vjp', 'custom_jvp', 'perturb')
XS = jnp.array([[0.5, 0.2], [-0.4, 0.3], [0.7, -0.1]], jnp.float32)


def _late_site(kind: str, scale: float):
  """``x -> sin(scale * x)``, whose derivative sows ``'b'`` where JAX runs
  it: in a backward rule, a JVP rule, or as a perturb's cotangent."""
  if kind == 'custom_vjp':
    @jax.custom_vjp
    def site(x):
      return jnp.sin(x * scale)

    def bwd(x, ct):
      return (sow(ct * scale, name='b') * jnp.cos(x * scale),)

    site.defvjp(lambda x: (site(x), x), bwd)
    return site
  if kind == 'custom_jvp':
    @jax.custom_jvp
    def site(x):
      return jnp.sin(x * scale)

    @site.defjvp
    def _(primals, tangents):
      (x,), (t,) = primals, tangents
      slope = sow(jnp.cos(x * scale) * scale, name='b')
      return jnp.sin(x * scale), slope * t

    return site
  return lambda x: jnp.sin(perturb(x * scale, name='b'))


def _looped(step, loop: str):
  if loop == 'scan':
    return lambda x: lax.scan(lambda c, _: (step(c), None), x, None,
                              length=2)[0]
  if loop == 'fori':
    return lambda x: lax.fori_loop(0, 2, lambda i, c: step(c), x)
  return step


def _batched_cond(kind: str, loop: str = 'none'):
  """A step whose cond's index depends on the (mapped) input."""
  a, b = _late_site(kind, 2.0), _late_site(kind, 3.0)
  return _looped(lambda x: lax.cond(x[0] > 0, a, b, x), loop)


def _loss(g):
  return lambda x: jnp.sum(jnp.sin(g(x)))


# Reverse mode around a vmap of the step (and, last, the vmap around it),
# each with its input.
STACKS = {
    'grad_vmap': (lambda h: jax.grad(_loss(jax.vmap(h))), XS),
    'vjp_vmap': (lambda h: lambda xs: jax.vjp(jax.vmap(h), xs)[1](
        jnp.cos(xs))[0], XS),
    'jacrev_vmap': (lambda h: jax.jacrev(_loss(jax.vmap(h))), XS),
    'linear_transpose_linearize_vmap': (
        lambda h: lambda xs: jax.linear_transpose(
            jax.linearize(jax.vmap(h), xs)[1], xs)(jnp.cos(xs))[0], XS),
    'grad_vmap_vmap': (lambda h: jax.grad(_loss(jax.vmap(jax.vmap(h)))),
                       jnp.stack([XS, -XS])),
    'vmap_grad': (lambda h: jax.vmap(jax.grad(_loss(h))), XS),
}
RUNS = {
    'eager': lambda fn: capture(fn),
    'jit_capture': lambda fn: jax.jit(capture(fn)),
    'capture_jit': lambda fn: capture(jax.jit(fn)),
}
REFUSAL = (
    'capture: jax.vmap of a cond/switch whose index depends on the mapped'
    " inputs runs every branch on every example, so its sows ('b') cannot"
    ' tell which branch an example took{}. Use jax.vmap(capture(f)) instead'
    ' of capture(jax.vmap(f)), or sow outside the cond.'
)
WHY = {
    'custom_vjp': " ('b' is sown by a custom_vjp or custom_jvp rule of a"
                  ' branch, which runs for every example when the program'
                  ' is differentiated)',
    'perturb': " ('b' is a perturb of a branch, whose gradient is sown for"
               ' every example when the program is differentiated)',
}
WHY['custom_jvp'] = WHY['custom_vjp']


def _expected_refusal(kind: str, stack: str) -> str:
  # Under vmap(grad) the branches are differentiated first and their sows
  # (the derivatives' included) batched by the rule itself.
  return REFUSAL.format('' if stack == 'vmap_grad' else WHY[kind])


def _family():
  for kind in KINDS:
    for stack in STACKS:
      for loop in ('none', 'scan', 'fori'):
        # Every way to run for the plainest stack; one for the others.
        runs = RUNS if stack == 'grad_vmap' else ('jit_capture',)
        for run in runs:
          yield (f'{kind}_{stack}_{loop}_{run}', kind, stack, loop, run)


class BatchedCondLateSowsTest(parameterized.TestCase):
  """Sows that a derivative binds after JAX's cond batching rule returned:
  refused as the branch's own sows are, also in loops and under jit, and
  captured where the index is not batched."""

  @parameterized.named_parameters(*_family())
  def test_refused(self, kind, stack, loop, run):
    make, xs = STACKS[stack]
    fn = make(_batched_cond(kind, loop))
    with self.assertRaises(NotImplementedError) as raised:
      RUNS[run](fn)(xs)
    self.assertEqual(str(raised.exception).split('\n')[0],
                     _expected_refusal(kind, stack))

  def _per_example(self, step, xs):
    """The oracle: each example differentiated and captured alone."""
    entries = [capture(jax.grad(_loss(step)))(x)[1]['b'] for x in xs]
    self.assertEqual({len(e) for e in entries}, {len(entries[0])})
    return [np.stack([np.asarray(e[k]) for e in entries])
            for k in range(len(entries[0]))]

  @parameterized.product(kind=KINDS, loop=('none', 'scan'))
  def test_unbatched_index_is_captured(self, kind, loop):
    # The index is traced but not mapped: every example takes branch 1.
    a, b = _late_site(kind, 2.0), _late_site(kind, 3.0)
    step = lambda x, i: lax.cond(i > 0, a, b, x)
    i = jnp.int32(1)
    fn = jax.grad(_loss(lambda xs: jax.vmap(
        _looped(lambda x: step(x, i), loop))(xs)))
    want = self._per_example(_looped(a, loop), XS)
    for run in (capture(fn), jax.jit(capture(fn))):
      grads, collected = run(XS)
      sow_testing.assert_close(grads, fn(XS))
      self.assertLen(collected['b'], len(want))
      for got, expected in zip(collected['b'], want):
        sow_testing.assert_close(got, expected)

  @parameterized.parameters(*KINDS)
  def test_unbatched_index_after_a_batched_one(self, kind):
    # JAX caches the batched branches of the refused cond and reuses them
    # for a cond of the same branches whose index is not batched: a mark
    # put on them while batching would refuse that one too.
    a, b = _late_site(kind, 2.0), _late_site(kind, 3.0)
    batched = jax.grad(_loss(jax.vmap(lambda x: lax.cond(x[0] > 0, a, b, x))))
    unbatched = lambda xs, i: jax.grad(_loss(jax.vmap(
        lambda x: lax.cond(i > 0, a, b, x))))(xs)
    with self.assertRaises(NotImplementedError):
      capture(batched)(XS)
    _, collected = capture(unbatched)(XS, jnp.int32(0))
    want = self._per_example(b, XS)
    self.assertLen(collected['b'], len(want))
    for got, expected in zip(collected['b'], want):
      sow_testing.assert_close(got, expected)

  @parameterized.parameters(*KINDS)
  def test_vmap_of_capture_is_exact(self, kind):
    # The way the refusal points to: each example captured by itself.
    step = _batched_cond(kind)
    got = jax.vmap(capture(jax.grad(_loss(step))))(XS)[1]['b']
    want = self._per_example(step, XS)
    self.assertLen(got, len(want))
    for g, w in zip(got, want):
      sow_testing.assert_close(g, w)


if __name__ == '__main__':
  absltest.main()
