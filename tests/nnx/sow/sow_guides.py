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
"""What the tests of the sow transform's guides share.

Only these guides (``GUIDES``), not others in docs_nnx/guides: in Flax's
tree its own guides are executed by its documentation build. Each guide has
a test file of its own (in ``sow_layout.tests_dir('docs')``), in which its
code cells run in order in one namespace of their own.
"""

import contextlib
import importlib.util
import io
import os
import re
import sys
from unittest import mock

from absl.testing import absltest
import sow_layout
import sow_legacy

# In the order a reader should take them.
GUIDES = (
    'sow_transform',
    'sow_bad_inputs',
    'capture_behavior_changes',
    'migrate_sow',
    'interventions',
    'activations_dataset',
    'gemma_walkthrough',
)
# Guides whose code needs a package that Flax does not depend on.
NEEDS = {'migrate_sow': 'libcst', 'gemma_walkthrough': 'sentencepiece'}
# Guides that run on a checkout of Flax (its examples/gemma), given as
# FLAX_SOW_MODELS_FROM=PATH (PATH/flax), as the external-model tests are;
# the guide reads FLAX_CHECKOUT, set to it for the run.
MODELS_FROM_ENV = 'FLAX_SOW_MODELS_FROM'
NEEDS_FLAX_CHECKOUT = ('gemma_walkthrough',)
# Guides that run beside Flax 0.12.8's own nnx.capture, to compare, here; in
# Flax's tree those passages are left out (scripts/upstream/flax_docs.py).
NEEDS_FLAX_0_12_8 = ('capture_behavior_changes',)
FENCE = re.compile(r'^```python\n(.*?)^```$', re.MULTILINE | re.DOTALL)
TEXT = re.compile(r'^```text\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[str]:
  return FENCE.findall(text)


def run_blocks(blocks: list[str], where: str) -> str:
  namespace = {'__name__': '__guide__'}
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    for i, block in enumerate(blocks):
      exec(compile(block, f'{where}:python-block-{i}', 'exec'), namespace)  # pylint: disable=exec-used
  return out.getvalue()


class GuideTestCase(absltest.TestCase):

  def assertGuideRuns(self, name: str) -> None:
    """Runs the guide's code cells in order, skipping where what it needs
    is not installed."""
    assert name in GUIDES, name
    needed = NEEDS.get(name)
    if needed and importlib.util.find_spec(needed) is None:
      self.skipTest(f'{name} needs {needed}, which is not installed')
    if (name in NEEDS_FLAX_0_12_8 and not sow_layout.IN_FLAX
        and not sow_legacy.is_available()):
      self.skipTest(f'{name}: {sow_legacy.SKIP_REASON}')
    if name in NEEDS_FLAX_CHECKOUT:
      self._with_flax_checkout(name)
    blocks = python_blocks(sow_layout.guide_text(name))
    self.assertNotEmpty(blocks, name)
    run_blocks(blocks, sow_layout.guide_path(name))

  def _with_flax_checkout(self, name: str) -> None:
    """Points FLAX_CHECKOUT at the checkout for the run (or skips), and
    removes afterwards what the guide adds to ``sys.path`` and
    ``sys.modules`` (the example's flat modules: ``transformer``...)."""
    root = os.environ.get(MODELS_FROM_ENV)
    checkout = os.path.join(root, 'flax') if root else ''
    if not root or not os.path.isdir(os.path.join(checkout, 'examples',
                                                  'gemma')):
      self.skipTest(f'{name} runs with {MODELS_FROM_ENV}=PATH, PATH/flax a'
                    ' checkout of Flax')
    if importlib.util.find_spec('jaxtyping') is None:
      self.skipTest(f'{name} needs jaxtyping, which is not installed')
    self.enterContext(mock.patch.dict(os.environ,
                                      {'FLAX_CHECKOUT': checkout}))
    path, modules = list(sys.path), set(sys.modules)

    def restore():
      sys.path[:] = path
      for added in set(sys.modules) - modules:
        del sys.modules[added]

    self.addCleanup(restore)
