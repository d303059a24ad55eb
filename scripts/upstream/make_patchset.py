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
"""Writes the upstream patch series: this repository as commits on Flax.

Usage, from the repository root, in a Python with jupytext, nbclient,
ipykernel, libcst and Flax's dependencies (this repository's venv: the docs
commits execute the guides in the patched tree)::

  python scripts/upstream/make_patchset.py FLAX_CHECKOUT OUTDIR

``FLAX_CHECKOUT`` is a clean git work tree of google/flax (Flax 0.12.8 is
commit 3a491108); it is never modified: the series is built in a temporary
clone of it, on its ``HEAD``, and written to ``OUTDIR`` by
``git format-patch --base``, with ``OUTDIR/series.json`` (each commit's key,
subject, added lines and test files, which ``check_patchset.py`` runs).

The commits (``series.py``, beside this script) come in the order a
maintainer reviews them, one concept each, each with its tests and green on
its own: the ``sow`` primitive, the interpreter over plain jaxprs, the lift
to NNX, ``capture``, each family of rules for higher-order primitives,
``plant`` and ``perturb``, ``nnx.capture`` and ``Module.sow`` on the
transform, the codemod, the guides. A commit lists the files of ours it
adds (every file of ours goes with exactly one commit, or is named in
``NOT_SHIPPED``) and the edits it makes to Flax's files
(``flax_integration.py``). The packages' ``__init__.py`` files that import
their modules (``AGGREGATORS``) grow with the series: at each commit they
import only the modules it has (``partial_aggregator``). A commit adds at
most ``BUDGET`` lines, unless it says why not (``Commit.oversize``); the
``.ipynb`` of a guide whose ``.md`` the commit adds is counted and shown but
not budgeted (``added_lines``).

Our tests go to ``tests/nnx/sow/`` in Flax's tree (the groups of
``tests/nnx/sow/sow_layout.py``: the transform's tests keep their path, the
compat layer's, the codemod's and the guides' go below it): directories
without ``__init__.py``, as Flax's ``tests/nnx/nn/``, so that their helpers
import as they do here and their ``conftest.py`` (the global-state guard)
covers only them. Apply the series with ``git am OUTDIR/*.patch``;
``check_patchset.sh`` applies and tests it, commit by commit. Commits are
dated as this repository's ``HEAD``, so the same inputs give the same
series.

A checkout may lack the blobs of some files (a partial mirror): they are
left out of the temporary clone's work tree (sparse checkout) and counted
as promised objects, which is possible only because no commit of the series
touches them.
"""

from __future__ import annotations

import argparse
import ast
import glob
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap
import typing as tp

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
# pylint: disable-next=g-import-not-at-top,wrong-import-position
import flax_integration  # noqa: E402


