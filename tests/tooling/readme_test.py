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
"""Checks this repository's README (for users) and CONTRIBUTING.md.

The README's Python blocks run; its set-up commands are the ones ``.ci/run``
runs; it stays short, with set-up and ``install()`` near the top; neither
file quotes a measured figure (those live in ``benchmarks/RESULTS.md``); their
links (and those of RESULTS.md and the guides), the scripts their commands
run and the modules CONTRIBUTING's layout names exist.

Not part of the upstream patch series (Flax's README is Flax's).
"""

import os
import re

from absl.testing import absltest
import sow_guides
import sow_layout

ROOT = sow_layout.ROOT
README = os.path.join(ROOT, 'README.md')
CONTRIBUTING = os.path.join(ROOT, 'CONTRIBUTING.md')
RESULTS = os.path.join(ROOT, 'benchmarks', 'RESULTS.md')

DEMO_COMMAND = ('python3 -m venv .venv && . .venv/bin/activate && '
                'pip install . && python examples/demo.py')
TEST_COMMAND = ("python3 -m venv .venv && . .venv/bin/activate && "
                "pip install '.[test]' && python -m pytest -q")
MAX_README_LINES = 150
# A new user meets set-up, and what install() is for, within this many lines.
TOP_LINES = 40

FENCED = re.compile(r'^```.*?^```$', re.MULTILINE | re.DOTALL)
LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
# What a measured figure looks like in prose: a ratio (2.03x), a percentage,
# test or mutant counts, a duration.
FIGURE = re.compile(
    r'\b\d+(?:\.\d+)?x\b'
    r'|\d+(?:\.\d+)?%'
    r'|\b\d+ (?:tests? )?(?:passed|failed|skipped|killed|errors?)\b'
    r'|\b\d+ of (?:the )?\d+\b'
    r'|\b\d+(?:\.\d+)? ?(?:minutes?|min|seconds?|s|ms|us)\b')


def _read(path: str) -> str:
  with open(path, encoding='utf-8') as f:
    return f.read()


def _slug(heading: str) -> str:
  """GitHub's anchor for a Markdown heading."""
  text = heading.strip().lower()
  text = re.sub(r'[^\w\- ]', '', text)
  return text.replace(' ', '-')


def _anchors(text: str) -> set[str]:
  prose = FENCED.sub('', text)
  return {_slug(h) for h in re.findall(r'^#+ (.*)$', prose, re.MULTILINE)}


class ReadmeTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.readme = _read(README)
    self.lines = self.readme.split('\n')

  def test_readme_example_runs(self):
    blocks = sow_guides.python_blocks(self.readme)
    self.assertLen(blocks, 2)  # plain JAX, then a Flax NNX model
    sow_guides.run_blocks(blocks, README)

  def test_set_up_commands_are_the_ones_ci_runs(self):
    self.assertIn(DEMO_COMMAND, self.lines)
    self.assertIn(TEST_COMMAND, self.lines)
    ci = _read(os.path.join(ROOT, '.ci', 'run'))
    [command] = re.findall(r'^readme_command="(.*)"$', ci, re.MULTILINE)
    self.assertEqual(command, TEST_COMMAND)

  def test_short_with_set_up_and_install_near_the_top(self):
    self.assertLessEqual(len(self.lines), MAX_README_LINES)
    top = self.lines[:TOP_LINES]
    self.assertIn(DEMO_COMMAND, top)
    self.assertIn(TEST_COMMAND, top)
    self.assertIn('capture_compat.install()', '\n'.join(top))

  def test_links_to_the_guides_results_and_contributing(self):
    links = set(LINK.findall(self.readme))
    guides = os.path.join(ROOT, 'docs_nnx', 'guides')
    for name in sorted(os.listdir(guides)):
      if name.endswith('.md'):
        self.assertIn(f'docs_nnx/guides/{name}', links)
    self.assertIn('benchmarks/RESULTS.md', links)
    self.assertIn('CONTRIBUTING.md', links)

  def test_no_measured_figures_outside_results(self):
    for path in (README, CONTRIBUTING):
      prose = FENCED.sub('', _read(path))
      with self.subTest(os.path.basename(path)):
        self.assertEqual(FIGURE.findall(prose), [])
        self.assertNotRegex(prose, r'(?m)^\|.*\|$')  # no tables of results
        self.assertNotIn('bench-table', prose)
    # The figures themselves are where the two files point.
    results = _read(RESULTS)
    for section in ('What the misses of the benchmark table mean',
                    'The upstream patch series: last runs of check_patchset.sh',
                    "Flax's own tests with the overlay", 'Static checks',
                    'Mutation testing'):
      self.assertIn(f'## {section}\n', results)

  def test_links_resolve(self):
    # The guides too: they link to RESULTS.md's sections.
    guides = [sow_layout.guide_path(name) for name in sow_guides.GUIDES]
    for path in (README, CONTRIBUTING, RESULTS, *guides):
      text = FENCED.sub('', _read(path))
      for link in LINK.findall(text):
        if re.match(r'[a-z]+:', link):
          continue  # a web address
        with self.subTest(file=os.path.basename(path), link=link):
          target, _, anchor = link.partition('#')
          target = (os.path.normpath(os.path.join(os.path.dirname(path),
                                                  target))
                    if target else path)
          self.assertTrue(os.path.exists(target), target)
          if anchor:
            self.assertIn(anchor, _anchors(_read(target)))

  def test_scripts_in_commands_exist(self):
    for path in (README, CONTRIBUTING):
      text = _read(path)
      blocks = re.findall(r'^```bash\n(.*?)^```$', text,
                          re.MULTILINE | re.DOTALL)
      inline = re.findall(r'`(python [^`]+)`', FENCED.sub('', text))
      for command in '\n'.join(blocks + inline).split('\n'):
        for script in re.findall(r'(?:^|\s)((?:[\w.-]+/)+[\w.-]+\.(?:py|sh))',
                                 command):
          with self.subTest(file=os.path.basename(path), script=script):
            self.assertTrue(os.path.exists(os.path.join(ROOT, script)))

  def test_contributing_layout_names_existing_modules(self):
    text = _read(CONTRIBUTING)
    layout = text[text.index('### Layout'):text.index('### What JAX')]
    folder, listed = None, set()
    for line in layout.split('\n'):
      heading = re.match(r'^`([\w/]+)/`', line)
      if heading:
        folder = heading.group(1)
        continue
      item = re.match(r'^- ((?:`[\w/.]+`(?:, )?)+):', line)
      if item:
        for name in re.findall(r'`([\w/.]+)`', item.group(1)):
          listed.add(f'{folder}/{name}')
          with self.subTest(folder=folder, name=name):
            self.assertTrue(os.path.exists(os.path.join(ROOT, folder, name)))
    # Every module of every package and sub-package.
    for package in ('flax/nnx/sow', 'flax/nnx/capture_compat'):
      for folder, _, names in os.walk(os.path.join(ROOT, package)):
        folder = os.path.relpath(folder, ROOT)
        for name in names:
          if name.endswith('.py') and name != '__init__.py':
            self.assertIn(f'{folder}/{name}', listed)

  def test_contributing_has_the_maintainers_material(self):
    text = _read(CONTRIBUTING)
    for heading in ('## The test suite', '## How it works',
                    '### What JAX would need',
                    '## Two forms: the overlay and the upstream patch series',
                    "## Parity with Flax 0.12.8's `nnx.capture`",
                    '## Static checks', '## Mutation testing'):
      self.assertIn(f'\n{heading}\n', text)
    # Set-up is the README's: one copy of the command .ci/run checks.
    self.assertNotIn(TEST_COMMAND, text)


if __name__ == '__main__':
  absltest.main()
