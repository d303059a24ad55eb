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
"""The codemod on real code: migrated code runs and returns the same values.

Needs checkouts of public repositories (nothing of them is committed here):
``FLAX_SOW_REPOS`` (or ``FLAX_SOW_MODELS_FROM``, the directory the parity
tests use) holding ``cax`` (maxencefaldor/cax) and ``tunix`` (google/tunix).
Without them these tests skip. Each test copies what it migrates to a
temporary folder, runs the command-line codemod there with ``--write``, then
executes the original and the migrated code side by side; the two run the
same operations, so their values must be bitwise equal.
"""

import ast
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
import sow_layout

import flax

_ROOT = sow_layout.ROOT
sys.path.append(os.path.join(_ROOT, 'scripts', 'migrate'))
import migrate_sow as ms  # pylint: disable=g-import-not-at-top,wrong-import-position

sys.path.remove(os.path.join(_ROOT, 'scripts', 'migrate'))

_FENCE = re.compile(r'^```python\n(.*?)^```', re.MULTILINE | re.DOTALL)


def _repo(name):
  for variable in ('FLAX_SOW_REPOS', 'FLAX_SOW_MODELS_FROM'):
    base = os.environ.get(variable)
    if base and os.path.isdir(os.path.join(base, name)):
      return os.path.join(base, name)
  raise absltest.SkipTest(f'no checkout of {name}: set FLAX_SOW_REPOS')


def _migrate(directory, paths, target, nnx_capture='legacy'):
  out, err = io.StringIO(), io.StringIO()
  code, summary = ms.run(paths, target=target, mode='write', root=directory,
                         out=out, err=err, nnx_capture=nnx_capture)
  return code, summary, err.getvalue()


@contextlib.contextmanager
def _importable(path):
  """``path`` on sys.path for the block; its modules forgotten after."""
  before = set(sys.modules)
  sys.path.insert(0, path)
  try:
    with warnings.catch_warnings():
      # The legacy code warns that Module.sow runs outside nnx.capture.
      warnings.simplefilter('ignore', DeprecationWarning)
      yield
  finally:
    sys.path.remove(path)
    for name in set(sys.modules) - before:
      if name.split('.')[0] in ('cax',):
        del sys.modules[name]


def _assert_bitwise(test, left, right):
  left_leaves, left_tree = jax.tree.flatten(left)
  right_leaves, right_tree = jax.tree.flatten(right)
  test.assertEqual(left_tree, right_tree)
  test.assertNotEmpty(left_leaves)
  for a, b in zip(left_leaves, right_leaves):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


