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
"""Runs every docstring example of the public modules as a doctest."""

import doctest
import importlib
import pkgutil

from absl.testing import absltest
from absl.testing import parameterized
import jax

import flax.nnx.capture_compat
import flax.nnx.sow

PUBLIC_MODULES = sorted(
    ['flax.nnx.sow', 'flax.nnx.capture_compat']
    + [
        m.name
        for package in (flax.nnx.sow, flax.nnx.capture_compat)
        for m in pkgutil.walk_packages(
            package.__path__, prefix=f'{package.__name__}.'
        )
    ]
)

MODULES_WITH_EXAMPLES = {
    'flax.nnx.capture_compat',
    'flax.nnx.capture_compat.module_methods',
    # With the example of module paths (it needs `install`).
    'flax.nnx.capture_compat.overlay',
    'flax.nnx.sow.activations.dataset',
    'flax.nnx.sow.activations.export',
    'flax.nnx.sow.capture',
    'flax.nnx.sow.capture_grads',
    'flax.nnx.sow.discover',
    'flax.nnx.sow.perturb',
    'flax.nnx.sow.transform.names',
    'flax.nnx.sow.transform.primitive',
    'flax.nnx.sow.transform.runtime_checks',
    'flax.nnx.sow.transform.perturbation',
    'flax.nnx.sow.plant',
    'flax.nnx.sow.render',
    'flax.nnx.sow.tap',
}


class DocstringExamplesTest(parameterized.TestCase):

  @parameterized.parameters(*PUBLIC_MODULES)
  def test_examples_run(self, module_name):
    module = importlib.import_module(module_name)
    # The examples show arrays as JAX prints them by default (float32), as
    # Flax's docstrings do; under JAX_ENABLE_X64 they run as documented.
    with jax.enable_x64(False):
      result = doctest.testmod(
          module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
          verbose=False,
      )
    self.assertEqual(result.failed, 0, f'{module_name}: {result}')
    if module_name in MODULES_WITH_EXAMPLES:
      self.assertGreater(result.attempted, 0, module_name)

  def test_every_public_function_has_an_example(self):
    for name in set(flax.nnx.sow.__all__) - {'sow_p'}:  # a primitive
      doc = getattr(flax.nnx.sow, name).__doc__
      self.assertIn('>>>', doc, name)


if __name__ == '__main__':
  absltest.main()
