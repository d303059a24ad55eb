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
"""The Gemma walkthrough (docs_nnx/guides/gemma_walkthrough.md) runs on a
checkout of Flax given with FLAX_SOW_MODELS_FROM=PATH; it skips without."""

from absl.testing import absltest

import sow_guides


class GemmaWalkthroughGuideTest(sow_guides.GuideTestCase):

  def test_guide_runs(self):
    self.assertGuideRuns('gemma_walkthrough')


if __name__ == '__main__':
  absltest.main()
