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
"""The activations dataset guide (docs_nnx/guides/activations_dataset.md)
runs: an export, its statistics and a sparse autoencoder trained on it."""

from absl.testing import absltest

import sow_guides


class ActivationsDatasetGuideTest(sow_guides.GuideTestCase):

  def test_guide_runs(self):
    self.assertGuideRuns('activations_dataset')


if __name__ == '__main__':
  absltest.main()
