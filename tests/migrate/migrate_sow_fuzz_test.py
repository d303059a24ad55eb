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
"""The codemod's differential fuzzer: random projects, run before and after.

Each project (``project_fuzz.py``) is written to a temporary directory and
run in a fresh process (``project_testing.execute``): what ``run()``
returns with Flax 0.12.8's own ``nnx.capture`` and with ``capture_compat``'s,
and every value the model sows, by name. Then, for each target
(``--target=capture`` and ``--target=functional``) and each
``--nnx-capture`` (Flax 0.12.8's own ``nnx.capture`` and ``Module.sow``, or
``capture_compat``'s), and, for a project on a library, where the library
is installed (on the codemod's search path) and where it is not, the
command rewrites a copy (``--write``) and:

* the migrated copy, run in a fresh process on the ``nnx.capture`` (and
  ``Module.sow``) it was migrated for, returns bitwise what the original
  returned on Flax 0.12.8's, and its model sows the same values under the
  same names;
* a second run changes nothing;
* every flag names a known reason, whole; every reader of the project that
  is no pop nor capture is reported (where the library is not installed,
  a read of its sown names cannot be told from another attribute: those
  are counted, not required).

In the suite a few projects run (``CI_EXAMPLES``, derandomized: each takes
some seconds of fresh processes). ``python
tests/migrate/migrate_sow_fuzz_test.py --minutes N --seed S`` searches on
fresh random projects and prints the counts (projects, sites, rewrites,
flags, mismatches).
"""

import argparse
import collections
import itertools
import os
import shutil
import sys
import tempfile
import time

if __name__ == '__main__':  # the long search, outside pytest
  _HERE = os.path.dirname(os.path.abspath(__file__))
  _ROOT = os.path.dirname(os.path.dirname(_HERE))
  sys.path[:0] = [_ROOT, os.path.join(_ROOT, 'tests', 'nnx', 'sow'), _HERE]
  import _worktree  # noqa: F401  pylint: disable=g-import-not-at-top

# pylint: disable=g-import-not-at-top,g-bad-import-order
import codemod_testing
import project_testing
import sow_layout
from absl.testing import absltest

try:
  import hypothesis
except ImportError:  # Flax's own test extras lack it: the property skips
  hypothesis = None

codemod_testing.require_libcst()
if hypothesis is not None:
  import project_fuzz  # pylint: disable=g-import-not-at-top

cli = sow_layout.test_module('migrate_sow_test')
ms = cli.ms
flags_lib = codemod_testing.codemod_module('flags')

CI_EXAMPLES = 2
# (target, the nnx.capture the code will run on, the observation compared
# with the original's run on Flax 0.12.8's nnx.capture: 'run' on Flax
# 0.12.8's own nnx.capture and Module.sow, 'compat' with capture_compat
# installed). The functional target's code for Flax 0.12.8's own runs there
# too: a Module.sow it keeps inside a functional capture would raise
# (kept-module-sow).
CONFIGS = (('capture', 'legacy', 'run'), ('capture', 'transform', 'compat'),
           ('functional', 'legacy', 'run'),
           ('functional', 'transform', 'compat'))
# What the runs found, for the long search's report.
STATS = collections.Counter()


def _observed(observation: dict, prefix: str) -> dict:
  return {k[len(prefix):]: v for k, v in observation.items()
          if k.startswith(prefix)}


