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
"""This repository's test folders share the helpers and the guard.

The test helpers (``sow_testing``, ``sow_layout``, ...) and the suite's
``conftest.py`` (hypothesis profiles, the global-state guard) live in
``tests/nnx/sow``, where pytest puts them on ``sys.path`` for the tests
below it. In Flax's tree every test of ours is below that folder (see
``sow_layout``); here the compat layer's, the codemod's, the guides' and the
tooling's tests have folders of their own beside it, so this puts the
helpers' folder on ``sys.path`` for them too and applies the same guard to
them. Not part of the upstream series.
"""

import importlib.util
import os
import sys

_HELPERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'nnx',
                        'sow')
if _HELPERS not in sys.path:
  sys.path.insert(0, _HELPERS)

# The guard of tests/nnx/sow/conftest.py, under a name of its own (pytest
# imports that file as `conftest` for the tests below it, where its own
# fixture, of the same name, is the one that runs).
_spec = importlib.util.spec_from_file_location(
    '_sow_suite_conftest', os.path.join(_HELPERS, 'conftest.py'))
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
_leaves_no_global_state = _suite._leaves_no_global_state  # pylint: disable=protected-access
