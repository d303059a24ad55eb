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
"""Puts the sow transform's documentation into a Flax checkout.

:func:`apply_docs` edits a Flax checkout in place (the docs commit of the
upstream patch series) and returns the paths it changed or added:

* our guides (``docs_nnx/guides/*.md`` here) become ``ipynb,md:myst`` pairs
  in the checkout's ``docs_nnx/guides/``, as Flax's guides are kept
  (:mod:`flax_notebooks`); links between them become ``{doc}`` roles, and
  passages between ``<!-- upstream:omit -->`` and ``<!-- upstream:end -->``
  (about this repository, not Flax) are left out;
* they are listed in the advanced guides' toctree after
  ``extracting_intermediates``;
* ``docs_nnx/api_reference/flax.nnx/sow.rst`` documents ``flax.nnx.sow`` and
  ``nnx.capture``, listed after ``transforms`` in the API reference;
* Flax's ``extracting_intermediates`` guide is rewritten for the new
  ``nnx.capture`` (:mod:`intermediates_guide`);
* ``CHANGELOG.md`` gets an entry under vNext.

Paths of our tests and test folders (``tests/...``) become their place in
Flax's tree (``make_patchset.flax_path``: all below ``tests/nnx/sow/``); a
path of a test that does not ship with the series is refused, as a link that
would not resolve is. The pairs are
written without outputs; ``guide_outputs.py`` executes them in the patched
tree and stores the outputs, as Flax keeps its guides. All of them run in
Flax (``docs_nnx/conf.py`` is not edited): the comparisons with Flax 0.12.8's
own ``nnx.capture`` in the behavior-changes guide are passages about this
repository, left out, and the migration guide's codemod and libcst come with
the series.

Every edit finds its place by the checkout's own text and fails with the
file and what it looked for if that text is not there; nothing is edited
twice (running it on an edited checkout fails on the first guide).

Usage: ``python scripts/upstream/flax_docs.py FLAX_CHECKOUT``.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import typing as tp

import flax_notebooks
import intermediates_guide

# In the order a reader should take them: the transform, the interventions
# and the activation datasets built on it, then what changes for nnx.capture
# users, the errors, the codemod.
GUIDES = (
    'sow_transform', 'interventions', 'activations_dataset',
    'capture_behavior_changes',
    'sow_bad_inputs', 'migrate_sow',
)
GUIDES_DIR = pathlib.Path('docs_nnx', 'guides')
TOCTREE = pathlib.Path('docs_nnx', 'guides_advanced.rst')
TOCTREE_AFTER = 'guides/extracting_intermediates'
API_DIR = pathlib.Path('docs_nnx', 'api_reference', 'flax.nnx')
API_PAGE = API_DIR / 'sow.rst'
API_AFTER = 'transforms'
CHANGELOG = pathlib.Path('CHANGELOG.md')

# With the blank line before it, if any: the one after it stays.
OMIT = re.compile(
    r'(?:^\n)?^<!-- upstream:omit -->\n.*?^<!-- upstream:end -->\n',
    re.M | re.S,
)
MARKER = re.compile(r'<!-- upstream:\w+ -->')
LINK = re.compile(r'\[([^\]]+)\]\(([^)\s]+)\)')
FENCED = re.compile(r'(^```.*?^```$)', re.M | re.S)
# A path of a test file or a test folder of ours.
TEST_PATH = re.compile(
    r'\btests/(?:\w+/)*\w+\.py\b|\btests/(?:\w+/)+(?![\w.])')


# Titled by the package: the page's file name, the other pages' style, would
# make the section label "sow", which pytree.ipynb's "### sow" already has
# (autosectionlabel: labels are unique across the docs).
API_TEXT = """\
flax.nnx.sow
------------------------

.. automodule:: flax.nnx.sow
.. currentmodule:: flax.nnx.sow

.. autofunction:: sow
.. autofunction:: capture
.. autofunction:: perturb
.. autofunction:: plant
.. autofunction:: tap
.. autofunction:: capture_grads
.. autofunction:: discover

.. automodule:: flax.nnx.sow.activations
.. currentmodule:: flax.nnx.sow.activations

.. autofunction:: export
.. autoclass:: Dataset
  :members:

.. currentmodule:: flax.nnx