class CaxReadmeTest(absltest.TestCase):

  def test_readme_example_migrated_to_capture_returns_the_same_states(self):
    cax = _repo('cax')
    scratch = self.enter_context(tempfile.TemporaryDirectory())
    copy = os.path.join(scratch, 'cax')
    shutil.copytree(cax, copy, ignore=shutil.ignore_patterns('.git',
                                                             'examples'))
    readme = os.path.join(copy, 'README.md')
    with open(readme, encoding='utf-8') as f:
      original = _FENCE.findall(f.read())[0]
    code, summary, err = _migrate(copy, [readme], 'capture')
    self.assertEqual(code, 0, msg=err)
    self.assertEqual(summary.rewritten['pop'], 1, msg=err)
    with open(readme, encoding='utf-8') as f:
      migrated = _FENCE.findall(f.read())[0]
    self.assertIn('nnx.capture(cs, nnx.Intermediate)(state_init', migrated)
    self.assertNotIn('nnx.pop', migrated)
    results = []
    with _importable(os.path.join(cax, 'src')):
      for source in (original, migrated):
        namespace = {}
        exec(compile(source, 'README.md', 'exec'), namespace)  # pylint: disable=exec-used
        results.append((namespace['state_final'], namespace['states']))
    _assert_bitwise(self, results[0], results[1])

  def test_notebook_vmap_cells_migrated_to_capture_return_the_same_states(
      self):
    # CAX's examples/00_getting_started.ipynb: a batch of Life runs through
    # nnx.split_rngs(nnx.vmap(...)) in one cell, nnx.pop in the next. Those
    # two cells (their text, unchanged) are migrated as a notebook of their
    # own and run with CAX's Life, before and after.
    cax = _repo('cax')
    with open(os.path.join(cax, 'examples', '00_getting_started.ipynb'),
              encoding='utf-8') as f:
      cells = [c for c in json.load(f)['cells'] if c['cell_type'] == 'code']
    sources = [''.join(c['source']) for c in cells]
    call = next(i for i, text in enumerate(sources)
                if 'split_rngs(splits=num_simulations)' in text)
    pair = sources[call:call + 2]
    self.assertIn('nnx.pop(cs, nnx.Intermediate)', pair[1])
    scratch = self.enter_context(tempfile.TemporaryDirectory())
    with open(os.path.join(scratch, 'pyproject.toml'), 'w') as f:
      f.write('[project]\nname = "copy"\n')
    notebook = os.path.join(scratch, 'cells.ipynb')
    with open(notebook, 'w', encoding='utf-8') as f:
      json.dump({'cells': [
          {'cell_type': 'code', 'metadata': {}, 'outputs': [],
           'execution_count': None, 'source': text} for text in
          ['from flax import nnx\n'] + pair],
                 'metadata': {}, 'nbformat': 4, 'nbformat_minor': 5}, f)
    code, summary, err = _migrate(scratch, [notebook], 'capture')
    self.assertEqual(code, 0, msg=err)
    self.assertEqual(summary.rewritten['pop'], 1, msg=err)
    with open(notebook, encoding='utf-8') as f:
      migrated = [''.join(c['source']) for c in json.load(f)['cells']][1:]
    self.assertIn('state_final, intermediates = nnx.capture(', migrated[0])
    self.assertNotIn('nnx.pop', migrated[1])

    from flax import nnx  # pylint: disable=g-import-not-at-top
    from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top
    results = []
    with _importable(os.path.join(cax, 'src')):
      from cax.cs.life import Life  # pylint: disable=g-import-not-at-top
      for version, install in ((pair, False), (migrated, False),
                               (migrated, True)):
        birth, survival = Life.birth_survival_from_string('B3/S23')
        namespace = {
            'nnx': nnx, 'jax': jax, 'jnp': jnp, 'num_steps': 6,
            'key': jax.random.key(0),
            'cs': Life(birth=birth, survival=survival, rngs=nnx.Rngs(0)),
            'sample_state': lambda k: jax.random.bernoulli(
                k, 0.4, (16, 16, 1)).astype(jnp.float32),
        }
        context = (capture_compat.install() if install
                   else contextlib.nullcontext())
        with context:
          for text in version:
            exec(compile(text, 'cell', 'exec'), namespace)  # pylint: disable=exec-used
        self.assertEmpty(nnx.state(namespace['cs'], nnx.Intermediate))
        results.append((namespace['state_final'], namespace['states']))
    self.assertEqual(results[0][1].shape, (8, 6, 16, 16, 1))
    _assert_bitwise(self, results[0], results[1])
    _assert_bitwise(self, results[0], results[2])


