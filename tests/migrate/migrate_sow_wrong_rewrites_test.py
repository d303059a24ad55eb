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
"""The two wrong rewrites found on real code, as fixtures that are run.

1. A growing NCA built on a library's modules (``testdata/library/nca_lib``,
   shaped as CAX: the update's ``nnx.List`` under ``nnx.vmap`` and
   ``nnx.scan``), popped after ``nnx.split_rngs(nnx.vmap(...))``: Flax
   0.12.8's ``nnx.capture`` raises on it, so for that capture the pop stays;
   for ``capture_compat``'s it is rewritten, and the rewrite returns
   bitwise what the pop did.
2. An attention module held once by each block of an ``nnx.List``: its
   values are three (one per block path); the functional target keeps its
   ``Module.sow``, and the default target's capture returns bitwise what
   the pop did.

The oracle is the original program, run next to the migrated one; each
test also runs the rewrite the codemod refuses, to show it would be wrong.
"""

import contextlib
import os
import sys
import textwrap
import warnings

import jax
import numpy as np
import codemod_testing
import sow_layout
import sow_legacy
from absl.testing import absltest
from flax import nnx
from flax.nnx import capture_compat
from flax.nnx.sow import capture as functional_capture

codemod_testing.require_libcst()

cli = sow_layout.test_module('migrate_sow_test')
ms = cli.ms
decide = codemod_testing.codemod_module('decide')
analysis = codemod_testing.codemod_module('analysis')
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testdata')
LIBRARY = os.path.join(DATA, 'library')
NCA = os.path.join(DATA, 'capture', 'flag_library_hazard.input.py')
NESTED = os.path.join(DATA, 'functional', 'flag_multi_instance_nested.input.py')


@contextlib.contextmanager
def _library_importable():
  """nca_lib importable, as if installed; sys.path and sys.modules restored."""
  path, modules = list(sys.path), dict(sys.modules)
  sys.path.insert(0, LIBRARY)
  try:
    yield
  finally:
    sys.path[:] = path
    for name in set(sys.modules) - set(modules):
      if name == 'nca_lib' or name.startswith('nca_lib.'):
        del sys.modules[name]


def _exec(code: str) -> dict:
  namespace = {}
  with warnings.catch_warnings():
    # The legacy pop pattern sows outside nnx.capture, deprecated.
    warnings.simplefilter('ignore', DeprecationWarning)
    exec(compile(code, '<fixture>', 'exec'), namespace)  # pylint: disable=exec-used
  return namespace


def _leaves(state) -> dict:
  """{path: array} of a State, for a bitwise comparison."""
  return {tuple(str(k) for k in path): np.asarray(leaf)
          for path, leaf in jax.tree_util.tree_leaves_with_path(state)}


class LibraryHazardTest(absltest.TestCase):
  """Case 1: the hazard is in a library's class."""

  def setUp(self):
    super().setUp()
    self.source = cli.read(NCA)

  def _rollout(self, code):
    with _library_importable(), warnings.catch_warnings():
      warnings.simplefilter('ignore', DeprecationWarning)
      namespace = _exec(code)
      cs, state = namespace['make']()
      final, states = namespace['rollout'](cs, state, 3)
      return np.asarray(final), _leaves(states)

  def test_for_flax_0_12_8s_capture_the_pop_stays(self):
    migrated, flags = ms.migrate_source(
        self.source, target='capture', nnx_capture='legacy', path='nca.py',
        search_path=[LIBRARY])
    self.assertEqual(migrated, self.source)
    (flag,) = flags
    self.assertEqual(flag.code, 'capture-hazard')
    self.assertIn('NCAUpdate holds an nnx.List', flag.detail)

  def test_the_command_line_follows_the_library_too(self):
    with cli.tempfile.TemporaryDirectory() as project:
      path = cli.write(project, 'nca.py', self.source)
      cli.write(project, 'pyproject.toml', '')
      code, summary, out, err = cli.run(
          [path], target='capture', nnx_capture='legacy',
          search_path=[LIBRARY])
    self.assertEqual(code, ms.EXIT_OK)
    self.assertEqual(out, '')
    self.assertIn('capture-hazard: NCAUpdate holds an nnx.List', err)
    # The library's own sow is not the project's: not counted nor reported.
    self.assertEqual(summary.sites, 1)

  def test_a_library_that_cannot_be_read_is_a_hazard(self):
    migrated, flags = ms.migrate_source(
        self.source, target='capture', nnx_capture='legacy', path='nca.py',
        search_path=[])
    self.assertEqual(migrated, self.source)
    self.assertEqual([f.code for f in flags], ['capture-hazard'])
    self.assertIn('may hold ComplexSystem, which the codemod could not '
                  'resolve to a class it has read', flags[0].detail)

  def test_for_capture_compat_the_rewrite_returns_the_same_values(self):
    migrated, flags = ms.migrate_source(
        self.source, target='capture', nnx_capture='transform',
        path='nca.py', search_path=[LIBRARY])
    self.assertEmpty(flags)
    self.assertNotIn('nnx.pop', migrated)
    final, states = self._rollout(self.source)
    # One value per sow: the states of 3 steps of each of the 2 examples.
    self.assertEqual(next(iter(states.values())).shape, (2, 3, 4, 4, 3))
    with capture_compat.install():
      new_final, new_states = self._rollout(migrated)
    np.testing.assert_array_equal(new_final, final)
    self.assertEqual(new_states.keys(), states.keys())
    for key, value in states.items():
      np.testing.assert_array_equal(new_states[key], value, err_msg=key)

  def test_the_refused_rewrite_raises_on_flax_0_12_8s_capture(self):
    # What the codemod did before it read the library: this rewrite, run on
    # Flax 0.12.8's nnx.capture.
    migrated, _ = ms.migrate_source(
        self.source, target='capture', nnx_capture='transform',
        path='nca.py', search_path=[LIBRARY])
    # Skips in Flax's tree with the series, whose nnx.capture is not 0.12.8's.
    with sow_legacy.flax_methods():
      with self.assertRaisesRegex(ValueError, 'Comparator raised exception'):
        self._rollout(migrated)


