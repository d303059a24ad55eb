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

``sow(value, name=...)`` tags any value anywhere; ``capture(f)`` traces ``f``
to a jaxpr, interprets it and returns ``(out, collected)``; ``perturb`` sows
gradients of intermediates; ``plant`` injects values at sow sites; ``tap``
sows the inputs and outputs of submodule calls by module path.
"""

from flax.nnx.sow.capture import capture as capture
from flax.nnx.sow.capture import sown as sown
from flax.nnx.sow.perturb import perturb as perturb
from flax.nnx.sow.plant import plant as plant
from flax.nnx.sow.primitive import sow as sow
from flax.nnx.sow.primitive import sow_p as sow_p
from flax.nnx.sow.taps import tap as tap