class CaxNcaCaptureHazardTest(absltest.TestCase):

  def _notebook_copy(self) -> tuple[str, str]:
    """A copy of CAX, and its 43_diffusing_nca notebook."""
    cax = _repo('cax')
    scratch = self.enter_context(tempfile.TemporaryDirectory())
    copy = os.path.join(scratch, 'cax')
    shutil.copytree(cax, copy, ignore=shutil.ignore_patterns('.git'))
    return copy, os.path.join(copy, 'examples', '43_diffusing_nca.ipynb')

  def test_an_nca_pop_is_left_alone_and_a_capture_would_fail(self):
    # CAX's examples/43_diffusing_nca.ipynb: DiffusingNCA holds an nnx.List
    # (its update MLP) and runs nnx.scan over itself. Training leaves sow
    # off, so nothing earlier blocks the final pop; but Flax 0.12.8's
    # nnx.capture would fail on that model, so the codemod keeps the pop
    # (capture-hazard). The oracle: the cells run as they are, and the same
    # cells with the capture written by hand raise.
    cax = _repo('cax')
    copy, notebook = self._notebook_copy()
    with open(notebook, encoding='utf-8') as f:
      original = f.read()
    code, summary, err = _migrate(copy, [notebook], 'capture')
    self.assertEqual(code, 0, msg=err)
    self.assertEqual(summary.rewritten['pop'], 0, msg=err)
    with open(notebook, encoding='utf-8') as f:
      self.assertEqual(f.read(), original)
    self.assertIn('capture-hazard: MLPUpdate holds an nnx.List and the model '
                  'runs under nnx.vmap', err)
    self.assertNotIn('earlier-call', err)  # training leaves sow off

    cells = _code_cells(original)
    call = next(i for i, text in enumerate(cells)
                if 'split_rngs(splits=num_examples)' in text)
    self.assertIn('intermediates = nnx.pop(cs, nnx.Intermediate)',
                  cells[call + 1])
    by_hand = list(cells)
    by_hand[call] = cells[call].replace(
        'state_final = nnx.split_rngs(splits=num_examples)(',
        'state_final, intermediates = nnx.capture(nnx.split_rngs('
        'splits=num_examples)(').replace(')(cs, state_init)',
                                         '), nnx.Intermediate)(cs, state_init)')
    by_hand[call + 1] = cells[call + 1].replace(
        'intermediates = nnx.pop(cs, nnx.Intermediate)\n', '')
    self.assertNotEqual(by_hand[call], cells[call])

    from flax import nnx  # pylint: disable=g-import-not-at-top
    with _importable(os.path.join(cax, 'src')):
      namespace = _run_nca_cells(cells[:call + 2])
      self.assertEqual(namespace['states'].shape, (8, 3, 10, 10, 6))
      self.assertEmpty(nnx.state(namespace['cs'], nnx.Intermediate))
      with self.assertRaisesRegex(ValueError, 'sorting pytree dictionary'):
        _run_nca_cells(by_hand[:call + 2])

  def test_for_the_transform_capture_the_nca_pop_migrates_and_agrees(self):
    # The same notebook migrated for the nnx.capture built on the sow
    # transform (--nnx-capture=transform), which writes nothing on the
    # model: the pop becomes a capture. Oracle: the original cells, with
    # Flax's own Module.sow and nnx.pop, against the migrated cells with
    # capture_compat installed. The same operations run, so the sown
    # values must be bitwise equal.
    cax = _repo('cax')
    copy, notebook = self._notebook_copy()
    with open(notebook, encoding='utf-8') as f:
      original = _code_cells(f.read())
    code, summary, err = _migrate(copy, [notebook], 'capture',
                                  nnx_capture='transform')
    self.assertEqual(code, 0, msg=err)
    self.assertEqual(summary.rewritten['pop'], 1, msg=err)
    self.assertNotIn('capture-hazard', err)
    with open(notebook, encoding='utf-8') as f:
      migrated = _code_cells(f.read())
    call = next(i for i, text in enumerate(migrated)
                if 'split_rngs(splits=num_examples)' in text)
    self.assertIn('state_final, intermediates = nnx.capture(',
                  migrated[call])
    self.assertNotIn('nnx.pop', migrated[call + 1])

    from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top
    results = []
    with _importable(os.path.join(cax, 'src')):
      with capture_compat.uninstall():
        results.append(_run_nca_cells(original[:call + 2]))
      with capture_compat.install():
        results.append(_run_nca_cells(migrated[:call + 1]))
    legacy, migrated_run = ((ns['state_final'], ns['intermediates'])
                            for ns in results)
    _assert_bitwise(self, legacy, migrated_run)


def _run_nca_cells(cells: list[str]) -> dict:
  """Runs CAX NCA notebook cells with small sizes and two training steps."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  namespace = {'jax': jax, 'jnp': jnp, 'nnx': nnx}
  for text in _runnable(cells):
    exec(compile(text, 'cell', 'exec'), namespace)  # pylint: disable=exec-used
    if 'channel_size = 64' in text:
      namespace.update(channel_size=6, hidden_size=8, num_steps=3,
                       batch_size=2, y=jax.random.uniform(
                           jax.random.key(1), (10, 10, 4)))
    if 'def train_step' in text:
      for _ in range(2):
        namespace['key'], subkey = jax.random.split(namespace['key'])
        namespace['train_step'](namespace['cs'], namespace['optimizer'],
                                subkey)
  return namespace


def _code_cells(text: str) -> list[str]:
  return [''.join(c['source']) for c in json.loads(text)['cells']
          if c['cell_type'] == 'code']


# Cells that install packages, fetch an emoji or show images and progress
# bars: left out (they neither train nor sow).
_SKIPPED = ('%pip', 'get_emoji(emoji)', 'for i in pbar', 'mediapy.show',
            'print(')


def _runnable(cells: list[str]) -> list[str]:
  found = []
  for text in cells:
    if any(marker in text for marker in _SKIPPED):
      continue
    found.append('\n'.join(
        line for line in text.splitlines()
        if not line.startswith(('import mediapy', 'from tqdm'))))
  return found


_TUNIX_CLASSES = ('Decoder', 'VisionConfig', 'ModelConfig', 'ToyTransformer',
                  'ToyTransformerWithScoreHead')


def _classes_of(source: str) -> str:
  """The source of tunix's toy model classes, from test_common.py."""
  tree = ast.parse(source)
  pieces = []
  for node in tree.body:
    if isinstance(node, ast.ClassDef) and node.name in _TUNIX_CLASSES:
      start = (node.decorator_list[0].lineno if node.decorator_list
               else node.lineno)
      lines = source.splitlines()[start - 1:node.end_lineno]
      pieces.append('\n'.join(lines))
  return '\n\n\n'.join(pieces)


