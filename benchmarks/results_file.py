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
"""benchmarks/RESULTS.md, where each script writes its part between markers."""

from __future__ import annotations

import os

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       'RESULTS.md')


def publish(text: str, start: str, end: str, path: str = RESULTS) -> None:
  """Puts ``text`` between the markers ``start`` and ``end`` of ``path``,
  or appends it there with them."""
  with open(path) as f:
    content = f.read()
  section = f'{start}\n{text}{end}\n'
  if start in content:
    begin = content.index(start)
    finish = content.index(end) + len(end) + 1
    content = content[:begin] + section + content[finish:]
  else:
    content = content.rstrip('\n') + '\n\n' + section
  with open(path, 'w') as f:
    f.write(content)
