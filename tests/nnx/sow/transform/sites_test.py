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
"""Sow sites: what one sow equation is, as a scope of a program sees it.

``sites.py`` describes a sow equation (its parameters, leaf shapes, the
vmaps around it) and names where it was traced; these tests read the sites
of jaxprs traced here, with no interpretation.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp

from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import sites


# JAX's default float: float32, or float64 under JAX_ENABLE_X64.
FLOAT = jnp.zeros(()).dtype


def pair(x):
  return primitive.sow({'a': x, 'b': 2 * x}, name=('block', 0, 'h'), tag='t')


def only_sow(jaxpr):
  (eqn,) = primitive.sow_equations(jaxpr)
  return eqn


class SiteOfTest(absltest.TestCase):

  def test_parameters_and_leaf_shapes(self):
    eqn = only_sow(jax.make_jaxpr(pair)(jnp.ones(3)).jaxpr)
    site = sites.site_of(eqn)
    self.assertEqual(site.name, ('block', 0, 'h'))
    self.assertEqual(site.tag, 't')
    self.assertEqual(site.mode, 'append')
    self.assertEqual(site.num_leaves, 2)
    self.assertEqual(site.avals, (((3,), FLOAT), ((3,), FLOAT)))
    self.assertEqual((site.vmapped, site.inner_vmaps), (0, 0))
    self.assertEqual(site.params,
                     {'sow_name': ('block', 0, 'h'), 'tag': 't', 'meta': None})

  def test_a_vmap_around_the_sow_is_an_inner_vmap(self):
    eqn = only_sow(jax.make_jaxpr(jax.vmap(pair))(jnp.ones((2, 3))).jaxpr)
    site = sites.site_of(eqn)
    self.assertEqual(site.avals, (((2, 3), FLOAT), ((2, 3), FLOAT)))
    self.assertEqual(site.inner_vmaps, 1)
    # Outside a capture the batching rule leaves the parameters as they are.
    self.assertEqual(site.vmapped, 0)

  def test_while_harvesting_the_batching_rule_counts_the_vmaps(self):
    with primitive.harvesting(True):
      jaxpr = jax.make_jaxpr(jax.vmap(jax.vmap(pair)))(jnp.ones((4, 2, 3)))
    site = sites.site_of(only_sow(jaxpr.jaxpr))
    self.assertEqual(site.vmapped, 2)
    self.assertEqual(site.outer_vmaps, site.vmapped - site.inner_vmaps)

  def test_where_names_the_user_code(self):
    eqn = only_sow(jax.make_jaxpr(pair)(jnp.ones(3)).jaxpr)
    where = sites.where(eqn)
    self.assertIn(__file__.rsplit('/', 1)[-1], where)
    self.assertIn('(pair)', where)


@jax.custom_vjp
def sow_cotangent(x):
  """An identity whose backward rule sows its cotangent, as ``perturb``."""
  return x


sow_cotangent.defvjp(
    lambda x: (x, None),
    lambda _, ct: (primitive.sow(ct, name='ct'),),
)


def loss(y):
  return jnp.sum(jnp.sin(sow_cotangent(y)))


def vmaps_to_the_sow(jaxpr, depth=0):
  """``(vmapped, vmaps counted from the sow to the root)`` of the one sow."""
  for eqn in jaxpr.eqns:
    if eqn.primitive is primitive.sow_p:
      return eqn.params['vmapped'], sites.vmaps_of(eqn)
    for sub in jax.extend.core.jaxprs_in_params(eqn.params):
      found = vmaps_to_the_sow(sub)
      if found is not None:
        return found[0], found[1] + sites.vmaps_of(eqn)
  return None


class TransposedVmapsTest(parameterized.TestCase):
  """Under ``transpose`` JAX's name stacks repeat the vmaps around a
  ``grad`` (in a ``custom_vjp``'s backward rule, a linear ``checkpoint``):
  each vmap still counts once, as the sow's batching rule counts it."""

  @parameterized.named_parameters(
      ('vmap_grad', lambda: jax.vmap(jax.grad(loss)), (2, 3)),
      ('vmap_vmap_grad', lambda: jax.vmap(jax.vmap(jax.grad(loss))),
       (4, 2, 3)),
      ('grad_vmap', lambda: jax.grad(lambda y: jnp.sum(jax.vmap(loss)(y))),
       (2, 3)),
      ('vmap_grad_vmap', lambda: jax.vmap(jax.grad(
          lambda y: jnp.sum(jax.vmap(loss)(y)))), (4, 2, 3)),
      ('vmap_grad_checkpoint',
       lambda: jax.vmap(jax.grad(jax.checkpoint(loss))), (2, 3)),
      ('grad_vmap_checkpoint', lambda: jax.grad(
          lambda y: jnp.sum(jax.vmap(jax.checkpoint(loss))(y))), (2, 3)),
      ('vmap_grad_vmap_checkpoint', lambda: jax.vmap(jax.grad(
          lambda y: jnp.sum(jax.vmap(jax.checkpoint(loss))(y)))), (4, 2, 3)),
      ('vmap_grad_checkpoint_vmap', lambda: jax.vmap(jax.grad(jax.checkpoint(
          lambda y: jnp.sum(jax.vmap(loss)(y))))), (4, 2, 3)),
  )
  def test_each_vmap_counts_once(self, make, shape):
    with primitive.harvesting(True):
      jaxpr = jax.make_jaxpr(make())(jnp.ones(shape))
    vmapped, counted = vmaps_to_the_sow(jaxpr.jaxpr)
    self.assertEqual(vmapped, len(shape) - 1)
    self.assertEqual(counted, vmapped)

  def test_a_count_the_batching_rule_contradicts_is_refused(self):
    site = sites.Site(
        name='h', tag=None, mode='append',
        tree=jax.tree_util.tree_structure(0), avals=(((2, 3), FLOAT),),
        vmapped=1, inner_vmaps=2)
    with self.assertRaisesRegex(NotImplementedError, "sow 'h': 1 vmap"):
      site.with_loop_axis(7)


class SiteViewsTest(absltest.TestCase):
  """A site as seen from outside a map or a loop around its jaxpr."""

  SITE = sites.Site(
      name='h', tag=None, mode='append',
      tree=jax.tree_util.tree_structure(0), avals=(((2, 3), FLOAT),),
      vmapped=1, inner_vmaps=0)

  def test_with_leading(self):
    self.assertEqual(self.SITE.with_leading(5, 4).avals, (((5, 4, 2, 3), FLOAT),))

  def test_a_loop_axis_goes_after_the_outer_vmaps(self):
    self.assertEqual(self.SITE.with_loop_axis(7).avals, (((2, 7, 3), FLOAT),))
    inner = self.SITE.seen_through(1)
    self.assertEqual(inner.inner_vmaps, 1)
    self.assertEqual(inner.with_loop_axis(7).avals, (((7, 2, 3), FLOAT),))

  def test_seen_through_no_vmap_is_the_same_site(self):
    self.assertIs(self.SITE.seen_through(0), self.SITE)


class RecordsTest(absltest.TestCase):

  def test_split_records_pairs_each_site_with_its_leaves(self):
    two = sites.Site('p', None, 'append', jax.tree_util.tree_structure((0, 0)),
                     (((), FLOAT),) * 2)
    one = sites.Site('q', None, 'append', jax.tree_util.tree_structure(0),
                     (((), FLOAT),))
    records = sites.split_records([two, one], ['a', 'b', 'c'])
    self.assertEqual(records, [(two, ['a', 'b']), (one, ['c'])])
    with self.assertRaises(AssertionError):
      sites.split_records([two], ['a'])

  def test_describe_names(self):
    # Sorted by their repr, so that a message does not depend on the order.
    self.assertEqual(sites.describe_names([('a', 0), 'b']), "'b', ('a', 0)")
    self.assertEqual(sites.describe_names([]), '(none)')


if __name__ == '__main__':
  absltest.main()
