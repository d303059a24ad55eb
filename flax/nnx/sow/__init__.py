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
"""A functional ``sow``/``capture`` transform for JAX and Flax NNX.

``sow(value, name=...)`` tags any value anywhere; ``capture(f)`` returns
``(out, collected)``; ``perturb`` sows gradients of intermediates; ``plant``
injects values at sow sites; ``tap`` sows the inputs and outputs of submodule
calls by module path.

Layout, in three layers; each imports only from those below it:

* ``transform/``, in plain JAX (nothing there imports Flax NNX): the identity
  primitive ``sow_p`` (``primitive``) and those of ``perturb``
  (``perturbation``), the requests, site filters and sites an interpretation
  works with (``request``, ``selection``, ``sites``), its records
  (``scope``) and planted values (``planting``), and the interpreter
  (``interpreter``) with its table of rules, one per higher-order primitive,
  registered by the modules of ``rules/``. ``interpreter.evaluate`` is the one
  way in for a jaxpr; its fast paths (``rewrite``: one call under ``jit``;
  ``staged_sows``: sows collected as they are staged) sit behind it. Eagerly
  (outside any JAX trace), ``eager`` runs ``f`` as a direct call under a
  trace that hands each sow and each higher-order primitive holding one to
  the same handling and the same rules.
* ``lift/``, on Flax NNX: a call of ``f`` over graph nodes staged on copies
  and written back (``graph_calls``, ``write_back``), the module paths that
  name ``Module.sow`` sites (``module_paths``) and the taps of submodule
  calls (``taps``). Nothing is written onto a module to name it: each call
  keeps its own map from its modules (and their Variables' arrays) to their
  paths, built at its first ``Module.sow``. A copy that a transform makes
  inside the call is none of them; its ``Module.sow`` is a *deferred* sow
  (``transform.deferred``), named where the transform's program is bound,
  by the NNX transform's record of what it copied, or by the origins of the
  Variable values the sow carries as anchors: so JAX may share one trace
  among modules of one structure, as it does without a capture. A tap sees
  submodule calls through a hook its call holds on their classes (Python
  finds methods there), which sows only for the modules the thread's
  running taps match (``class_hooks``).
* This package: the public API (``capture``, ``plant``, ``perturb``, ``tap``,
  ``sow``, ``discover``), and ``render``, the text of its tables.
  ``flax.nnx.capture_compat``, Flax's own ``nnx.capture`` and ``Module.sow``
  on this transform, sits above and nothing here imports it.

``capture`` is the one name of the capturing transform (the proposal's
example calls it ``sown``; a second name for one function is one more thing
to learn, so it is gone).
"""

import os as _os

import flax.nnx as _nnx

from flax.nnx.sow.capture import capture as capture
from flax.nnx.sow.capture_grads import capture_grads as capture_grads
from flax.nnx.sow.discover import discover as discover
from flax.nnx.sow.perturb import perturb as perturb
from flax.nnx.sow.plant import plant as plant
from flax.nnx.sow.tap import tap as tap
from flax.nnx.sow.transform import sites as _sites
from flax.nnx.sow.transform.primitive import sow as sow
from flax.nnx.sow.transform.primitive import sow_p as sow_p
from flax.nnx.sow.transform.steps import Steps as Steps

# An equation's location names the user's code, not this package's, nor
# NNX's (`nnx.while_loop` stages the loop that the user's call of it makes).
_sites.skip_frames_in(_os.path.dirname(_os.path.abspath(__file__)))
_sites.skip_frames_in(_os.path.dirname(_os.path.abspath(_nnx.__file__)))

__all__ = [
    'Steps', 'capture', 'capture_grads', 'discover', 'perturb', 'plant', 'sow',
    'sow_p', 'tap',
]
