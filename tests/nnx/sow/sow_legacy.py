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
"""Flax 0.12.8's own ``nnx.capture``: the oracle of the parity tests.

Not part of the library: in a released Flax it is the function that
``capture_compat.install()`` replaces, taken from there (or from Flax before
any install). While installed, ``Module.sow``/``Module.perturb`` defer to
Flax's own on a module that Flax's capture is running on, so the comparison
runs Flax 0.12.8's code end to end.

In a Flax whose ``module.py`` already delegates to ``capture_compat`` (the
upstream patch series), there is no 0.12.8 implementation left to compare
with: every test that needs it skips, saying so, and the comparisons run
where the overlay is used on a released Flax.
"""

import contextlib
import typing as tp
import unittest

from flax.nnx import capture_compat
from flax.nnx import module as module_lib
from flax.nnx import variablelib
from flax.nnx.capture_compat import replaced
import sow_layout

SKIP_REASON = (
    "this Flax's own nnx.capture is built on the sow transform already:"
    " Flax 0.12.8's, the oracle, is not in it"
)


def _flax_own_capture() -> tp.Callable[..., tp.Any]:
  if capture_compat.is_installed():
    original = replaced.original('capture')
    assert original is not None, 'installed, but nothing was replaced'
    return original
  assert module_lib.capture is not capture_compat.capture
  return module_lib.capture


def is_available() -> bool:
  """Whether Flax's own ``nnx.capture`` is 0.12.8's, not a delegation to
  ``capture_compat`` (what Flax's ``module.py`` does with the series)."""
  if sow_layout.IN_FLAX:  # Flax's own tree, with the series
    return False
  return not capture_compat.delegates(_flax_own_capture())


def flax_capture() -> tp.Callable[..., tp.Any]:
  """Flax's own ``nnx.capture``, whether or not the layer is installed.

  Raises:
    unittest.SkipTest: it is not Flax 0.12.8's (see :func:`is_available`).
  """
  if not is_available():
    raise unittest.SkipTest(SKIP_REASON)
  return _flax_own_capture()


@contextlib.contextmanager
def flax_methods():
  """Flax 0.12.8's ``nnx.capture``, ``Module.sow`` and ``Module.perturb`` in
  place for the block (the layer uninstalled).

  Raises:
    unittest.SkipTest: they are not Flax 0.12.8's (see :func:`is_available`).
  """
  if not is_available():
    raise unittest.SkipTest(SKIP_REASON)
  with capture_compat.uninstall():
    yield


def capture(fn, *var_types, init=None, method_outputs=None):
  """``nnx.capture`` as Flax 0.12.8 implements it, same signature."""
  if isinstance(fn, type) and issubclass(fn, variablelib.Variable):
    all_types = (fn, *var_types)
    return lambda actual_fn: flax_capture()(
        actual_fn, *all_types, init=init, method_outputs=method_outputs
    )
  return flax_capture()(
      fn, *var_types, init=init, method_outputs=method_outputs
  )
