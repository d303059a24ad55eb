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
"""The codemod's reading of a captured State: ``consumers``.

How the State that ``nnx.capture`` returns is read after the call: each
read mapped to the name it takes (and whether ``.value`` goes with it), or
the reason the codemod cannot map it. Unit tests on small sources parsed
with libcst; ``codemod_testing.Probe`` stands in for the collector.
"""

import textwrap

import codemod_testing
from absl.testing import absltest, parameterized

codemod_testing.require_libcst()

# pylint: disable=g-import-not-at-top,wrong-import-position
import libcst as cst

consumers = codemod_testing.codemod_module('consumers')
# pylint: enable=g-import-not-at-top,wrong-import-position


class ConsumersTest(parameterized.TestCase):

  def _reads(self, body):
    probe, module = codemod_testing.probe(textwrap.dedent('''\
        import jax
        from flax import nnx
        def f(model, x):
          y, s = nnx.capture(model, nnx.Intermediate)(x)
        ''') + textwrap.indent(textwrap.dedent(body), '  '))
    target = codemod_testing.named(module, 's')[0]
    return consumers.state_reads(probe, target)

  def test_root_level_reads_are_mapped(self):
    found, accesses, reason = self._reads('''\
        a = s['h'][0]
        b = s['g'].value
        c = s.k.value[-1]
        d = 'h' in s
        ''')
    self.assertIsNone(reason)
    self.assertEqual(found, {'h', 'g', 'k'})
    # Each access is the node a rewrite replaces; .value goes with it.
    self.assertEqual(
        sorted((a.name, a.value, cst.Module([]).code_for_node(a.node))
               for a in accesses),
        [('g', True, "s['g'].value"), ('h', False, "s['h']"),
         ('k', True, 's.k.value')])

  @parameterized.named_parameters(
      ('path', "s['block']['h'].value", 'nested-consumer'),
      ('computed_key', 's[name]', 'state-use'),
      ('pure_dict', 's.to_pure_dict()', 'to-pure-dict'),
      ('tree', 'jax.tree.leaves(s)', 'tree-leaves'),
      ('passed_on', 'print(s)', 'escaping-state'),
      ('iterated', '[v for v in s]', 'state-use'),
      ('variable', "s['h'].shape", 'state-use'),
      ('returned', 'return s', 'escaping-state'),
  )
  def test_other_reads_say_why(self, body, code):
    found, accesses, reason = self._reads(body + '\n')
    self.assertEqual((found, accesses, reason[0]), (None, [], code))

  def test_a_state_assigned_twice_is_unknown(self):
    _, _, reason = self._reads("s = {}\nprint(s['h'])\n")
    self.assertEqual(reason, ('state-use', 's is assigned more than once'))


if __name__ == '__main__':
  absltest.main()
