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
"""Hypothesis profiles for the property tests (tests/nnx/sow_fuzz_test.py).

``ci`` is the default: 200 examples, no deadline (a first call compiles).
``pytest --hypothesis-profile=long`` (an option of hypothesis' pytest plugin)
runs 5,000. Neither keeps an example database, so runs are reproducible from
the seed hypothesis prints on failure, and no directory is written.
"""

import hypothesis

_COMMON = dict(
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
)
hypothesis.settings.register_profile('ci', max_examples=200, **_COMMON)
hypothesis.settings.register_profile('long', max_examples=5000, **_COMMON)
hypothesis.settings.load_profile('ci')
