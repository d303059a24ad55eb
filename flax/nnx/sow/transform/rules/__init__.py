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
"""The rule of each higher-order primitive, one module per family.

Each module registers its rules in ``interpreter.RULES`` beside their
definitions; importing this package completes the table. A higher-order
primitive without a rule is refused by the plan with an error naming it.
"""

from flax.nnx.sow.transform.rules import calls as calls
from flax.nnx.sow.transform.rules import cond as cond
from flax.nnx.sow.transform.rules import (
    custom_derivatives as custom_derivatives,
)
from flax.nnx.sow.transform.rules import loops as loops
from flax.nnx.sow.transform.rules import shard_map as shard_map