.. autofunction:: capture
"""

CHANGELOG_ENTRY = (
    '- added `flax.nnx.sow`, a functional transform that collects'
    ' intermediate values from any JAX function (`sow`, `capture`,'
    ' `perturb`, `plant`); `nnx.capture`, `Module.sow` and `Module.perturb`'
    ' now run on it and no longer modify modules (no `__captures__`'
    ' attribute); `flax.nnx.sow.activations.export` streams sown values to'
    ' a zarr store on disk. See the `sow_transform`, `activations_dataset`'
    ' and `capture_behavior_changes` guides.'
)


def _read(checkout: pathlib.Path, path: pathlib.Path) -> str:
  if not (checkout / path).exists():
    raise FileNotFoundError(
        f'{checkout / path} not found: is {checkout} a complete Flax checkout'
        ' (git clone or git archive)?'
    )
  return (checkout / path).read_text()


def _one_line(text: str, line: str, where: pathlib.Path) -> int:
  """The index of the only line of ``text`` equal to ``line`` (stripped)."""
  found = [
      i for i, each in enumerate(text.splitlines()) if each.strip() == line
  ]
  if len(found) != 1:
    raise ValueError(
        f'{where}: expected one line {line!r}, found {len(found)}'
    )
  return found[0]


def _insert_lines_after(
    checkout: pathlib.Path, path: pathlib.Path, after: str, new: list[str]
) -> pathlib.Path:
  """Inserts ``new`` after the line ``after``, with that line's indent."""
  text = _read(checkout, path)
  lines = text.splitlines(keepends=True)
  index = _one_line(text, after, path)
  indent = lines[index][:len(lines[index]) - len(lines[index].lstrip())]
  for name in new:
    if any(each.strip() == name for each in lines):
      raise ValueError(f'{path}: already lists {name!r}')
  lines[index + 1:index + 1] = [f'{indent}{name}\n' for name in new]
  (checkout / path).write_text(''.join(lines))
  return checkout / path


# --- our guides -------------------------------------------------------------


def flax_text(text: str, where: pathlib.Path) -> str:
  """Our guide's text without the passages about this repository."""
  text = OMIT.sub('', text)
  if MARKER.search(text):
    raise ValueError(f'{where}: unpaired {MARKER.search(text).group(0)}')
  return text


def flax_test_paths(
    text: str, shipped: tp.Mapping[str, str], where: pathlib.Path
) -> str:
  """Paths of our tests (``tests/...``, a file or a folder) as their place in
  Flax's tree; ``shipped`` maps the test files that go with the series to
  theirs."""

  def path(match: re.Match[str]) -> str:
    name = match.group(0)
    if name in shipped:
      return shipped[name]
    if name.endswith('/'):
      inside = sorted(f for f in shipped if f.startswith(name))
      if inside:
        ours, flax = inside[0], shipped[inside[0]]
        return flax[:len(flax) - len(ours) + len(name)]
    raise ValueError(
        f'{where}: {name} does not ship with the series; wrap the passage in'
        ' <!-- upstream:omit --> ... <!-- upstream:end -->'
    )

  return TEST_PATH.sub(path, text)


def flax_links(markdown: str, where: pathlib.Path) -> str:
  """Links between guides as ``{doc}`` roles (outside code blocks); any
  other relative link would not resolve in Flax and is refused."""

  def link(match: re.Match[str]) -> str:
    label, target = match.groups()
    if re.match(r'[a-z]+://', target) or target.startswith('#'):
      return match.group(0)
    stem = target.removesuffix('.md')
    if '/' in stem or '#' in stem or stem not in GUIDES or '`' in label:
      raise ValueError(
          f'{where}: link {match.group(0)!r} would not resolve in Flax;'
          ' link to a guide by name, or wrap the passage in'
          ' <!-- upstream:omit --> ... <!-- upstream:end -->'
      )
    return f'{{doc}}`{label} <{stem}>`'

  # Odd pieces are fenced code blocks, kept as they are.
  pieces = FENCED.split(markdown)
  for i in range(0, len(pieces), 2):
    pieces[i] = LINK.sub(link, pieces[i])
  return ''.join(pieces)


