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
"""Suite-wide test settings: hypothesis profiles and a global-state guard.

Hypothesis profiles for the property tests (differential_fuzz_test.py):
``ci`` is the default: 200 examples, the same on every run (derandomized),
no deadline (a first call compiles).
``pytest --hypothesis-profile=long`` (an option of hypothesis' pytest plugin)
runs 5,000. Neither keeps an example database, so runs are reproducible from
the seed hypothesis prints on failure, and no directory is written. Without
hypothesis installed (Flax's own test extras lack it) there are no profiles
and the property tests skip.

The guard: every test must leave the process as it found it (the compat
layer installed or not, JAX's configuration, the sow rule table, how a
jit's cache miss is run, the profile function, the environment), so that
the suite passes in any order, in any split across workers, and beside
other test suites. A test that changes any of it fails, naming what it
changed.
"""

import importlib.util
import os
import sys

import jax
import pytest

try:
  import hypothesis
except ImportError:  # the property tests skip (see differential_fuzz_test.py)
  hypothesis = None

if hypothesis is not None:
  _COMMON = dict(
      deadline=None,
      database=None,
      print_blob=True,
      suppress_health_check=[hypothesis.HealthCheck.too_slow],
  )
  # ci: the same 200 programs on every run, so that a run passes or fails
  # by the code alone; long: fresh random programs, to search for new bugs.
  hypothesis.settings.register_profile(
      'ci', max_examples=200, derandomize=True, **_COMMON)
  hypothesis.settings.register_profile('long', max_examples=5000, **_COMMON)
  hypothesis.settings.load_profile('ci')


def _exists(module: str) -> bool:
  """Whether ``module`` is in this tree (its packages too: a commit of the
  series may have neither)."""
  try:
    return importlib.util.find_spec(module) is not None
  except ModuleNotFoundError:  # a parent package is missing
    return False


def _global_state() -> dict[str, object]:
  """What a test could change for the tests after it, by name."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from flax.nnx import module as module_lib  # pylint: disable=g-import-not-at-top

  state = {
      'nnx.capture': nnx.capture,
      'flax.nnx.module.capture': module_lib.capture,
      'nnx.Module.sow': nnx.Module.sow,
      'nnx.Module.perturb': nnx.Module.perturb,
      'sys.getprofile()': sys.getprofile(),
  }
  # In Flax's tree, each commit of the series adds a part of the transform:
  # the interpreter, the compat layer and its install() come after the first
  # ones.
  if _exists('flax.nnx.sow.transform.interpreter'):
    from flax.nnx.sow.transform import interpreter  # pylint: disable=g-import-not-at-top

    state['sow rule table'] = dict(interpreter.RULES)
  if _exists('flax.nnx.sow.transform.eager'):
    from flax.nnx.sow.transform import _jax  # pylint: disable=g-import-not-at-top

    state['jit dispatch'] = (_jax.jit_dispatch_is_set(), _jax._policy)
  if _exists('flax.nnx.capture_compat'):
    from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top

    state['capture_compat frames'] = tuple(capture_compat.frames.FRAMES.stack)
  if _exists('flax.nnx.capture_compat.overlay'):
    from flax.nnx.capture_compat import overlay  # pylint: disable=g-import-not-at-top

    state['capture_compat installed'] = overlay.is_installed()
  for name, value in os.environ.items():
    if name != 'PYTEST_CURRENT_TEST':  # pytest's own, set per test phase
      state[f'os.environ[{name!r}]'] = value
  for name, value in jax.config.values.items():
    state[f'jax.config.{name}'] = value
  return state


def _changes(before: dict[str, object], after: dict[str, object]) -> list:
  changed = []
  for name in sorted(before.keys() | after.keys()):
    a, b = before.get(name, '<absent>'), after.get(name, '<absent>')
    if a is not b and a != b:
      changed.append(f'{name}: {a!r:.200} -> {b!r:.200}')
  return changed


@pytest.fixture(autouse=True)
def _leaves_no_global_state():
  before = _global_state()
  yield
  changed = _changes(before, _global_state())
  if changed:
    pytest.fail('the test left global state changed:\n  '
                + '\n  '.join(changed), pytrace=False)