class TunixAllHiddenStatesTest(absltest.TestCase):

  def test_score_head_migrated_to_capture_returns_the_same_score(self):
    tunix = _repo('tunix')
    scratch = self.enter_context(tempfile.TemporaryDirectory())
    _write = os.path.join(scratch, 'pyproject.toml')
    with open(_write, 'w') as f:
      f.write('[project]\nname = "copy"\n')
    path = os.path.join(scratch, 'test_common.py')
    shutil.copy(os.path.join(tunix, 'tunix', 'tests', 'test_common.py'), path)
    with open(path, encoding='utf-8') as f:
      original = f.read()
    code, summary, err = _migrate(scratch, [path], 'capture')
    self.assertEqual(code, 0, msg=err)
    self.assertEqual(summary.rewritten['pop'], 1, msg=err)
    with open(path, encoding='utf-8') as f:
      migrated = f.read()
    self.assertIn("nnx.capture(self.transformer, nnx.Intermediate)(*args, "
                  "**kwargs, output_hidden_states=True)[1]", migrated)
    import dataclasses  # pylint: disable=g-import-not-at-top

    from flax import nnx  # pylint: disable=g-import-not-at-top
    scores = []
    # tunix runs its models with flax_always_shard_variable off (its own
    # setting, as sow_external_models explains).
    previous = flax.config.flax_always_shard_variable
    flax.config.update('flax_always_shard_variable', False)
    self.addCleanup(flax.config.update, 'flax_always_shard_variable', previous)
    from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top
    # The migrated code on either nnx.capture: Flax's own, and
    # capture_compat's (what --nnx-capture=transform migrates for).
    for source, compat in ((original, False), (migrated, False),
                           (migrated, True)):
      self.enter_context(capture_compat.install() if compat
                         else capture_compat.uninstall())
      namespace = {'nnx': nnx, 'jax': jax, 'jnp': jnp,
                   'dataclasses': dataclasses}
      exec(compile(_classes_of(source), 'test_common.py', 'exec'), namespace)  # pylint: disable=exec-used
      config = namespace['ModelConfig'](num_layers=2, vocab_size=32)
      rngs = nnx.Rngs(0)
      model = namespace['ToyTransformerWithScoreHead'](
          namespace['ToyTransformer'](config, rngs=rngs), rngs)
      tokens = jnp.arange(12).reshape(2, 6) % 32
      positions = jnp.broadcast_to(jnp.arange(6), (2, 6))
      with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        scores.append(model(tokens, positions))
      # Nothing is left on the transformer either way.
      self.assertEmpty(nnx.state(model, nnx.Intermediate))
    _assert_bitwise(self, scores[0], scores[1])
    _assert_bitwise(self, scores[0], scores[2])
    self.assertEqual(scores[0].shape, (2, 6, 1))