def add_guide(
    checkout: pathlib.Path, ours: pathlib.Path, name: str, pin: str,
    shipped: tp.Collection[str],
) -> list[pathlib.Path]:
  source = ours / GUIDES_DIR / f'{name}.md'
  stem = checkout / GUIDES_DIR / name
  for path in (stem.with_suffix('.md'), stem.with_suffix('.ipynb')):
    if path.exists():
      raise FileExistsError(f'{path} exists already')
  text = flax_text(source.read_text(), source)
  notebook = flax_notebooks.read_guide_text(
      flax_test_paths(text, shipped, source)
  )
  for cell in notebook.cells:
    if cell.cell_type == 'markdown':
      cell.source = flax_links(cell.source, source)
  notebook = flax_notebooks.as_flax_guide(notebook, name)
  return flax_notebooks.write_pair(notebook, stem, flax_notebooks.MYST, pin)


# --- toctree, API reference, CHANGELOG --------------------------------------


def add_to_toctree(checkout: pathlib.Path) -> pathlib.Path:
  return _insert_lines_after(
      checkout, TOCTREE, TOCTREE_AFTER, [f'guides/{g}' for g in GUIDES]
  )


def add_guide_to_toctree(checkout: pathlib.Path, name: str) -> pathlib.Path:
  """Lists one guide in the toctree, in ``GUIDES``' order among those
  listed already (after ``extracting_intermediates`` if none is): the
  series adds the guides one commit each."""
  text = _read(checkout, TOCTREE)
  listed = {line.strip() for line in text.splitlines()}
  after = TOCTREE_AFTER
  for earlier in GUIDES[:GUIDES.index(name)]:
    if f'guides/{earlier}' in listed:
      after = f'guides/{earlier}'
  return _insert_lines_after(checkout, TOCTREE, after, [f'guides/{name}'])


def add_api_page(checkout: pathlib.Path) -> list[pathlib.Path]:
  page = checkout / API_PAGE
  if page.exists():
    raise FileExistsError(f'{page} exists already')
  index = _insert_lines_after(
      checkout, API_DIR / 'index.rst', API_AFTER, [API_PAGE.stem]
  )
  page.write_text(API_TEXT)
  return [index, page]


def add_changelog_entry(checkout: pathlib.Path) -> pathlib.Path:
  """Fills the first empty ``-`` line of the vNext section, as Flax's
  CHANGELOG asks (an empty line, to avoid merge conflicts)."""
  lines = _read(checkout, CHANGELOG).splitlines(keepends=True)
  try:
    start = next(
        i for i, each in enumerate(lines) if each.strip() == 'vNext'
    )
  except StopIteration:
    raise ValueError(f'{CHANGELOG}: no vNext section') from None
  for i in range(start + 1, len(lines)):
    if re.fullmatch(r'\d+\.\d+\.\d+', lines[i].strip()):
      break
    if lines[i].strip() == '-':
      lines[i] = CHANGELOG_ENTRY + '\n'
      (checkout / CHANGELOG).write_text(''.join(lines))
      return checkout / CHANGELOG
  raise ValueError(f'{CHANGELOG}: no empty "-" line left under vNext')


# --- all of it --------------------------------------------------------------


def shipped_tests(ours: pathlib.Path) -> dict[str, str]:
  """Our test files that go with the series (``make_patchset.py``), each
  with its place in Flax's tree."""
  import make_patchset  # pylint: disable=g-import-not-at-top

  del ours  # make_patchset's own repository
  return {f: make_patchset.flax_path(f) for f in make_patchset.shipped_tests()}


def apply_docs(checkout: pathlib.Path, ours: pathlib.Path) -> list[str]:
  """Edits the Flax checkout ``checkout`` in place; ``ours`` is the root of
  this repository. Returns the paths changed or added, relative to
  ``checkout``, sorted."""
  checkout, ours = pathlib.Path(checkout), pathlib.Path(ours)
  pin = flax_notebooks.jupytext_pin(checkout)
  shipped = shipped_tests(ours)
  changed: list[pathlib.Path] = []
  for name in GUIDES:
    changed += add_guide(checkout, ours, name, pin, shipped)
  changed += intermediates_guide.apply(checkout, pin)
  changed.append(add_to_toctree(checkout))
  changed += add_api_page(checkout)
  changed.append(add_changelog_entry(checkout))
  return sorted({str(p.relative_to(checkout)) for p in changed})


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('checkout', type=pathlib.Path, help='a Flax checkout')
  args = parser.parse_args(argv)
  ours = pathlib.Path(__file__).resolve().parents[2]
  for path in apply_docs(args.checkout, ours):
    print(path)
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
