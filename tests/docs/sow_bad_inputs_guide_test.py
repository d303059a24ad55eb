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
"""The bad-input guide (docs_nnx/guides/sow_bad_inputs.md): it runs, and its
catalogue shows exactly the cases of ``bad_inputs_test.CASES``, each with
the error its code prints.
"""

import contextlib
import io
import re

from absl.testing import absltest
import sow_guides
import sow_layout


def catalogue_sections() -> dict[str, tuple[str, str]]:
  """``case -> (python code, text block)`` from the bad-input catalogue."""
  guide = sow_layout.guide_text('sow_bad_inputs')
  catalogue = guide.split('<!-- catalogue -->')[1]
  sections = re.split(r'^### `(\w+)`\n', catalogue, flags=re.MULTILINE)[1:]
  found = {}
  for case, body in zip(sections[::2], sections[1::2]):
    code, text = sow_guides.python_blocks(body), sow_guides.TEXT.findall(body)
    assert len(code) == 1 and len(text) == 1, case
    found[case] = (code[0], text[0].rstrip('\n'))
  return found


class SowBadInputsGuideTest(sow_guides.GuideTestCase):

  def test_guide_runs(self):
    self.assertGuideRuns('sow_bad_inputs')


class CatalogueTest(absltest.TestCase):
  """The bad-input guide shows exactly ``bad_inputs_test.CASES``."""

  def test_guide_lists_exactly_the_tested_cases_with_their_errors(self):
    cases = sow_layout.test_module('bad_inputs_test').CASES
    sections = catalogue_sections()
    self.assertEqual(list(sections), list(cases))
    for case, (_, text) in sections.items():
      self.assertEqual(text, cases[case][1], case)

  def test_guide_code_prints_the_errors_it_shows(self):
    guide = sow_layout.guide_text('sow_bad_inputs')
    setup = guide.split('<!-- catalogue -->')[0]
    namespace = {'__name__': '__guide__'}
    for block in sow_guides.python_blocks(setup):
      exec(block, namespace)  # pylint: disable=exec-used
    for case, (code, text) in catalogue_sections().items():
      out = io.StringIO()
      with contextlib.redirect_stdout(out):
        exec(code, namespace)  # pylint: disable=exec-used
      self.assertEqual(out.getvalue().rstrip('\n'), text, case)


if __name__ == '__main__':
  absltest.main()