def _load_layout():
  """``tests/nnx/sow/sow_layout.py``: where each group of our tests goes."""
  path = REPO / 'tests' / 'nnx' / 'sow' / 'sow_layout.py'
  spec = importlib.util.spec_from_file_location('_sow_layout', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


LAYOUT = _load_layout()
# Where our tests go in Flax's tree: every group of sow_layout.GROUPS is
# below it.
FLAX_TESTS = LAYOUT.GROUPS['sow'][1]
# Every file under these paths is ours: it goes with one commit of the
# series, or is named in NOT_SHIPPED.
OURS = ('flax/nnx/sow', 'flax/nnx/capture_compat',
        'scripts/migrate/migrate_sow.py', 'scripts/migrate/sow_migrate',
        'tests')
# This repository's own: the conftest.py that shares the helpers with its
# test folders, and the tests of its tooling (scripts/upstream, the
# benchmarks, the mutation table, the README, the codemod on other
# repositories' checkouts).
# The Gemma walkthrough runs on a clone of Flax given by its path; in
# Flax's own tree the example is at hand, and the guide is not adapted to
# read it there yet.
NOT_SHIPPED = ('tests/conftest.py', 'tests/tooling',
               'tests/docs/gemma_walkthrough_guide_test.py')
# The packages' __init__.py files that import their modules: at each commit
# they import the modules it has.
AGGREGATORS = (
    'flax/nnx/sow/__init__.py',
    'flax/nnx/sow/transform/__init__.py',
    'flax/nnx/sow/transform/rules/__init__.py',
    'flax/nnx/capture_compat/__init__.py',
)
# Packages whose modules an aggregator may import.
PACKAGES = ('flax.nnx.sow', 'flax.nnx.capture_compat')
# The most lines a commit adds, tests included, unless it says why.
BUDGET = 1500


class PatchsetError(RuntimeError):
  """The series cannot be made; the message says why."""


# ---------------------------------------------------------------------------
# git
# ---------------------------------------------------------------------------


def git(cwd: pathlib.Path, *args: str, env: dict[str, str] | None = None,
        check: bool = True) -> str:
  proc = subprocess.run(
      ['git', *args], cwd=cwd, capture_output=True, text=True,
      env={**os.environ, **(env or {})},
  )
  if check and proc.returncode:
    raise PatchsetError(
        f'git {" ".join(args)} (in {cwd}) failed:\n{proc.stderr.strip()}'
    )
  return proc.stdout


def check_checkout(checkout: pathlib.Path) -> str:
  """The commit of a clean git work tree's HEAD; refuses anything else."""
  if not checkout.is_dir():
    raise PatchsetError(f'{checkout}: no such directory')
  proc = subprocess.run(
      ['git', 'rev-parse', '--show-toplevel'], cwd=checkout,
      capture_output=True, text=True,
  )
  if proc.returncode or pathlib.Path(proc.stdout.strip()).resolve() != (
      checkout.resolve()):
    raise PatchsetError(
        f'{checkout}: not the root of a git work tree (a clone of'
        ' google/flax is needed; a plain copy has no history for'
        ' git format-patch)'
    )
  if not (checkout / 'flax' / 'nnx' / 'module.py').exists():
    raise PatchsetError(f'{checkout}: not a Flax checkout (no'
                        ' flax/nnx/module.py)')
  dirty = git(checkout, 'status', '--porcelain')
  if dirty.strip():
    raise PatchsetError(
        f'{checkout}: the work tree has changes; commit or stash them'
        f' first:\n{dirty.rstrip()}'
    )
  return git(checkout, 'rev-parse', 'HEAD').strip()


def missing_blobs(repo: pathlib.Path, commit: str) -> list[str]:
  """Paths of ``commit`` whose blobs the repository does not have."""
  listing = git(repo, 'ls-tree', '-r', '-z', commit)
  entries = [e.split('\t', 1) for e in listing.split('\0') if e]
  blobs = [(meta.split()[2], path) for meta, path in entries
           if meta.split()[1] == 'blob']
  proc = subprocess.run(
      ['git', 'cat-file', '--batch-check=%(objectname) %(objecttype)'],
      cwd=repo, input=''.join(f'{h}\n' for h, _ in blobs),
      capture_output=True, text=True, check=True,
  )
  absent = {line.split()[0] for line in proc.stdout.splitlines()
            if line.endswith(' missing')}
  return [path for h, path in blobs if h in absent]


def clone(checkout: pathlib.Path, commit: str,
          destination: pathlib.Path) -> list[str]:
  """A work tree of ``commit`` at ``destination``; returns the paths left
  out because their blobs are missing."""
  git(checkout, 'clone', '-q', '--no-checkout', '--shared',
      str(checkout), str(destination))
  absent = missing_blobs(destination, commit)
  if absent:
    # Git accepts a missing blob under a promisor remote if the entry is
    # outside the sparse checkout.
    git(destination, 'config', 'core.repositoryformatversion', '1')
    git(destination, 'config', 'extensions.partialClone', 'origin')
    git(destination, 'config', 'remote.origin.promisor', 'true')
    patterns = ['/*'] + [f'!/{path}' for path in absent]
    git(destination, 'sparse-checkout', 'set', '--no-cone', *patterns)
  git(destination, 'checkout', '-q', '-B', 'sow-patchset', commit)
  return absent


# ---------------------------------------------------------------------------
# Our files and where they go
# ---------------------------------------------------------------------------


def files_under(relative: str) -> list[str]:
  """The files of ours at ``relative`` (a file, or a folder's files)."""
  path = REPO / relative
  if path.is_file():
    return [relative]
  if not path.is_dir():
    raise PatchsetError(f'{relative}: missing from this repository')
  return sorted(
      str(p.relative_to(REPO)) for p in path.rglob('*')
      if p.is_file() and '__pycache__' not in p.parts
      and p.suffix not in ('.pyc', '.pyo')
  )


def flax_path(relative: str) -> str:
  """Where a file of ours goes in Flax's tree: a test file to its group's
  folder there (``sow_layout.GROUPS``), anything else to the same path."""
  if not relative.startswith('tests/'):
    return relative
  for ours, flax in LAYOUT.GROUPS.values():
    if relative.startswith(ours + '/'):
      return flax + relative[len(ours):]
  raise PatchsetError(f'{relative}: in no group of sow_layout.GROUPS')


def is_test(relative: str) -> bool:
  return relative.startswith('tests/') and relative.endswith('_test.py')


def commit_files(step) -> list[str]:
  """The files of ours ``step`` adds, in this repository."""
  return [f for relative in step.files for f in files_under(relative)]


def shipped_tests() -> list[str]:
  """Every file of our tests that goes with the series, as here."""
  return [f for step in commits() for f in commit_files(step)
          if f.startswith('tests/')]


def check_files_classified(steps: tp.Sequence[tp.Any] | None = None) -> None:
  """Every file of ours goes with exactly one commit, or is not shipped."""
  steps = commits() if steps is None else steps
  owner: dict[str, str] = {}
  for step in steps:
    for path in commit_files(step):
      if path in owner:
        raise PatchsetError(
            f'{path}: in two commits, {owner[path]!r} and {step.key!r}')
      owner[path] = step.key
  ours = {f for root in OURS if (REPO / root).exists()
          for f in files_under(root)}
  unshipped = {f for root in NOT_SHIPPED for f in files_under(root)}
  unlisted = sorted(ours - unshipped - owner.keys())
  if unlisted:
    raise PatchsetError(
        f'{unlisted} go with no commit; list them in series.py (a commit)'
        ' or in make_patchset.NOT_SHIPPED')
  shipped_and_not = sorted(unshipped & owner.keys())
  if shipped_and_not:
    raise PatchsetError(f'{shipped_and_not}: in a commit and NOT_SHIPPED')
  strays = sorted(owner.keys() - ours)
  if strays:
    raise PatchsetError(f'{strays}: listed in series.py but not ours')


# ---------------------------------------------------------------------------
# The packages' __init__.py files, commit by commit
# ---------------------------------------------------------------------------


def present_modules(tree: pathlib.Path) -> set[str]:
  """The modules of ``PACKAGES`` in ``tree``."""
  found = set()
  for package in PACKAGES:
    folder = tree.joinpath(*package.split('.'))
    for path in folder.rglob('*.py') if folder.is_dir() else ():
      parts = path.relative_to(tree).with_suffix('').parts
      if parts[-1] == '__init__':
        parts = parts[:-1]
      found.add('.'.join(parts))
  return found


def _is_ours(module: str) -> bool:
  return any(module == p or module.startswith(p + '.') for p in PACKAGES)


def _imported_module(node: ast.stmt, alias: ast.alias,
                     modules: tp.Collection[str]) -> str | None:
  """The module of ours that ``alias`` of import ``node`` needs, if any."""
  if isinstance(node, ast.Import):
    return alias.name if _is_ours(alias.name) else None
  assert isinstance(node, ast.ImportFrom)
  if node.level or not node.module or not _is_ours(node.module):
    return None
  submodule = f'{node.module}.{alias.name}'
  return submodule if submodule in modules else node.module


def _names_read(node: ast.AST) -> set[str]:
  return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bound(node: ast.stmt) -> set[str]:
  return {(a.asname or a.name.split('.')[0]) for a in node.names}


def _is_all(node: ast.stmt) -> bool:
  return isinstance(node, ast.Assign) and [
      getattr(t, 'id', None) for t in node.targets] == ['__all__']


def partial_aggregator(text: str, present: tp.Collection[str],
                       modules: tp.Collection[str],
                       where: str = '__init__.py') -> str:
  """An aggregator ``__init__.py`` as a commit that has only the modules
  ``present`` (of ``modules``, all of ours) has it.

  The imports of absent modules go, with the statements that read what they
  bound (and the comment lines right above them), the imports only those
  statements read, and their names in ``__all__``. A run of blank lines
  where lines went keeps one blank line (none if it had none).

  Raises:
    PatchsetError: one import statement imports a present and an absent
      module.
  """
  tree = ast.parse(text)
  body = tree.body
  lines = text.splitlines()
  drop: set[int] = set()
  gone: set[str] = set()
  for i, node in enumerate(body):
    if not isinstance(node, (ast.Import, ast.ImportFrom)):
      continue
    needed = [_imported_module(node, a, modules) for a in node.names]
    absent = [m is not None and m not in present for m in needed]
    if any(absent) and not all(absent):
      raise PatchsetError(f'{where}:{node.lineno}: one import of present'
                          ' and absent modules')
    if any(absent):
      drop.add(i)
      gone |= _bound(node)
  changed = bool(drop)
  while changed:
    changed = False
    for i, node in enumerate(body):
      if i in drop or _is_all(node) or (
          i == 0 and isinstance(node, ast.Expr)):
        continue
      if _names_read(node) & gone:
        drop.add(i)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
          gone |= _bound(node)
        changed = True
  kept_reads = set().union(*(
      _names_read(n) for i, n in enumerate(body)
      if i not in drop and not isinstance(n, (ast.Import, ast.ImportFrom))))
  dropped_reads = set().union(*(_names_read(body[i]) for i in drop))
  for i, node in enumerate(body):
    if i not in drop and isinstance(node, (ast.Import, ast.ImportFrom)):
      names = _bound(node)
      if names & dropped_reads and not names & kept_reads:
        drop.add(i)
  out: list[str | None] = list(lines)
  for i in drop:
    node = body[i]
    start = node.lineno - 1
    while start > 0 and lines[start - 1].lstrip().startswith('#'):
      start -= 1
    out[start:node.end_lineno] = [None] * (node.end_lineno - start)
  for node in body:
    if _is_all(node) and out[node.lineno - 1] is not None:
      names = [e.value for e in node.value.elts if e.value not in gone]
      line = f'__all__ = {names!r}'
      if len(line) > 80:  # one name per item, wrapped as pyink wraps it
        line = '\n'.join(['__all__ = [', *textwrap.wrap(
            ' '.join(f'{n!r},' for n in names), 80,
            initial_indent='    ', subsequent_indent='    '), ']'])
      out[node.lineno - 1:node.end_lineno] = (
          [line] + [None] * (node.end_lineno - node.lineno))
  kept: list[str] = []
  run: list[str | None] = []
  for line in [*out, '<end>']:
    if line is None or not line.strip():
      run.append(line)
      continue
    if None in run:
      run = [''] if any(r is not None for r in run) else []
    kept += tp.cast(list, run)
    run = []
    kept.append(line)
  kept.pop()
  result = '\n'.join(kept).rstrip('\n') + '\n'
  ast.parse(result)
  return result


def update_aggregators(tree: pathlib.Path) -> list[str]:
  """Brings the aggregators in ``tree`` to the modules it has; returns the
  files written."""
  present = present_modules(tree)
  modules = present_modules(REPO)
  written = []
  for relative in AGGREGATORS:
    path = tree / relative
    if not path.exists():
      continue
    text = partial_aggregator((REPO / relative).read_text(encoding='utf-8'),
                              present, modules, relative)
    if text != path.read_text(encoding='utf-8'):
      path.write_text(text, encoding='utf-8')
      written.append(str(path))
  return written


# ---------------------------------------------------------------------------
# The commits
# ---------------------------------------------------------------------------


def copy_ours(source: pathlib.Path, target: pathlib.Path) -> list[str]:
  """Copies a file of ours; returns the file written."""
  if target.exists():
    raise PatchsetError(f'{target}: already exists in the checkout')
  if not source.is_file():
    raise PatchsetError(f'{source}: missing from this repository')
  target.parent.mkdir(parents=True, exist_ok=True)
  shutil.copy2(source, target)
  return [str(target)]


def edit(tree: pathlib.Path, relative: str,
         function: tp.Callable[[str], str]) -> list[str]:
  path = tree / relative
  if not path.exists():
    raise PatchsetError(f'{path}: missing from the checkout')
  path.write_text(function(path.read_text(encoding='utf-8')),
                  encoding='utf-8')
  return [str(path)]


def apply_commit(tree: pathlib.Path, step: tp.Any) -> list[str]:
  """Makes ``step``'s changes in ``tree``; returns the files written."""
  written = []
  for relative in commit_files(step):
    written += copy_ours(REPO / relative, tree / flax_path(relative))
  for relative, function in step.edits:
    written += edit(tree, relative, function)
  if step.make is not None:
    written += step.make(tree)
  written += update_aggregators(tree)
  return written


def commits() -> tuple[tp.Any, ...]:
  """The series, in review order (``series.py``, beside this script)."""
  series = sys.modules.get('series')
  if series is None:
    spec = importlib.util.spec_from_file_location('series', HERE / 'series.py')
    series = importlib.util.module_from_spec(spec)
    sys.modules['series'] = series  # its dataclass looks its module up
    spec.loader.exec_module(series)
  return series.COMMITS


# ---------------------------------------------------------------------------
# Building and writing the series
# ---------------------------------------------------------------------------


def _identity() -> dict[str, str]:
  """Author and dates of the commits: this repository's HEAD's."""
  fields = git(REPO, 'log', '-1', '--format=%an%x00%ae%x00%cI').strip()
  name, email, date = fields.split('\0')
  return {
      'GIT_AUTHOR_NAME': name, 'GIT_AUTHOR_EMAIL': email,
      'GIT_COMMITTER_NAME': name, 'GIT_COMMITTER_EMAIL': email,
      'GIT_AUTHOR_DATE': date, 'GIT_COMMITTER_DATE': date,
  }


def commit(tree: pathlib.Path, step: tp.Any, written: list[str],
           identity: dict[str, str]) -> str:
  git(tree, 'add', '-A')
  staged = set(git(tree, 'diff', '--cached', '--name-only', '-z')
               .split('\0')) - {''}
  expected = {str(pathlib.Path(p).resolve().relative_to(tree.resolve()))
              for p in written}
  if staged != expected:
    raise PatchsetError(
        f'commit {step.key}: the tree changed in {sorted(staged - expected)}'
        f' unexpectedly, or {sorted(expected - staged)} did not change'
    )
  message = f'{step.subject}\n\n{step.body}\n'
  proc = subprocess.run(
      ['git', 'commit', '-q', '--no-verify', '-F', '-'], cwd=tree,
      input=message, capture_output=True, text=True,
      env={**os.environ, **identity},
  )
  if proc.returncode:
    raise PatchsetError(f'commit {step.key} failed:\n{proc.stderr}')
  return git(tree, 'rev-parse', 'HEAD').strip()


def added_lines(tree: pathlib.Path) -> tuple[int, int]:
  """The lines ``HEAD`` adds (binary files count none), and how many of them
  are in the ``.ipynb`` of a guide whose ``.md`` it adds or changes too.

  Flax keeps each guide as a Jupytext pair, the notebook being the Markdown
  file again as JSON, with its outputs: a reviewer reads the ``.md``, and
  ``jupytext --sync`` (a pre-commit hook) writes the ``.ipynb``. Those lines
  are counted and shown, but not held against the budget.
  """
  numstat = git(tree, 'diff', '--numstat', 'HEAD~1', 'HEAD')
  rows = [(int(added), path) for added, _, path in
          (line.split('\t', 2) for line in numstat.splitlines())
          if added != '-']
  paths = {path for _, path in rows}
  paired = sum(added for added, path in rows
               if path.endswith('.ipynb')
               and path[:-len('.ipynb')] + '.md' in paths)
  return sum(added for added, _ in rows), paired


def selected(with_docs: bool = True) -> list[tp.Any]:
  return [c for c in commits() if with_docs or not c.key.startswith('docs')]


def make_patchset(checkout: pathlib.Path, outdir: pathlib.Path,
                  with_docs: bool = True) -> list[pathlib.Path]:
  """Writes the series for ``checkout``'s HEAD to ``outdir``, and
  ``outdir/series.json``.

  Returns:
    The patch files, in order.

  Raises:
    PatchsetError: a file of ours goes with no commit or with two, an edit
      or a commit fails, or a commit adds more than ``BUDGET`` lines without
      saying why.
  """
  check_files_classified()
  base = check_checkout(checkout)
  identity = _identity()
  steps = selected(with_docs)
  manifest = []
  with tempfile.TemporaryDirectory(prefix='sow-patchset-') as tmp:
    tree = pathlib.Path(tmp) / 'flax'
    absent = clone(checkout, base, tree)
    if absent:
      print(f'note: {len(absent)} file(s) of {base[:8]} have no blob in'
            f' the checkout (a partial mirror), left out: {absent}')
    for step in steps:
      written = apply_commit(tree, step)
      sha = commit(tree, step, written, identity)
      added, paired = added_lines(tree)
      budgeted = added - paired
      tests = [flax_path(f) for f in commit_files(step) if is_test(f)]
      manifest.append({'key': step.key, 'subject': step.subject,
                       'added': added, 'paired_notebook': paired,
                       'files': len(written), 'tests': tests,
                       'oversize': step.oversize})
      notes = [f'{paired} of them the paired .ipynb'] if paired else []
      if budgeted > BUDGET:
        notes.append('over budget: see oversize')
      note = f' ({"; ".join(notes)})' if notes else ''
      print(f'{sha[:8]} +{added:<5} {step.subject}{note}')
      if budgeted > BUDGET and not step.oversize:
        raise PatchsetError(
            f'commit {step.key} adds {budgeted} lines (not counting a paired'
            f' .ipynb), more than {BUDGET}: split it, or say why it cannot'
            ' be (Commit.oversize)')
      if step.oversize and budgeted <= BUDGET:
        raise PatchsetError(
            f'commit {step.key} says why it is over budget (oversize), but'
            f' adds {budgeted} lines (not counting a paired .ipynb): remove'
            ' the reason')
    outdir.mkdir(parents=True, exist_ok=True)
    for old in glob.glob(str(outdir / '[0-9][0-9][0-9][0-9]-*.patch')):
      os.remove(old)
    git(tree, 'format-patch', '-q', '--no-signature', f'--base={base}',
        '-o', str(outdir.resolve()), f'{base}..HEAD')
  patches = sorted(outdir.glob('[0-9][0-9][0-9][0-9]-*.patch'))
  if len(patches) != len(steps):
    raise PatchsetError(f'{outdir}: expected {len(steps)} patches, found'
                        f' {len(patches)}')
  for entry, patch in zip(manifest, patches):
    entry['patch'] = patch.name
  (outdir / 'series.json').write_text(json.dumps(manifest, indent=2) + '\n')
  print(f'{len(patches)} patches on {base} in {outdir}')
  return patches


def parse_args(argv: tp.Sequence[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('checkout', type=pathlib.Path,
                      help='a clean git checkout of google/flax')
  parser.add_argument('outdir', type=pathlib.Path,
                      help='where the .patch files are written')
  parser.add_argument(
      '--without-docs', action='store_true',
      help='leave out the docs commits; the series is then incomplete')
  return parser.parse_args(argv)


def main(argv: tp.Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  try:
    make_patchset(args.checkout, args.outdir, with_docs=not args.without_docs)
  except (PatchsetError, flax_integration.EditError, RuntimeError) as e:
    print(f'make_patchset: error: {e}', file=sys.stderr)
    return 1
  if args.without_docs:
    print('warning: --without-docs: the docs commits are left out')
  return 0


if __name__ == '__main__':
  sys.exit(main())
