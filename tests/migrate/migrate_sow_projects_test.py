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
"""Projects of several files whose facts are spread over files without sows.

``testdata/projects/NAME/`` is a project (``project_testing.py``), migrated
with the command and run before and after in fresh processes:

1. ``holder_elsewhere``: ``block.py`` sows, ``model.py`` (no sow, no reader)
   holds two Blocks. The functional target must keep the sow
   (``multi-instance``): a free sow merges ``a/out`` and ``b/out``.
2. ``passed_in``: ``layer.py``'s ``DecoderLayer`` sows and holds a module
   passed in (``A`` of ``attn.py``). A second ``--write`` run must change
   nothing: after the first, ``layer.py`` has no ``Module.sow`` left, and
   ``A``'s sow must still be kept.

3. ``nca_unread``: a growing NCA subclassing a library's system
   (``testdata/library/nca_lib``, shaped as CAX: an ``nnx.List`` under
   ``nnx.vmap`` and ``nnx.scan``), popped in a function that takes it
   unannotated, migrated where the library is not installed: its classes
   cannot be read, so for Flax 0.12.8's ``nnx.capture`` the pop stays
   (``capture-hazard``), as it does where the library is installed.

4. ``kept_perturb``: ``main.py``'s ``Model`` sows at its root and holds
   ``block.py``'s ``Block``, whose ``Module.perturb`` stays
   (``module-path``); ``nnx.capture(model, nnx.Intermediate)`` does not
   read it, but the functional ``capture`` it would become runs it, and
   Flax 0.12.8's own ``Module.perturb`` raises there. For that Flax the
   functional target keeps the capture (``kept-module-sow``); with
   ``--nnx-capture=transform`` it rewrites it, and the rewrite, run with
   ``capture_compat`` installed, returns bitwise what the original did.

Each test also runs the rewrite the codemod refuses (what it did when only
files that sow or pop were analysed), to show that it changes what the
model sows.
"""

import os
import shutil
import tempfile

import numpy as np
import codemod_testing
import project_testing
import sow_layout
import sow_legacy
from absl.testing import absltest

codemod_testing.require_libcst()

cli = sow_layout.test_module('migrate_sow_test')
ms = cli.ms
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testdata')
PROJECTS = os.path.join(DATA, 'projects')
LIBRARY = os.path.join(DATA, 'library')