class NestedInstancesTest(absltest.TestCase):
  """Case 2: one Attention per Block, the Blocks made in a loop."""

  def setUp(self):
    super().setUp()
    self.source = cli.read(NESTED)

  def _maps(self, code, x):
    namespace = _exec(code)
    model = namespace['Transformer'](4, 3, rngs=nnx.Rngs(0))
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', DeprecationWarning)
      y, maps = namespace['attention_maps'](model, x)
    return np.asarray(y), _leaves(maps), namespace, model

  def test_instances_are_counted_through_holders(self):
    parsed = analysis.analyse('nested.py', self.source.encode(), DATA)
    units = parsed.units
    project = decide.Project([s for u in units for s in u.facts.sites],
                             [c for u in units for c in u.facts.classes],
                             [o for u in units for o in u.facts.others])
    (root,) = (c for c in project.classes if c.endswith('.Transformer'))
    (attention,) = (c for c in project.classes if c.endswith('.Attention'))
    (block,) = (c for c in project.classes if c.endswith('.Block'))
    counts = project.instance_counts(root)
    self.assertEqual(counts[block], 2)  # many
    self.assertEqual(counts[attention], 2)  # one per block: many too
    self.assertEqual(project.instance_counts(block)[attention], 1)

  def test_the_functional_target_keeps_the_sow(self):
    migrated, flags = ms.migrate_source(self.source, target='functional',
                                        path='nested.py')
    self.assertEqual(migrated, self.source)
    self.assertIn('multi-instance', {f.code for f in flags})

  def test_a_module_passed_in_may_be_a_submodule(self):
    # Wrapper(Model()) would name Model's values inner/h: a free sow, h.
    source = textwrap.dedent('''\
        from flax import nnx


        class Model(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'h', x)
            return x


        class Wrapper(nnx.Module):

          def __init__(self, inner):
            self.inner = inner


        def run(x):
          y, s = nnx.capture(Model(), nnx.Intermediate)(x)
          return s['h'][0]
        ''')
    migrated, flags = ms.migrate_source(source, target='functional',
                                        path='wrapped.py')
    self.assertEqual(migrated, source)
    self.assertIn(('module-path', 'Wrapper holds modules passed in, which '
                   'may be a Model'),
                  {(f.code, f.detail[:53]) for f in flags})
    # Holding a module it makes itself, Wrapper cannot hold a Model.
    made = source.replace('self.inner = inner',
                          'self.inner = nnx.Linear(2, 2, rngs=nnx.Rngs(0))')
    migrated, flags = ms.migrate_source(made, target='functional',
                                        path='wrapped.py')
    self.assertEmpty(flags)
    self.assertIn("sow(x, name='h')", migrated)

  def test_the_default_target_captures_the_same_values(self):
    migrated, flags = ms.migrate_source(self.source, path='nested.py')
    self.assertEmpty(flags)
    self.assertIn('y, maps = nnx.capture(model, nnx.Intermediate)(x)',
                  migrated)
    self.assertIn("self.sow(nnx.Intermediate, 'attn_weights', w)", migrated)
    x = np.linspace(-1.0, 1.0, 20, dtype=np.float32).reshape(5, 4)
    y, maps, _, _ = self._maps(self.source, x)
    self.assertLen(maps, 3)  # blocks/{0,1,2}/attn/attn_weights
    for install in (False, True):
      with capture_compat.install() if install else contextlib.nullcontext():
        new_y, new_maps, _, _ = self._maps(migrated, x)
      np.testing.assert_array_equal(new_y, y)
      self.assertEqual(new_maps.keys(), maps.keys())
      for key, value in maps.items():
        np.testing.assert_array_equal(new_maps[key], value, err_msg=key)

  def test_the_refused_free_sow_merges_the_three_blocks(self):
    # What the functional target did before counting through holders.
    wrong = self.source.replace(
        "self.sow(nnx.Intermediate, 'attn_weights', w)",
        "sow(w, name='attn_weights')").replace(
            'from flax import nnx\n',
            'from flax import nnx\nfrom flax.nnx.sow import sow\n')
    x = np.linspace(-1.0, 1.0, 20, dtype=np.float32).reshape(5, 4)
    _, maps, _, _ = self._maps(self.source, x)
    wrong_namespace = _exec(wrong)
    wrong_model = wrong_namespace['Transformer'](4, 3, rngs=nnx.Rngs(0))
    _, merged = functional_capture(wrong_model)(x)
    self.assertEqual(list(merged), ['attn_weights'])
    self.assertLen(merged['attn_weights'], 3)  # one flat tuple of three
    self.assertLen(maps, 3)  # where the legacy State had three paths


if __name__ == '__main__':
  absltest.main()
