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

Design. ``sow_p`` is an identity primitive (``primitive``); what gives it a
meaning is an interpretation of the program that holds it, driven by one
table of rules, one per higher-order primitive (``rules``; ``dispatch``
decides which equation needs one, and refuses, naming it, a higher-order
primitive without a rule). The program reaches the table in one of two
ways:

* Eagerly (outside any JAX trace), at the trace level (``eager``): ``f``
  runs as a direct call under a JAX trace that records each ``sow_p`` bind as
  it happens and hands each higher-order primitive holding a handled sow
  (``jit``, ``scan``, ``cond``, ``while``, ``remat``, ``shard_map``, custom
  derivative calls) to its rule; the sub-jaxpr a rule transforms is cached
  by the sub-jaxpr JAX hands over, and JAX reuses the jaxpr of an inner
  ``jax.jit`` across calls, so it compiles once. ``f``'s Python runs on every
  call, as ``f`` itself would, at about its own cost; no trace of ``f`` is
  made or reused.
* Under a JAX trace, at the jaxpr level (``tracing``, ``harvest``,
  ``interpreter``, ``staging``): ``f`` is staged to a jaxpr on copies of its
  graph nodes, the sows staged into that trace are taken as they are staged,
  and the rest of the jaxpr is interpreted equation by equation under the
  enclosing trace (or rewritten once, under ``jit``); the enclosing trace is
  what JAX caches.

Both use the same sites and requests (``sites``, ``selection``), the same
records (``scope``) and the same rules; ``module_paths`` and ``taps`` name and
tap the modules of a call in either.
"""

from flax.nnx.sow.capture import capture as capture
from flax.nnx.sow.capture import sown as sown
from flax.nnx.sow.perturb import perturb as perturb
from flax.nnx.sow.plant import plant as plant
from flax.nnx.sow.primitive import sow as sow
from flax.nnx.sow.primitive import sow_p as sow_p
from flax.nnx.sow.taps import tap as tap