class ProjectTest(absltest.TestCase):

  def _copy(self, name: str) -> str:
    directory = os.path.join(
        self.enter_context(tempfile.TemporaryDirectory()), name)
    shutil.copytree(os.path.join(PROJECTS, name), directory)
    cli.write(directory, 'pyproject.toml', '')
    return directory

  def _migrate(self, directory, **kwargs):
    code, summary, out, err = cli.run([directory], mode='write', **kwargs)
    self.assertEqual(code, ms.EXIT_OK, msg=err)
    return summary, err

  def test_a_holder_in_a_file_without_sows_keeps_the_sow(self):
    directory = self._copy('holder_elsewhere')
    before = project_testing.execute(directory)
    self.assertEqual(
        {k for k in before if k.startswith('names')},
        {"names['a/out'][0]", "names['b/out'][0]"})
    summary, err = self._migrate(directory, target='functional')
    # Every file of the project with a class that may hold Block was read.
    self.assertEqual(summary.analysed, 2)  # block.py and model.py
    self.assertIn("block.py:11:5: multi-instance: 'out' is sown by several "
                  'instances in Model (Block)', err)
    self.assertEqual(project_testing.read(directory)['block.py'],
                     cli.read(os.path.join(PROJECTS, 'holder_elsewhere',
                                           'block.py')))
    self.assertEmpty(project_testing.differences(
        before, project_testing.execute(directory)))

  def test_the_refused_rewrite_merges_the_two_blocks(self):
    directory = self._copy('holder_elsewhere')
    before = project_testing.execute(directory)
    block = os.path.join(directory, 'block.py')
    # block.py alone, as the codemod saw it when it read only the files
    # that sow or pop.
    wrong, flags = ms.migrate_source(cli.read(block), target='functional',
                                     path='block.py')
    self.assertEmpty(flags)
    cli.write(directory, 'block.py', wrong)
    after = project_testing.execute(directory)
    self.assertEqual({k for k in after if k.startswith('names')},
                     {"names['out'][0]", "names['out'][1]"})
    self.assertNotEmpty(project_testing.differences(before, after))

  def test_a_second_run_changes_nothing(self):
    directory = self._copy('passed_in')
    before = project_testing.execute(directory)
    self.assertEqual({k for k in before if k.startswith('names')},
                     {"names['attn/attn'][0]", "names['h'][0]"})
    _, err = self._migrate(directory, target='functional')
    self.assertIn('attn.py:11:5: module-path: DecoderLayer holds modules '
                  'passed in, which may be a A', err)
    first = project_testing.read(directory)
    self.assertIn("sow(y, name='h')", first['layer.py'])
    self.assertIn("self.sow(nnx.Intermediate, 'attn', y)", first['attn.py'])
    self.assertEmpty(project_testing.differences(
        before, project_testing.execute(directory)))
    summary, err = self._migrate(directory, target='functional')
    self.assertEqual(project_testing.read(directory), first)
    self.assertEqual(summary.changed, 0)
    self.assertIn('attn.py:11:5: module-path: DecoderLayer holds modules '
                  'passed in', err)

  def test_the_second_runs_old_rewrite_loses_the_module_path(self):
    directory = self._copy('passed_in')
    before = project_testing.execute(directory)
    self._migrate(directory, target='functional')
    attn = os.path.join(directory, 'attn.py')
    wrong, _ = ms.migrate_source(cli.read(attn), target='functional',
                                 path='attn.py')
    cli.write(directory, 'attn.py', wrong)
    after = project_testing.execute(directory)
    self.assertIn("names['attn'][0]", after)
    self.assertNotIn("names['attn/attn'][0]", after)
    self.assertNotEmpty(project_testing.differences(before, after))

  def test_a_kept_module_perturb_keeps_the_functional_capture(self):
    directory = self._copy('kept_perturb')
    original = project_testing.read(directory)
    before = project_testing.execute(directory, compat='both')
    self.assertFalse([k for k in before if k.endswith('raised')], before)
    self.assertEqual({k for k in before if k.startswith('names')},
                     {"names['h'][0]", "names['block/grad_out'][0]"})
    summary, err = self._migrate(directory, target='functional',
                                 nnx_capture='legacy')
    self.assertEqual(summary.changed, 0, msg=err)
    self.assertEqual(project_testing.read(directory), original)
    self.assertIn(
        'main.py:24:15: kept-module-sow: the functional capture that '
        'nnx.capture would become runs the Module.perturb at block.py:11, '
        'which stays (module-path)', err)
    self.assertIn('main.py:14:5: legacy-reader: linked to the capture at '
                  'main.py:24', err)
    self.assertEqual(summary.flagged['kept-module-sow'], 1)
    # A second run changes nothing either.
    summary, _ = self._migrate(directory, target='functional',
                               nnx_capture='legacy')
    self.assertEqual(summary.changed, 0)

  def test_for_capture_compat_the_functional_capture_migrates(self):
    directory = self._copy('kept_perturb')
    before = project_testing.execute(directory)
    summary, err = self._migrate(directory, target='functional',
                                 nnx_capture='transform')
    self.assertNotIn('kept-module-sow', err)
    self.assertEqual(summary.rewritten['capture'], 1, msg=err)
    main = project_testing.read(directory)['main.py']
    self.assertIn('y, states = capture(model)(x)', main)
    self.assertIn("sow(h, name='h')", main)
    # Run where Module.perturb is a site of the transform: the same values.
    after = project_testing.execute(directory, compat=True)
    self.assertEmpty(project_testing.differences(before, after))
    after = project_testing.execute(directory)
    if sow_legacy.is_available():  # Flax 0.12.8's own Module.perturb is run
      # The refusal for Flax 0.12.8's own is right: there it raises.
      self.assertIn('Module.sow (or Module.perturb) was called inside a '
                    'functional capture', after['run/raised'])
      self.assertIn('capture_compat.install()', after['run/raised'])
    else:  # Flax's own is built on the transform (the series): it runs
      self.assertEmpty(project_testing.differences(before, after))

  def test_a_library_not_installed_is_a_hazard(self):
    directory = self._copy('nca_unread')
    before = project_testing.execute(directory, libraries=[LIBRARY])
    self.assertFalse([k for k in before if k.endswith('raised')])
    self.assertEqual(before['run[1]'].shape, (2, 3, 4, 4, 3))
    for search_path, why in (
        ([], 'it may hold ComplexSystem, which the codemod could not resolve '
         'to a class it has read'),
        ([LIBRARY], "it may hold the project's NCAUpdate, which holds an "
         'nnx.List, under nnx.vmap')):
      code, summary, out, err = cli.run(
          [directory], mode='write', target='capture', nnx_capture='legacy',
          search_path=search_path)
      self.assertEqual((code, out, summary.changed), (ms.EXIT_OK, '', 0),
                       msg=err)
      self.assertIn('train.py:13:12: capture-hazard: the class of the popped '
                    f'object is not known; {why}', err)
    self.assertEmpty(project_testing.differences(
        before, project_testing.execute(directory, libraries=[LIBRARY])))

  def test_the_refused_rewrite_raises_on_flax_0_12_8s_capture(self):
    directory = self._copy('nca_unread')
    before = project_testing.execute(directory, libraries=[LIBRARY])
    # For capture_compat's nnx.capture the pop migrates where the library
    # is read (where it is not, what it sows is not known: unknown-type),
    # with the same values; the same rewrite raises on Flax 0.12.8's.
    code, summary, _, err = cli.run(
        [directory], target='capture', nnx_capture='transform',
        search_path=[])
    self.assertEqual((code, summary.changed), (ms.EXIT_OK, 0), msg=err)
    self.assertIn('train.py:13:12: unknown-type: it may pop what '
                  'ComplexSystem sows', err)
    code, summary, _, err = cli.run(
        [directory], mode='write', target='capture', nnx_capture='transform',
        search_path=[LIBRARY])
    self.assertEqual((code, summary.changed), (ms.EXIT_OK, 1), msg=err)
    self.assertIn('nnx.capture(', project_testing.read(directory)['train.py'])
    self.assertEmpty(project_testing.differences(
        before, project_testing.execute(directory, compat=True,
                                        libraries=[LIBRARY])))
    after = project_testing.execute(directory, libraries=[LIBRARY])
    if sow_legacy.is_available():  # Flax 0.12.8's own nnx.capture is run
      self.assertIn('Comparator raised exception', after['run/raised'])
    else:  # nnx.capture is built on the transform: the rewrite runs
      self.assertEmpty(project_testing.differences(before, after))

  def test_a_popped_object_of_an_unread_class_is_a_hazard(self):
    source = cli.textwrap.dedent('''\
        from flax import nnx
        from nca_lib import ComplexSystem


        def rollout(cs: ComplexSystem, state):
          final = cs(state, num_steps=2, sow=True)
          states = nnx.pop(cs, nnx.Intermediate)
          return final, states
        ''')
    for search_path, code in (([], 'capture-hazard'), ([LIBRARY], None)):
      migrated, flags = ms.migrate_source(
          source, nnx_capture='legacy', path='roll.py',
          search_path=search_path)
      if code is None:  # read where installed: judged by what it is
        self.assertNotIn('could not resolve', ' '.join(f.detail
                                                       for f in flags))
        continue
      self.assertEqual(migrated, source)
      self.assertEqual([(f.code, f.detail[:47]) for f in flags],
                       [(code, 'the popped object is a ComplexSystem, which '
                         'the')])

  def _migrates_with_the_same_values(self, name: str) -> str:
    """Migrates the project ``name`` for Flax 0.12.8's nnx.capture: its pop
    becomes a capture, which returns bitwise what the pop did (the oracle:
    the original project, run before). Returns the migrated main.py."""
    directory = self._copy(name)
    before = project_testing.execute(directory)
    self.assertFalse([k for k in before if k.endswith('raised')], before)
    summary, err = self._migrate(directory, target='capture',
                                 nnx_capture='legacy')
    self.assertNotIn('capture-hazard', err)
    self.assertEqual(summary.rewritten['pop'], 1, msg=err)
    main = project_testing.read(directory)['main.py']
    self.assertIn('y, states = nnx.capture(model, nnx.Intermediate)(x)', main)
    after = project_testing.execute(directory)
    self.assertEmpty(project_testing.differences(before, after))
    self.assertTrue([k for k in after if k.startswith("run['states']")])
    return main

  def test_self_passed_to_a_method_that_only_sows_is_no_hazard(self):
    # Flax's examples/gemma: `self.sow_config.maybe_sow_*(x, self)`, the
    # method only calling `module.sow(...)`; the model holds an nnx.List.
    self._migrates_with_the_same_values('sow_through_config')

  def test_an_any_attribute_with_a_value_default_is_no_module(self):
    # Flax's examples/gemma: `dtype: Any = jnp.float32` kept as an
    # attribute, and `self.bias = None`; another class of the project holds
    # an nnx.List under jax.vmap, which the model was taken to hold.
    self._migrates_with_the_same_values('any_dtype')

  def test_self_passed_to_a_method_that_flattens_it_stays_a_hazard(self):
    directory = os.path.join(self.enter_context(tempfile.TemporaryDirectory()),
                             'flattens')
    source = cli.textwrap.dedent('''\
        import dataclasses

        import jax
        import jax.numpy as jnp
        from flax import nnx


        @dataclasses.dataclass(frozen=True)
        class Config:

          def total(self, module):
            return sum(jnp.sum(v) for v in jax.tree.leaves(nnx.state(module)))


        class Model(nnx.Module):

          def __init__(self, rngs):
            self.blocks = nnx.List([nnx.Linear(2, 2, rngs=rngs)
                                    for _ in range(2)])
            self.config = Config()

          def __call__(self, x):
            for block in self.blocks:
              x = block(x)
            self.sow(nnx.Intermediate, 'total', self.config.total(self))
            return x


        def build():
          return Model(nnx.Rngs(0)), jnp.ones((3, 2))


        def run():
          model = Model(nnx.Rngs(0))
          x = jnp.ones((3, 2))
          y = model(x)
          states = nnx.pop(model, nnx.Intermediate)
          return {'y': y, 'states': states}
        ''')
    migrated, flags = ms.migrate_source(source, target='capture',
                                        nnx_capture='legacy', path='main.py')
    self.assertEqual(migrated, source)
    self.assertIn(('capture-hazard', 'Model holds an nnx.List and the model '
                   'runs under a function it passes self to'),
                  [(f.code, f.detail.split(':')[0]) for f in flags])
    # The refusal is right: with Flax 0.12.8's own nnx.capture, the capture
    # written by hand raises there. Where nnx.capture is built on the sow
    # transform (Flax's tree with the series) it runs.
    legacy = sow_legacy.is_available()
    by_hand = source.replace(
        '  y = model(x)\n  states = nnx.pop(model, nnx.Intermediate)\n',
        '  y, states = nnx.capture(model, nnx.Intermediate)(x)\n')
    self.assertNotEqual(by_hand, source)
    for text, raised in ((source, False), (by_hand, legacy)):
      project_testing.write(directory, {'main.py': text})
      observed = project_testing.execute(directory)
      self.assertEqual('run/raised' in observed, raised, observed)
    if legacy:
      self.assertIn('Comparator raised exception', observed['run/raised'])

  def test_an_any_attribute_without_a_default_may_hold_a_module(self):
    source = cli.read(os.path.join(PROJECTS, 'any_dtype', 'norm.py')).replace(
        'dtype: Any = jnp.float32', 'dtype: Any')
    source += cli.read(os.path.join(PROJECTS, 'any_dtype', 'main.py')).replace(
        'from norm import Norm\n', '').replace('Norm(2)', 'Norm(2, dtype=0)')
    migrated, flags = ms.migrate_source(source, target='capture',
                                        nnx_capture='legacy', path='main.py')
    self.assertEqual(migrated, source)
    self.assertIn('capture-hazard', [f.code for f in flags])

  def test_a_computed_getattr_in_a_file_without_the_apis_is_reported(self):
    # Found by the fuzzer: a file naming none of the APIs was read only for
    # attribute reads of sown names, so getattr(model.a, name) was silent.
    directory = self._copy('holder_elsewhere')
    cli.write(directory, 'read.py', """\
        from model import Model


        def read(model: Model, x, name):
          model(x)
          return getattr(model.a, name).value[0]
        """)
    for target in ('capture', 'functional'):
      code, _, _, err = cli.run([directory], target=target)
      self.assertEqual(code, ms.EXIT_OK, msg=err)
      self.assertIn("read.py:6:10: may-read: getattr(model.a, name) reads an "
                    "attribute whose name is computed: it may read 'out'", err)

  def test_the_holder_of_a_holder_is_found_too(self):
    # block.py sows; mid.py holds a Block, model.py two Mids: neither sows.
    directory = self._copy('holder_elsewhere')
    cli.write(directory, 'mid.py', """\
        from flax import nnx

        from block import Block


        class Mid(nnx.Module):

          def __init__(self, rngs):
            self.block = Block(rngs)

          def __call__(self, x):
            return self.block(x)
        """)
    cli.write(directory, 'model.py', """\
        from flax import nnx

        from mid import Mid


        class Model(nnx.Module):

          def __init__(self, rngs):
            self.a = Mid(rngs)
            self.b = Mid(rngs)

          def __call__(self, x):
            return self.b(self.a(x))
        """)
    summary, err = self._migrate(directory, target='functional')
    self.assertEqual((summary.analysed, summary.changed), (3, 0))
    self.assertIn("block.py:11:5: multi-instance: 'out' is sown by several "
                  'instances in Model', err)

  def _on_a_library(self, block: str, imported: str, run_body: str):
    """The ``holder_elsewhere`` project with its block moved into a library
    (``fuzzlib.block0``, ``block`` its source, imported as ``from
    fuzzlib.block0 import <imported>``) and ``run``'s return replaced by
    ``run_body``; returns the library's and the project's directories."""
    scratch = self.enter_context(tempfile.TemporaryDirectory())
    library, directory = (os.path.join(scratch, d) for d in ('lib', 'proj'))
    cli.write(library, 'fuzzlib/__init__.py', '')
    cli.write(library, 'fuzzlib/block0.py', block)
    source = lambda name: cli.read(os.path.join(PROJECTS, 'holder_elsewhere',
                                                name))
    project_testing.write(directory, {
        'pyproject.toml': '',
        'model.py': source('model.py').replace(
            'from block import Block',
            f'from fuzzlib.block0 import {imported}'),
        'main.py': source('main.py').replace("  return {'y': model(x)}",
                                             run_body),
    })
    return library, directory

  def test_a_library_perturb_keeps_the_pop(self):
    # Found by the fuzzer (seed 4801): the model's file names no API, its
    # block is a library's and perturbs; run() pops an object of unknown
    # class. The library was never read, and the pop (which collects the
    # Perturbation) became a capture (which does not).
    library, directory = self._on_a_library("""\
        from flax import nnx


        class Block0(nnx.Module):

          def __init__(self, rngs):
            self.linear = nnx.Linear(2, 2, rngs=rngs)

          def __call__(self, x):
            return self.perturb('h', self.linear(x))
        """, 'Block0 as Block',
        '  y = model(x)\n  s = nnx.pop(model, nnx.Intermediate)\n'
        "  return {'y': y, 's': s}")
    before = project_testing.execute(directory, libraries=[library])
    self.assertIn("run['s']['a']['h'].value", before)
    for capture, search_path, code in (
        ('legacy', [library], 'perturbation'),
        ('transform', [library], 'perturbation'),
        ('legacy', [], 'capture-hazard'),
        ('transform', [], 'unknown-type')):
      exit_code, _, out, err = cli.run(
          [directory], nnx_capture=capture, search_path=search_path)
      self.assertEqual((exit_code, out), (ms.EXIT_OK, ''), msg=err)
      self.assertIn(f'main.py:14:7: {code}: ', err)
    # The rewrite it refuses loses the perturbation's values.
    main = os.path.join(directory, 'main.py')
    cli.write(directory, 'main.py', cli.read(main).replace(
        '  y = model(x)\n  s = nnx.pop(model, nnx.Intermediate)\n',
        '  y, s = nnx.capture(model, nnx.Intermediate)(x)\n'))
    after = project_testing.execute(directory, libraries=[library])
    self.assertNotIn("run['s']['a']['h'].value", after)

  def test_a_library_sow_read_as_an_attribute_is_reported(self):
    # Found by the fuzzer (seed 4903): main.py names no API and reads a
    # library block's sown value; the files naming no API were searched for
    # the project's sown names before the library was read.
    library, directory = self._on_a_library(
        cli.read(os.path.join(PROJECTS, 'holder_elsewhere', 'block.py')),
        'Block', '  model(x)\n  return model.a.out.value[0]')
    code, _, _, err = cli.run([directory], search_path=[library])
    self.assertEqual(code, ms.EXIT_OK, msg=err)
    self.assertIn("main.py:14:10: attribute-read: read as an attribute, "
                  "model.a.out.value reads 'out' (sown at fuzzlib/block0.py:",
                  err)

  def test_a_library_block_passed_in_and_read_as_an_attribute(self):
    # Found by the fuzzer (round seed 102018033): the library's block is
    # made in main.py's build() (no class there) and passed to a Model that
    # keeps it; main.py reads its sown value. No class of the project names
    # the block, so the library was never read, its sown name not known,
    # and the read not reported.
    scratch = self.enter_context(tempfile.TemporaryDirectory())
    library, directory = (os.path.join(scratch, d) for d in ('lib', 'proj'))
    cli.write(library, 'fuzzlib/__init__.py', '')
    cli.write(library, 'fuzzlib/block0.py', cli.read(
        os.path.join(PROJECTS, 'holder_elsewhere', 'block.py')).replace(
            'class Block(', 'class Block0('))
    project_testing.write(directory, {
        'pyproject.toml': '',
        'layer.py': cli.read(os.path.join(PROJECTS, 'passed_in',
                                          'layer.py')),
        'main.py': cli.textwrap.dedent('''\
            import jax.numpy as jnp
            from flax import nnx
            from layer import DecoderLayer
            from fuzzlib.block0 import Block0


            def build():
              rngs = nnx.Rngs(0)
              return (DecoderLayer(Block0(rngs), rngs),
                      jnp.linspace(-1.0, 1.0, 6).reshape(3, 2))


            def run():
              model, x = build()
              model(x)
              return model.attn.out.value[0]
            '''),
    })
    directory_main = os.path.join(directory, 'main.py')
    code, _, _, err = cli.run([directory], search_path=[library])
    self.assertEqual(code, ms.EXIT_OK, msg=err)
    self.assertIn("main.py:16:10: attribute-read: read as an attribute, "
                  "model.attn.out.value reads 'out' (sown at "
                  'fuzzlib/block0.py:11)', err)
    # What it reads is the library block's sown value (by the functional
    # capture, which names it attn/out).
    observed = project_testing.execute(directory, libraries=[library])
    np.testing.assert_array_equal(observed['run'],
                                  observed["names['attn/out'][0]"])
    # Library calls are found by the cheap pass: made, and imported from an
    # installed package.
    holders = codemod_testing.codemod_module('holders')
    self.assertEqual(holders.library_calls(
        'main.py', cli.read(directory_main).encode(),
        lambda top: top == 'fuzzlib'), {'fuzzlib.block0': {'Block0'}})
    self.assertEqual(holders.library_calls(
        'main.py', b'import fuzzlib.block0 as b\nm = b.Block0(1)\n'
        b'import fuzzlib\nn = fuzzlib.nn.Linear(2)\nf = fuzzlib.f(1)\n',
        lambda top: top == 'fuzzlib'),
                     {'fuzzlib.block0': {'Block0'}, 'fuzzlib.nn': {'Linear'}})
    self.assertEqual(holders.library_calls(
        'main.py', cli.read(directory_main).encode(), lambda top: False), {})

  def test_a_pydantic_model_is_no_module(self):
    # Tunix: a pop of an object of unknown class, in a project that also
    # has pydantic models (its trajectories), migrated where pydantic is not
    # installed: a class deriving from pydantic.BaseModel is data, not a
    # suspect for the popped object.
    source = cli.textwrap.dedent('''\
        import pydantic
        from flax import nnx


        class Metrics(pydantic.BaseModel):
          loss: float = 0.0


        class Model(nnx.Module):

          def __call__(self, x):
            self.sow(nnx.Intermediate, 'h', x)
            return x


        def scores(model, x):
          y = model(x)
          states = nnx.pop(model, nnx.Intermediate)
          return y, states
        ''')
    for capture in ('legacy', 'transform'):
      migrated, flags = ms.migrate_source(source, nnx_capture=capture,
                                          path='m.py', search_path=[])
      self.assertEmpty(flags, msg=capture)
      self.assertIn('y, states = nnx.capture(model, nnx.Intermediate)(x)',
                    migrated)
    # A class of a package it cannot read that is not known to be data
    # stays a suspect.
    other = source.replace('pydantic', 'somelib')
    _, flags = ms.migrate_source(other, nnx_capture='transform',
                                 path='m.py', search_path=[])
    self.assertIn('unknown-type', [f.code for f in flags])

  def test_the_cheap_pass_finds_the_holders(self):
    holders = codemod_testing.codemod_module('holders')
    found = holders.classes('model.py', cli.read(os.path.join(
        PROJECTS, 'holder_elsewhere', 'model.py')).encode())
    self.assertEqual([(c.name, 'Block' in c.names, c.kept)
                      for c in found], [('Model', True, frozenset())])
    (layer,) = holders.classes('layer.py', cli.read(os.path.join(
        PROJECTS, 'passed_in', 'layer.py')).encode())
    self.assertEqual(layer.kept, {holders.UNANNOTATED})
    self.assertEqual(holders.holding({'layer.py': [layer]}, {},
                                     {'Module'}), {'layer.py'})
    self.assertEqual(holders.holding({'layer.py': [layer]}, {},
                                     {'Other'}), set())
    # Naming Block holds it only where Block (or its module) is imported.
    (model,) = found
    self.assertTrue(holders.holding({'model.py': [model]},
                                    {'Block': {'block'}}, {'Module'}))
    other = holders.classes('test.py', (
        b'class Model:\n  def __init__(self):\n    self.b = Block()\n'))
    self.assertFalse(holders.holding({'test.py': other},
                                     {'Block': {'block'}}, {'Module'}))
    # A test case naming (and importing) Block holds no Block.
    case = holders.classes('m_test.py', (
        b'from block import Block\n'
        b'class T(absltest.TestCase):\n  def test(self):\n'
        b'    self.b = Block()\n'))
    self.assertFalse(holders.holding({'m_test.py': case},
                                     {'Block': {'block'}}, {'Module'}))
    made = holders.classes('m.py', (
        b'class M(nnx.Module):\n'
        b'  def __init__(self, rngs):\n'
        b'    self.l = nnx.Linear(2, 2, rngs=rngs)\n'
        b'    self.xs = nnx.List([])\n'))
    self.assertFalse(made[0].kept)  # rngs is passed on, not kept
    kept = holders.classes('m.py', (
        b'class M(nnx.Module):\n'
        b'  def __init__(self, *layers):\n'
        b'    self.layers = nnx.List(layers)\n'))
    self.assertEqual(kept[0].kept, {holders.UNANNOTATED})
    # Kept, but annotated as no module: an int, a function, a config.
    plain = holders.classes('m.py', (
        b'class M(nnx.Module):\n'
        b'  def __init__(self, n: int, f: Callable[[Block], int],\n'
        b'               config: Config, inner: Block | None):\n'
        b'    self.n = n\n    self.f = f\n    self.config = config\n'
        b'    self.inner = inner\n'))
    self.assertEqual(plain[0].kept, {'Config', 'Block'})
    self.assertFalse(holders.holding({'m.py': plain}, {}, {'Module'}))
    self.assertTrue(holders.holding({'m.py': plain}, {},
                                    {'Module', 'Block'}))


if __name__ == '__main__':
  absltest.main()
