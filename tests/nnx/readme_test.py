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
"""Runs the Python blocks of this repository's README.

Not part of the upstream patch series (Flax's README is Flax's).
"""

import os

from absl.testing import absltest
import guides_test
import sow_layout


class ReadmeTest(absltest.TestCase):

  def test_readme_example_runs(self):
    path = os.path.join(sow_layout.ROOT, 'README.md')
    with open(path, encoding='utf-8') as f:
      blocks = guides_test.python_blocks(f.read())
    self.assertNotEmpty(blocks)
    guides_test.run_blocks(blocks, path)


if __name__ == '__main__':
  absltest.main()
