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
"""What :func:`~flax.nnx.capture_compat.install` replaced in a released Flax.

The overlay on a released Flax points ``nnx.capture``, ``Module.sow`` and
``Module.perturb`` at this package; the functions they pointed to before are
kept here, so that :func:`~flax.nnx.capture_compat.uninstall` can restore
them and a ``Module.sow`` running under Flax's own ``nnx.capture`` (held from
before the install) can defer to them. In Flax itself nothing is replaced and
this stays empty.
"""

from __future__ import annotations

import typing as tp

# 'capture', 'sow' and 'perturb' -> what `install` replaced; filled by the
# first `install`.
ORIGINALS: dict[str, tp.Callable[..., tp.Any]] = {}


def original(name: str) -> tp.Callable[..., tp.Any] | None:
  """The function ``install`` replaced for ``name``, if it replaced any."""
  return ORIGINALS.get(name)
