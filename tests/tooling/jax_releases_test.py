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
"""Every JAX release Flax accepts is one the checks run on.

``.ci/variants`` runs the suite on the releases older than the pinned one,
and ``check_patchset.py --jax`` checks the series on each: both lists must
name every release from the minimum Flax declares to the one
``pyproject.toml`` pins.
"""

import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
import sys

from absl.testing import absltest
import sow_layout

ROOT = sow_layout.ROOT
_SYS_PATH = list(sys.path)
sys.path.insert(0, os.path.join(ROOT, 'scripts', 'upstream'))
import check_patchset  # pylint: disable=g-import-not-at-top,wrong-import-position
sys.path[:] = _SYS_PATH


def _variants():
  path = os.path.join(ROOT, '.ci', 'variants')
  loader = importlib.machinery.SourceFileLoader('ci_variants', path)
  spec = importlib.util.spec_from_loader('ci_variants', loader)
  module = importlib.util.module_from_spec(spec)
  loader.exec_module(module)
  return module


def _pinned() -> str:
  with open(os.path.join(ROOT, 'pyproject.toml')) as f:
    return re.search(r"'jax==([0-9.]+)'", f.read()).group(1)


def _flax_minimum() -> str:
  for requirement in importlib.metadata.requires('flax'):
    found = re.fullmatch(r'jax>=([0-9.]+)', requirement)
    if found:
      return found.group(1)
  raise AssertionError('flax declares no jax>= requirement')


class JaxReleasesTest(absltest.TestCase):

  def test_the_patchset_check_knows_every_release(self):
    releases = check_patchset.JAX_RELEASES
    self.assertEqual(releases[0], _flax_minimum())
    self.assertEqual(releases[-1], _pinned())
    self.assertEqual(check_patchset.JAX_PINNED, _pinned())
    self.assertEqual(list(releases), sorted(
        releases, key=lambda v: tuple(map(int, v.split('.')))))

  def test_a_variant_per_older_release(self):
    variants = _variants()
    self.assertEqual(
        (*variants.OLDER_JAX, _pinned()), check_patchset.JAX_RELEASES)
    table = variants.variants(seed=0)
    for version in variants.OLDER_JAX:
      self.assertIn(f'jax-{version}', table)


if __name__ == '__main__':
  absltest.main()
