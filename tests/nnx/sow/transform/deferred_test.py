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
"""Deferred sows, in plain JAX: anchors followed to their origins through
the equations that carry them, and the sows renamed, dropped or left."""

import contextlib

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import deferred
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.selection import Selection

W = jnp.array([1.0, 2.0])
V = jnp.array([3.0, 4.0])


@contextlib.contextmanager
def resolver(names: dict[int, object]):
  """Resolves a deferred sow by the identity of its first anchor's origin
  (``names``: id(array) -> name, or ``deferred.DROP``); records the calls."""
  calls = []

  def resolve(pending, tag, origins, once):
    del tag
    calls.append(([o if o is None else id(o) for o in origins], once))
    for origin in origins:
      if origin is not None and id(origin) in names:
        found = names[id(origin)]
        return found if found is deferred.DROP else ((*found, *pending.rest),
                                                     None)
    return None

  kept = list(deferred._RESOLVERS)  # pylint: disable=protected-access
  deferred.set_resolver(resolve)
  try:
    yield calls
  finally:
    deferred._RESOLVERS[:] = kept  # pylint: disable=protected-access


def sow_of(x, w):
  """A deferred sow of ``x`` anchored at ``w`` (a 'module' holding w)."""
  pending = deferred.Deferred(anchors=(('w',),), rest=('h',), owner='Block')
  leaves, treedef = jax.tree_util.tree_flatten(x)
  (out,) = deferred.sow(leaves, [w], deferred=pending, treedef=treedef,
                        tag=None, mode='append')
  return out


def block(w, x):
  return sow_of(jnp.tanh(x * w), w) + 1.0


def names_in(jaxpr):
  return [(e.params['sow_name'], len(e.invars))
          for e in primitive.sow_equations(jaxpr)]


