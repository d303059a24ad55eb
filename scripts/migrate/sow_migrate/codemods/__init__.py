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
"""The rewrites, one libcst transformer each.

A unit's tree goes through them in this order (``ORDER``): the legacy sow,
perturb and capture calls become functional ones, a call and its
``nnx.pop`` become one capture, the reads of the State are mapped, and the
flagged sites get their notes. Each transformer is told which nodes of the
unit's *original* tree to change; a :class:`base.Tracker` follows those
nodes through the passes before it (a pass rebuilds every node it visits).
Each transformer asks for the imports it needs through libcst's
``AddImportsVisitor`` (on the shared ``CodemodContext``).
"""

from __future__ import annotations

from .access import StateAccess
from .annotate import Annotate
from .capture import CaptureToFunctional
from .perturb import PerturbToFunctional
from .pop import PopToCapture
from .sow import SowToFunctional

ORDER = (SowToFunctional, PerturbToFunctional, CaptureToFunctional,
         PopToCapture, StateAccess, Annotate)

__all__ = ['ORDER', 'Annotate', 'CaptureToFunctional', 'PerturbToFunctional',
           'PopToCapture', 'SowToFunctional', 'StateAccess']
