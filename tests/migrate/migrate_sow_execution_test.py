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
"""Migrated code runs and captures what the legacy code did.

The oracle of each rewrite is the original program: both run, with Flax
0.12.8's ``nnx.capture`` and with ``capture_compat``'s, and the values they
capture must agree (bitwise where the same operations run).
"""

import os
import warnings

import jax.numpy as jnp
import numpy as np
import codemod_testing
import sow_layout
import sow_testing
from absl.testing import absltest
from flax.nnx import capture_compat

codemod_testing.require_libcst()

# The command line's helpers (read) and the codemod (ms).
cli = sow_layout.test_module('migrate_sow_test')
ms = cli.ms
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'testdata')


MODEL_SOURCE = '''\
from flax import nnx
import jax.numpy as jnp


class Block(nnx.Module):

  def __init__(self, rngs: nnx.Rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)

  def __call__(self, x):
    h = self.linear(x)
    self.sow(nnx.Intermediate, 'block_pre', h)
    return nnx.relu(h)


class Model(nnx.Module):

  def __init__(self, rngs: nnx.Rngs, *, record: bool = True):
    self.block = Block(rngs)
    self.head = nnx.Linear(3, 2, rngs=rngs)
    self.record = record

  def __call__(self, x):
    h = self.block(x)
    if self.record:
      self.sow(nnx.Intermediate, 'hidden', h)
    self.sow(nnx.Intermediate, 'last', 2 * h, reduce_fn=lambda a, b: b)
    out = self.head(h)
    self.sow(nnx.Intermediate, 'logits', out)
    return out


def run_capture(model, x):
  y, state = nnx.capture(model, nnx.Intermediate)(x)
  return y, state['hidden'][0], state['logits'].value[0], state['last'].value


@nnx.capture(nnx.Intermediate)
def forward(model, x):
  return model(x)


def run_decorated(model, x):
  y, state = forward(model, x)
  return y, state.hidden.value[0], state['last'][1]


def run_pop(model, x):
  y = model(x)
  state = nnx.pop(model, nnx.Intermediate)
  return y, state['logits'][0], state['hidden'].value[-1]
'''


class ExecutionTest(absltest.TestCase):
  """Rewritten code captures the same values as the original."""

  def _execute(self, source):
    namespace = {}
    code = compile(source, '<migrated>', 'exec')
    results = {}
    with warnings.catch_warnings():
      # The legacy nnx.pop pattern sows outside nnx.capture, deprecated.
      warnings.simplefilter('ignore', DeprecationWarning)
      exec(code, namespace)  # pylint: disable=exec-used
      model = namespace['Model'](namespace['nnx'].Rngs(0))
      x = jnp.arange(6.0).reshape(2, 3) / 6
      for name in ('run_capture', 'run_decorated', 'run_pop'):
        results[name] = [np.asarray(v) for v in namespace[name](model, x)]
    return results

  def test_functional_target_keeps_a_submodules_sow(self):
    # Block's 'block_pre' is named block/block_pre in the legacy State; a
    # free sow would name it block_pre: the sow, and every reader linked to
    # it, stay as they are.
    migrated, flags = ms.migrate_source(MODEL_SOURCE, target='functional',
                                        path='model.py')
    self.assertEqual(migrated, MODEL_SOURCE)
    self.assertIn('module-path', {f.code for f in flags})

  def test_migrated_model_captures_the_same_values(self):
    # Without the submodule's sow, every name is at the root of the State.
    source = MODEL_SOURCE.replace(
        "    self.sow(nnx.Intermediate, 'block_pre', h)\n", '')
    self.assertNotEqual(source, MODEL_SOURCE)
    migrated, flags = ms.migrate_source(source, target='functional',
                                        path='model.py')
    self.assertEmpty(flags)
    self.assertNotIn('.sow(', migrated)
    self.assertNotIn('nnx.capture', migrated)
    self.assertNotIn('nnx.pop', migrated)
    self.assertIn("mode='clobber'", migrated)
    legacy = self._execute(source)
    functional = self._execute(migrated)
    self.assertEqual(legacy.keys(), functional.keys())
    for name, values in legacy.items():
      self.assertLen(functional[name], len(values), msg=name)
      for old, new in zip(values, functional[name]):
        sow_testing.assert_close(new, old, err_msg=name)

  def test_capture_target_is_executable_and_equivalent(self):
    source = MODEL_SOURCE
    migrated, _ = ms.migrate_source(source, target='capture', path='m.py')
    self.assertIn('y, state = nnx.capture(model, nnx.Intermediate)(x)',
                  migrated)
    legacy = self._execute(source)
    captured = self._execute(migrated)
    for name, values in legacy.items():
      for old, new in zip(values, captured[name]):
        sow_testing.assert_close(new, old, err_msg=name)

  def test_capture_through_vmap_collects_what_pop_collected(self):
    # CAX's pattern: nnx.split_rngs(...)(nnx.vmap(...))(cs, x), then nnx.pop
    # of the stacked values. Oracle: the original code; the rewrite runs
    # with Flax 0.12.8's nnx.capture and with capture_compat's.
    path = os.path.join(DATA, 'capture', 'pop_through_vmap.input.py')
    source = cli.read(path)
    migrated, flags = ms.migrate_source(source, target='capture', path='m.py')
    self.assertEmpty([f for f in flags if f.code != 'legacy-reader'])
    self.assertNotIn('nnx.pop', migrated)

    def execute(code):
      namespace = {}
      with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        exec(compile(code, '<m>', 'exec'), namespace)  # pylint: disable=exec-used
        nnx = namespace['nnx']
        x = jnp.arange(8.0).reshape(2, 2, 2) / 8
        model = namespace['Model'](nnx.Rngs(0))
        y, sown = namespace['run'](model, x)
        total = namespace['loss'](model, x)
        left = nnx.state(model, nnx.Intermediate)
      return [np.asarray(y), np.asarray(sown), np.asarray(total)], left

    legacy, left = execute(source)
    self.assertEmpty(dict(left))
    self.assertEqual(legacy[1].shape, (2, 2, 2))  # stacked on the vmap axis
    for install in (False, True):
      if install:
        with capture_compat.install():
          captured, left = execute(migrated)
      else:
        captured, left = execute(migrated)
      self.assertEmpty(dict(left))
      for old, new in zip(legacy, captured):
        np.testing.assert_array_equal(new, old, err_msg=f'install={install}')


if __name__ == '__main__':
  absltest.main()