# A legacy reader of the sown values of Flax's examples/gemma (every kind of
# value its SowConfig can sow), written into the copy the test migrates.
_GEMMA_READER = '''\
"""A legacy reader of Gemma's sown intermediates."""
import jax
import jax.numpy as jnp
from jax.sharding import AxisType
from flax import nnx

import modules
import sow_lib
import transformer as transformer_lib


def intermediates():
  mesh = jax.make_mesh((1, 1, 1), ('data', 'fsdp', 'tensor'),
                       (AxisType.Auto,) * 3)
  config = transformer_lib.TransformerConfig(
      num_layers=2, num_embed=4, embed_dim=48, hidden_dim=12, num_heads=1,
      head_dim=4, num_kv_heads=1, final_logit_softcap=None,
      use_post_attn_norm=False, use_post_ffw_norm=False,
      attention_types=[modules.AttentionType.GLOBAL] * 2)
  sow_config = sow_lib.SowConfig(embeddings=True, rs_after_attention=True,
                                 rs_after_ffw=True, attn_logits_topk=5,
                                 mlp_hidden_topk=11)
  tokens = jnp.tile(jnp.arange(7) % 4, (3, 1))
  positions = jnp.tile(jnp.arange(7), (3, 1))
  mask = jnp.ones((3, 7, 7), dtype=jnp.bool)
  with jax.set_mesh(mesh):
    model = transformer_lib.Transformer(
        config=config, rngs=nnx.Rngs(params=0), sow_config=sow_config)
    y = model(tokens, positions, None, mask)
    intms = nnx.pop(model, nnx.Intermediate)
  return y, intms
'''

# Runs the reader in a fresh process on the installed Flax (0.12.8, whose
# nnx.capture is its own: asserted) and saves every value by its path.
_GEMMA_RUN = '''\
import sys
import warnings
warnings.simplefilter('ignore', DeprecationWarning)
import jax
import numpy as np
from flax import nnx
assert nnx.capture.__module__ == 'flax.nnx.module', nnx.capture.__module__
import reader
y, intms = reader.intermediates()
leaves = jax.tree_util.tree_leaves_with_path((y, nnx.to_pure_dict(intms)))
np.savez(sys.argv[1], **{jax.tree_util.keystr(k): np.asarray(v)
                         for k, v in leaves})
'''


class GemmaCaptureTest(absltest.TestCase):

  def test_legacy_reader_migrates_to_flax_capture_with_the_same_values(self):
    # Flax's examples/gemma sows through SowConfig.maybe_sow_*(x, self) and
    # keeps `dtype: Any = jnp.float32` and `self.post_ffw_norm = None`; a
    # reader `y = model(...)` + `nnx.pop` was refused as a capture-hazard.
    # Flax 0.12.8's own nnx.capture runs the rewritten reader: the oracle is
    # the original code, run before the rewrite. The two run the same
    # operations, so the values must be bitwise equal (no tolerance).
    gemma = os.path.join(_repo('flax'), 'examples', 'gemma')
    scratch = self.enter_context(tempfile.TemporaryDirectory())
    copies = {}
    for side in ('before', 'after'):
      copies[side] = os.path.join(scratch, side)
      shutil.copytree(gemma, copies[side])
      with open(os.path.join(copies[side], 'reader.py'), 'w') as f:
        f.write(_GEMMA_READER)
      with open(os.path.join(copies[side], 'run_reader.py'), 'w') as f:
        f.write(_GEMMA_RUN)
    after = copies['after']
    code, summary, err = _migrate(after, [after], 'capture')
    self.assertEqual(code, 0, msg=err)
    self.assertNotIn('capture-hazard', err)
    self.assertEqual(summary.rewritten['pop'], 1, msg=err)
    with open(os.path.join(after, 'reader.py'), encoding='utf-8') as f:
      migrated = f.read()
    self.assertIn('y, intms = nnx.capture(model, nnx.Intermediate)(tokens, '
                  'positions, None, mask)', migrated)
    self.assertNotIn('nnx.pop', migrated)

    values = {}
    for side, directory in copies.items():
      out = os.path.join(scratch, f'{side}.npz')
      done = subprocess.run([sys.executable, 'run_reader.py', out],
                            cwd=directory, capture_output=True, text=True,
                            check=False)
      self.assertEqual(done.returncode, 0, msg=done.stderr[-3000:])
      with np.load(out) as loaded:
        values[side] = dict(loaded)
    self.assertEqual(sorted(values['before']), sorted(values['after']))
    # The logits, the embeddings, and 6 sown values in each of 2 layers.
    self.assertLen(values['before'], 14)
    for key, value in values['before'].items():
      self.assertFalse(np.isnan(value).any(), msg=key)
      np.testing.assert_array_equal(value, values['after'][key], err_msg=key)


if __name__ == '__main__':
  absltest.main()
