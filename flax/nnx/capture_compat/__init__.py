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
"""``nnx.capture``, ``Module.sow`` and ``Module.perturb`` on the sow transform.

Flax 0.12.8's ``nnx.capture`` collects ``Module.sow`` values by installing a
``__captures__`` attribute on every module and, for ``method_outputs``, by
wrapping the methods of their classes. This module keeps its exact signature
and conventions but builds it on :mod:`flax.nnx.sow`:

* ``capture`` stages the call on copies of its graph nodes
  (:func:`flax.nnx.sow.lift.graph_calls.staged`), so modules are never
  mutated, not even structurally or transiently, and threads never see each
  other's values;
* inside it, ``Module.sow(T, 'n', v)`` is the functional
  ``sow(v, name=(*path, 'n'), tag=T)``, where ``path`` is the module's path
  from the captured module as :func:`nnx.iter_modules` gives it, and
  ``Module.perturb`` likewise;
* ``reduce_fn``/``init_fn`` are applied after the call, in call order, to the
  collected values.

In Flax itself, ``nnx.capture``, ``Module.sow`` and ``Module.perturb`` are
these implementations. On a released Flax (the overlay), :func:`install`
points ``nnx.capture``, ``flax.nnx.module.capture``, ``Module.sow`` and
``Module.perturb`` at them, and :func:`uninstall` points them back; code
written for Flax 0.12.8 runs unchanged. As context managers, both hold their
state for a block, safely across threads: ``with install():`` blocks running
at once in several threads keep the overlay on until the last one exits,
then leave it as it was; a ``with uninstall():`` block (or a plain call)
that would switch it off under another thread's block raises
``RuntimeError`` instead (see :func:`install`).

Example::

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> from flax.nnx import capture_compat
  >>> class Block(nnx.Module):
  ...   def __init__(self, rngs):
  ...     self.linear = nnx.Linear(2, 2, rngs=rngs)
  ...   def __call__(self, x):
  ...     y = self.linear(x)
  ...     self.sow(nnx.Intermediate, 'y', y)
  ...     return y
  >>> class Model(nnx.Module):
  ...   def __init__(self, rngs):
  ...     self.blocks = nnx.List([Block(rngs), Block(rngs)])
  ...   def __call__(self, x):
  ...     for block in self.blocks:
  ...       x = block(x)
  ...     return x
  >>> model = Model(nnx.Rngs(0))
  >>> with capture_compat.install():
  ...   out, intermediates = nnx.capture(model, nnx.Intermediate)(jnp.ones(2))
  >>> [path for path, _ in nnx.to_flat_state(intermediates)]
  [('blocks', 0, 'y'), ('blocks', 1, 'y')]
"""

from __future__ import annotations

import os

from flax.nnx.capture_compat.capture import capture
from flax.nnx.capture_compat.overlay import delegates
from flax.nnx.capture_compat.overlay import install
from flax.nnx.capture_compat.overlay import is_installed
from flax.nnx.capture_compat.overlay import uninstall
from flax.nnx.capture_compat.module_methods import keep_last
from flax.nnx.capture_compat.module_methods import perturb
from flax.nnx.capture_compat.module_methods import sow
from flax.nnx.sow.transform import sites

# An equation's location names the user's code, not this layer's.
sites.skip_frames_in(os.path.dirname(os.path.abspath(__file__)))

__all__ = [
    'capture', 'delegates', 'install', 'is_installed', 'keep_last',
    'perturb', 'sow', 'uninstall',
]