class DeferredTest(absltest.TestCase):

  def test_anchors_are_followed_through_jit_scan_cond_and_while(self):
    jitted = jax.jit(block)

    def f(w, v, x):
      x = jitted(w, x)
      x = jax.lax.scan(lambda c, _: (block(v, c), None), x, None, length=2)[0]
      x = jax.lax.cond(x[0] > 0, lambda x: block(w, x), lambda x: x, x)
      return jax.lax.while_loop(
          lambda c: c[1] < 1, lambda c: (block(v, c[0]), c[1] + 1),
          (x, 0))[0]

    closed = jax.make_jaxpr(f)(W, V, jnp.ones(2))
    with resolver({id(W): ('w',), id(V): ('v',)}):
      renamed = deferred.rename_jaxpr(closed, [W, V, None])
    self.assertEqual(names_in(renamed.jaxpr), [
        (('w', 'h'), 1), (('v', 'h'), 1), (('w', 'h'), 1), (('v', 'h'), 1)])
    # The renamed program computes what the original does.
    np.testing.assert_array_equal(
        jax.core.eval_jaxpr(renamed.jaxpr, renamed.consts, W, V,
                            jnp.ones(2)),
        jax.core.eval_jaxpr(closed.jaxpr, closed.consts, W, V, jnp.ones(2)))

  def test_one_trace_for_two_modules_is_named_per_binding(self):
    # JAX reuses the jit's trace for both: the names come from the values
    # each call is bound with, and each binding's program is cached.
    jitted = jax.jit(block)
    closed = jax.make_jaxpr(lambda w, v, x: jitted(v, jitted(w, x)))(
        W, V, jnp.ones(2))
    first, second = (e for e in closed.jaxpr.eqns if e.primitive.name == 'jit')
    self.assertIs(first.params['jaxpr'], second.params['jaxpr'])
    with resolver({id(W): ('w',), id(V): ('v',)}) as calls:
      whole = deferred.rename_jaxpr(closed, [W, V, None])
      named_w = deferred.rename_params(first.primitive, first.params,
                                       [W, None])
      named_v = deferred.rename_params(first.primitive, first.params,
                                       [V, None])
      again = deferred.rename_params(first.primitive, first.params, [W, None])
    self.assertEqual(names_in(named_w['jaxpr'].jaxpr), [(('w', 'h'), 1)])
    self.assertEqual(names_in(named_v['jaxpr'].jaxpr), [(('v', 'h'), 1)])
    self.assertIs(again['jaxpr'], named_w['jaxpr'])
    # In the whole program, the one staged sow occurs twice: its resolver
    # is told so (no name noted when it was staged can tell them apart).
    self.assertEqual([once for _, once in calls[:2]], [False, False])
    self.assertEqual(names_in(whole.jaxpr), [(('w', 'h'), 1), (('v', 'h'), 1)])

  def test_a_computed_anchor_has_no_origin_and_is_left(self):
    closed = jax.make_jaxpr(lambda w, x: block(w * 2.0, x))(W, jnp.ones(2))
    with resolver({id(W): ('w',)}) as calls:
      renamed = deferred.rename_jaxpr(closed, [W, None])
    self.assertIs(renamed, closed)
    self.assertEqual(calls, [([None], True)])  # asked, with no origin
    (eqn,) = primitive.sow_equations(closed.jaxpr)
    with self.assertRaisesRegex(ValueError, r"a Block sow \('h',\) was made"
                                ' inside a JAX transformation'):
      Request(Selection.make(tag=None, names=None, where='t')).handles(
          eqn.params)

  def test_a_dropped_sow_passes_its_values_through(self):
    closed = jax.make_jaxpr(block)(W, jnp.ones(2))
    with resolver({id(W): deferred.DROP}):
      renamed = deferred.rename_jaxpr(closed, [W, None])
    self.assertEqual(names_in(renamed.jaxpr), [])
    np.testing.assert_array_equal(
        jax.core.eval_jaxpr(renamed.jaxpr, renamed.consts, W, jnp.ones(2))[0],
        jnp.tanh(jnp.ones(2) * W) + 1.0)

  def test_anchors_pass_vmap_unbatched_and_the_values_batched(self):
    ws = jnp.stack([W, V])
    closed = jax.make_jaxpr(jax.vmap(block, in_axes=(None, 0)))(W, ws)
    with primitive.harvesting(True):
      harvested = jax.make_jaxpr(jax.vmap(block, in_axes=(None, 0)))(W, ws)
    for program in (closed, harvested):
      (eqn,) = primitive.sow_equations(program.jaxpr)
      # The anchor is the program's input itself, not a broadcast of it.
      self.assertIs(eqn.invars[-1], program.jaxpr.invars[0])
    with resolver({id(W): ('w',)}):
      renamed = deferred.rename_jaxpr(harvested, [W, None])
    self.assertEqual(names_in(renamed.jaxpr), [(('w', 'h'), 1)])

  def test_eager_binding_resolves_from_the_values(self):
    params = dict(sow_name=deferred.Deferred((('w',),), ('h',), 'Block'),
                  tag=None, mode='append', tree=None, vmapped=0, anchors=1)
    with resolver({id(W): ('w',)}):
      resolution, named = deferred.resolve_bound(params, [V, W])
      unresolved, _ = deferred.resolve_bound(params, [V, V])
    self.assertEqual(resolution, (('w', 'h'), None))
    self.assertEqual(named['sow_name'], ('w', 'h'))
    self.assertNotIn('anchors', named)
    self.assertIsNone(unresolved)


class FunnelContractTest(absltest.TestCase):
  """``_jax.traced_value``: what a JVP, linearize or batch tracer stands for
  (the private attributes it reads: ``primal``, ``val``). If a JAX release
  changes them, this fails here, naming it."""

  def test_traced_value_of_jax_tracers(self):
    seen = {}

    def keep(kind):
      def f(x):
        seen[kind] = _jax.traced_value(x)
        return x
      return f

    jax.jvp(keep('jvp'), (W,), (V,))
    jax.grad(lambda x: jnp.sum(keep('grad')(x)))(W)
    ws = jnp.stack([W, V])
    jax.vmap(keep('vmap'))(ws)
    self.assertIs(seen['jvp'], W)
    self.assertIs(seen['grad'], W)
    self.assertIs(seen['vmap'], ws)
    self.assertIsNone(_jax.traced_value(W))  # not a tracer

if __name__ == '__main__':
  absltest.main()
