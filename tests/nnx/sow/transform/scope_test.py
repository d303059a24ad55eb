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
"""The state of one interpretation: records in program order, clobbers,
and the planter it asks for planted values (``scope.py``)."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import scope as scope_lib
from flax.nnx.sow.transform import selection
from flax.nnx.sow.transform import sites
from flax.nnx.sow.transform.request import Request


F32 = np.dtype('float32')


def site(name, tag=None, mode='append'):
  return sites.Site(name, tag, mode, jax.tree_util.tree_structure(0),
                    (((), F32),))


def names(scope):
  return [(s.name, float(leaves[0])) for s, leaves in scope.records]


class RecordsTest(absltest.TestCase):

  def test_records_are_kept_in_program_order(self):
    scope = scope_lib.Scope(Request(selection.Selection()))
    for name, value in (('a', 1.0), ('b', 2.0), ('a', 3.0)):
      scope.record(site(name), [jnp.float32(value)])
    self.assertEqual(names(scope), [('a', 1.0), ('b', 2.0), ('a', 3.0)])
    self.assertEqual(float(scope.last_record('a')[1][0]), 3.0)
    self.assertIsNone(scope.last_record('c'))

  def test_literal_leaves_are_recorded_as_jax_arrays(self):
    scope = scope_lib.Scope(Request(selection.Selection()))
    scope.record(site('a'), [2.0])
    self.assertIsInstance(scope.records[0][1][0], jax.Array)

  def test_a_clobber_replaces_the_first_record_of_its_name(self):
    scope = scope_lib.Scope(Request(selection.Selection()))
    scope.record(site('a'), [jnp.float32(1.0)])
    scope.record(site('b'), [jnp.float32(2.0)])
    scope.record(site('a'), [jnp.float32(3.0)])
    scope.record(site('a', mode='clobber'), [jnp.float32(4.0)])
    # In the place of the first, so the order of the names is kept.
    self.assertEqual(names(scope), [('a', 4.0), ('b', 2.0)])

  def test_a_clobber_keeps_the_records_of_other_tags(self):
    scope = scope_lib.Scope(Request(selection.Selection()))
    scope.record(site('a', tag='x'), [jnp.float32(1.0)])
    scope.record(site('a', tag='y', mode='clobber'), [jnp.float32(2.0)])
    self.assertEqual(names(scope), [('a', 1.0), ('a', 2.0)])

  def test_nothing_is_recorded_without_collecting(self):
    scope = scope_lib.Scope(Request(selection.Selection(), collect=False))
    scope.record(site('a'), [jnp.float32(1.0)])
    self.assertEqual(scope.records, [])


class Planter:

  def __init__(self):
    self.asked = []

  def take(self, site_, leaves):
    self.asked.append((site_.name, leaves))
    return [jnp.float32(0.0)]


class PlantTest(absltest.TestCase):

  def test_the_planter_is_asked_for_planted_sites_only(self):
    planter = Planter()
    request = Request(selection.Selection(), collect=False,
                      planted=selection.Selection(names=frozenset(['p'])))
    scope = scope_lib.Scope(request, planter)
    self.assertIsNone(scope.plant(site('q'), ['q leaves']))
    self.assertEqual(scope.plant(site('p'), ['p leaves']), [0.0])
    self.assertEqual(planter.asked, [('p', ['p leaves'])])

  def test_without_a_planter_nothing_is_planted(self):
    request = Request(selection.Selection(), planted=selection.Selection())
    self.assertIsNone(scope_lib.Scope(request).plant(site('p')))

  def test_a_clobber_site_cannot_be_planted(self):
    request = Request(selection.Selection(), planted=selection.Selection())
    scope = scope_lib.Scope(request, Planter())
    with self.assertRaisesRegex(ValueError, "mode='clobber'"):
      scope.plant(site('p', mode='clobber'))


class VmapsTest(absltest.TestCase):

  def test_a_site_is_seen_through_the_vmaps_of_inlined_calls(self):
    def f(x):
      return jax.jit(lambda y: primitive.sow(y, name='h'))(x)

    jaxpr = jax.make_jaxpr(jax.vmap(f))(jnp.ones((2, 3))).jaxpr
    (call,) = jaxpr.eqns
    scope = scope_lib.Scope(Request(selection.Selection()))
    found = site('h')
    self.assertEqual(scope.here(found).inner_vmaps, 0)
    self.assertEqual(scope.here(found, via=call).inner_vmaps, 1)
    with scope.inlined(call):
      self.assertEqual(scope.here(found).inner_vmaps, 1)
    self.assertEqual(scope.inline_vmaps, 0)


if __name__ == '__main__':
  absltest.main()