def check(spec) -> None:
  """The fuzzer's property over one project (raises AssertionError)."""
  with tempfile.TemporaryDirectory() as scratch:
    original = os.path.join(scratch, 'original')
    project_testing.write(original, spec.files)
    cli.write(original, 'pyproject.toml', '')
    library = os.path.join(scratch, 'library')
    project_testing.write(library, spec.library)
    libraries = [library] if spec.library else []
    before = project_testing.execute(original, compat='both',
                                     libraries=libraries)
    if any(k.endswith('raised') for k in before):
      # The generator wrote what Flax 0.12.8 cannot run (the oracle has no
      # answer): not a project to migrate.
      STATS['projects not run by Flax 0.12.8'] += 1
      hypothesis.assume(False)
    STATS['projects'] += 1
    STATS['projects on a library'] += bool(spec.library)
    STATS['sites'] += spec.sites
    observations = {}  # the migrated texts -> what they observed
    # With a library: where it is installed, and where it is not.
    installed = (True, False) if spec.library else (True,)
    for (target, capture, observed), found in itertools.product(
        CONFIGS, installed):
      config = f'{target}/{capture}' + ('' if found else '/not installed')
      copy = os.path.join(scratch, config.replace('/', '_'))
      shutil.copytree(original, copy)
      search_path = libraries if found else []
      code, summary, _, err = cli.run(
          [copy], mode='write', target=target, nnx_capture=capture,
          search_path=search_path)
      assert code == ms.EXIT_OK, f'{config}: exit {code}\n{err}'
      STATS[f'{config} rewrites'] += sum(summary.rewritten.values())
      STATS[f'{config} flags'] += len(summary.flags)
      for flag in summary.flags:
        assert flag.code in flags_lib.REASONS and flag.message.strip(), flag
        assert not flag.message.endswith('...'), flag
      reported = {(f.path, f.line) for f in summary.flags}
      for path, line, text in spec.readers:
        if (path, line) in reported:
          continue
        # A library the codemod cannot read has no names it knows: a read
        # of one of them is not told from any other attribute. Counted.
        assert not found, (
            f'{config}: the reader {text!r} at {path}:{line} is not '
            f'reported\n{err}')
        STATS['readers of an unread library not reported'] += 1
      migrated = project_testing.read(copy)
      key = tuple(sorted(migrated.items()))
      if key not in observations:  # one run observes both nnx.captures
        observations[key] = project_testing.execute(copy, compat='both',
                                                    libraries=libraries)
      after = observations[key]
      differences = project_testing.differences(
          _observed(before, 'run'), _observed(after, observed))
      differences += project_testing.differences(
          _observed(before, 'names'), _observed(after, 'names'))
      if differences:
        STATS['mismatches'] += 1
      assert not differences, (
          f'{config}: {differences}\n{err}\n' + '\n'.join(
              f'--- {p}\n{migrated[p]}' for p in sorted(migrated)
              if migrated[p] != spec.files.get(p)))
      code, again, _, err = cli.run(
          [copy], mode='write', target=target, nnx_capture=capture,
          search_path=search_path)
      assert (code, again.changed) == (ms.EXIT_OK, 0), (
          f'{config}: a second run changed {again.changed} files\n{err}')
      assert project_testing.read(copy) == migrated


if hypothesis is not None:

  @hypothesis.settings(max_examples=CI_EXAMPLES, derandomize=True,
                       deadline=None, database=None,
                       suppress_health_check=list(hypothesis.HealthCheck))
  @hypothesis.given(project_fuzz.specs())
  def _ci_property(spec):
    check(spec)


class MigrateFuzzTest(absltest.TestCase):

  def test_random_projects_migrate_to_the_same_values(self):
    if hypothesis is None:
      self.skipTest('the fuzzer needs hypothesis')
    _ci_property()


def _long(minutes: float, seed: int) -> int:
  """The long search: fresh projects for ``minutes``; the counts."""
  end = time.monotonic() + 60 * minutes
  rounds = 0
  failed = None
  while time.monotonic() < end and failed is None:
    property_ = hypothesis.settings(
        max_examples=5, derandomize=False, deadline=None, database=None,
        suppress_health_check=list(hypothesis.HealthCheck))(
            hypothesis.seed(seed + rounds)(
                hypothesis.given(project_fuzz.specs())(check)))
    try:
      property_()
    except Exception as e:  # pylint: disable=broad-except
      failed = f'round {rounds} (seed {seed + rounds}): {e}'
    rounds += 1
    print(f'{rounds} rounds: ' + ', '.join(
        f'{k} {v}' for k, v in sorted(STATS.items())), flush=True)
  if failed:
    print(failed)
  return 1 if failed else 0


if __name__ == '__main__':
  if '--minutes' in sys.argv:
    parser = argparse.ArgumentParser()
    parser.add_argument('--minutes', type=float, required=True)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    sys.exit(_long(args.minutes, args.seed))
  absltest.main()
