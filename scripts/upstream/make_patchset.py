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
commit executes the guides in the patched tree)::

  python scripts/upstream/make_patchset.py FLAX_CHECKOUT OUTDIR

``FLAX_CHECKOUT`` is a clean git work tree of google/flax (Flax 0.12.8 is
commit 3a491108); it is never modified: the series is built in a temporary
clone of it, on its ``HEAD``, and written to ``OUTDIR`` by
``git format-patch --base``, in the order a maintainer reviews it:

1. ``flax/nnx/sow``, the transform, with its tests;
2. the NNX integration: ``flax/nnx/capture_compat``, ``module.py``'s
   ``Module.sow``, ``Module.perturb`` and ``capture`` calling it, ``nnx.sow``
   exported, with its tests;
3. the codemod, in ``scripts/migrate`` (outside the ``flax`` package: it
   needs libcst, which Flax does not depend on), with its tests;
4. the docs (``flax_docs.apply_docs``, beside this script), executed in the
   tree of the three commits before (``guide_outputs.py``): the migration
   guide runs the codemod, so the docs come after it.

Our tests go to ``tests/nnx/sow/`` (the groups of
``tests/nnx/sow/sow_layout.py``: the transform's keep their path, the compat
layer's, the codemod's and the guides' go below it): directories without
``__init__.py``, as Flax's ``tests/nnx/nn/``, so that their helpers import
as they do here and their ``conftest.py`` (the global-state guard) covers
only them. Apply the
series with ``git am OUTDIR/*.patch``; ``check_patchset.sh`` applies and
tests it. Commits are dated as this repository's ``HEAD``, so the same
inputs give the same series.

A checkout may lack the blobs of some files (a partial mirror): they are
left out of the temporary clone's work tree (sparse checkout) and counted
as promised objects, which is possible only because no commit of the series
touches them.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
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


# Where each group of our tests is here and goes in Flax's tree (the
# transform's keep their path, tests/nnx/sow; the others go below it).
LAYOUT = _load_layout()
FLAX_TESTS = LAYOUT.GROUPS['sow'][1]
N, C = 'tests/nnx/sow', 'tests/nnx/capture_compat'

# Our test files and folders, by the commit they go with. Every file under
# tests/ must be listed, here or in NOT_SHIPPED, so that a new test is never
# silently left out; a listed path that this tree lacks is skipped (the
# lists cover the branches being merged).
TRANSFORM_TESTS = (
    f'{N}/conftest.py',
    f'{N}/sow_layout.py',
    f'{N}/sow_testing.py',
    f'{N}/sow_pytree_models.py',
    f'{N}/sow_fuzz_programs.py',
    f'{N}/transform',
    f'{N}/lift',
    f'{N}/api',
    f'{N}/layers_test.py',
    f'{N}/bad_inputs_test.py',
    f'{N}/concurrency_and_leaks_test.py',
    f'{N}/differential_fuzz_test.py',
)
INTEGRATION_TESTS = (
    f'{N}/compat_testing.py',
    f'{N}/sow_legacy.py',
    f'{N}/sow_external_models.py',
    f'{N}/sow_multiprocess_worker.py',
    f'{N}/docstrings_test.py',
    C,
)
DOCS_TESTS = (f'{N}/sow_guides.py', 'tests/docs')
CODEMOD_TESTS = ('tests/migrate',)
# This repository's own: the conftest.py that shares the helpers with its
# test folders, and the tests of its tooling and acceptance runs.
NOT_SHIPPED = ('tests/conftest.py', 'tests/tooling')

CODEMOD = 'scripts/migrate'
CODEMOD_FILES = ('migrate_sow.py', 'sow_migrate')


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
# The commits
# ---------------------------------------------------------------------------


def copy_ours(source: pathlib.Path, target: pathlib.Path) -> list[str]:
  """Copies a file or directory of ours; returns the files written."""
  if target.exists():
    raise PatchsetError(f'{target}: already exists in the checkout')
  written = []
  if source.is_dir():
    for path in sorted(source.rglob('*')):
      if path.is_dir() or '__pycache__' in path.parts:
        continue
      if path.suffix in ('.pyc', '.pyo'):
        continue
      dest = target / path.relative_to(source)
      dest.parent.mkdir(parents=True, exist_ok=True)
      shutil.copy2(path, dest)
      written.append(dest)
  elif source.is_file():
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)
    written.append(target)
  else:
    raise PatchsetError(f'{source}: missing from this repository')
  return [str(p) for p in written]


def files_under(relative: str) -> list[str]:
  """The files of ours at ``relative`` (a file, or a folder's files)."""
  path = REPO / relative
  if path.is_file():
    return [relative]
  return sorted(
      str(p.relative_to(REPO)) for p in path.rglob('*')
      if p.is_file() and '__pycache__' not in p.parts
      and p.suffix not in ('.pyc', '.pyo')
  )


def flax_path(relative: str) -> str:
  """Where a test file of ours goes in Flax's tree (``sow_layout.GROUPS``)."""
  for ours, flax in LAYOUT.GROUPS.values():
    if relative.startswith(ours + '/'):
      return flax + relative[len(ours):]
  raise PatchsetError(f'{relative}: in no group of sow_layout.GROUPS')


def shipped_tests() -> list[str]:
  """Every test file of ours that goes with the series, as here."""
  return [f for names in (TRANSFORM_TESTS, INTEGRATION_TESTS, DOCS_TESTS,
                          CODEMOD_TESTS)
          for name in names for f in files_under(name)]


def copy_tests(tree: pathlib.Path, names: tp.Sequence[str]) -> list[str]:
  written = []
  for name in names:
    for relative in files_under(name):
      written += copy_ours(REPO / relative, tree / flax_path(relative))
  return written


def edit(tree: pathlib.Path, relative: str,
         function: tp.Callable[[str], str]) -> list[str]:
  path = tree / relative
  if not path.exists():
    raise PatchsetError(f'{path}: missing from the checkout')
  path.write_text(function(path.read_text(encoding='utf-8')),
                  encoding='utf-8')
  return [str(path)]


def check_tests_classified() -> None:
  """Every file under tests/ goes with a commit or is named as not shipped."""
  shipped = shipped_tests()
  ours = {f for name in NOT_SHIPPED for f in files_under(name)}
  twice = sorted({f for f in shipped if shipped.count(f) > 1} | (
      ours & set(shipped)))
  if twice:
    raise PatchsetError(f'{twice}: listed twice in make_patchset.py')
  unlisted = sorted(set(files_under('tests')) - set(shipped) - ours)
  if unlisted:
    raise PatchsetError(
        f'{unlisted} are not assigned to a commit; list them in'
        ' make_patchset.py (a commit, or NOT_SHIPPED)'
    )


def transform(tree: pathlib.Path) -> list[str]:
  written = copy_ours(REPO / 'flax/nnx/sow', tree / 'flax/nnx/sow')
  written += copy_tests(tree, TRANSFORM_TESTS)
  written += edit(
      tree, flax_integration.PYPROJECT_PATH,
      lambda text: flax_integration.add_testing_extra(
          text, 'hypothesis',
          'tests/nnx/sow: property tests of the sow transform'),
  )
  return written


def integration(tree: pathlib.Path) -> list[str]:
  written = copy_ours(REPO / 'flax/nnx/capture_compat',
                      tree / 'flax/nnx/capture_compat')
  written += edit(tree, flax_integration.MODULE_PATH,
                  flax_integration.delegate_module)
  written += edit(tree, flax_integration.INIT_PATH,
                  flax_integration.export_sow)
  written += copy_tests(tree, INTEGRATION_TESTS)
  return written


def docs(tree: pathlib.Path) -> list[str]:
  # pylint: disable=g-import-not-at-top
  import flax_docs
  import guide_outputs
  import intermediates_guide
  import nbformat
  # pylint: enable=g-import-not-at-top

  edited = tree / intermediates_guide.GUIDE.with_suffix('.ipynb')
  flax_cells = {c.get('id') for c in nbformat.read(edited, 4).cells}
  changed = flax_docs.apply_docs(tree, REPO)
  try:
    guide_outputs.store(
        tree, [*flax_docs.GUIDES, intermediates_guide.GUIDE.name],
        keep={intermediates_guide.GUIDE.name: flax_cells})
  except guide_outputs.GuideError as e:
    raise PatchsetError(str(e)) from None
  written = [str(tree / path) for path in changed]
  # The API reference page renders capture's docstring.
  written += edit(tree, flax_integration.MODULE_PATH,
                  flax_integration.quote_capture_returns)
  written += copy_tests(tree, DOCS_TESTS)
  return written


def codemod(tree: pathlib.Path) -> list[str]:
  written = []
  for name in CODEMOD_FILES:
    written += copy_ours(REPO / CODEMOD / name, tree / CODEMOD / name)
  written += copy_tests(tree, CODEMOD_TESTS)
  written += edit(
      tree, flax_integration.PYPROJECT_PATH,
      lambda text: flax_integration.add_ruff_exclude(
          flax_integration.add_testing_extra(
              text, 'libcst', 'scripts/migrate: the sow codemod and its tests'),
          f'{flax_path("tests/migrate/testdata")}/',
          "the codemod's input and expected files, kept as written"),
  )
  return written


@dataclasses.dataclass(frozen=True)
class Commit:
  key: str
  make: tp.Callable[[pathlib.Path], list[str]]
  subject: str
  body: str


COMMITS = (
    Commit(
        'transform', transform,
        'nnx: add flax.nnx.sow, a functional sow/capture transform',
        '''\
`sow(value, name=...)` is an identity JAX primitive that leaves a named
marker in the jaxpr, and `capture(f)` traces `f`, interprets the jaxpr and
returns `(out, collected)`: every marked value by name, from any function,
under any transform. Higher-order primitives (jit, scan, while, cond/switch,
remat, custom_jvp/custom_vjp, shard_map, ...) each have an explicit rule
that threads the sown values out, or a refusal naming the sow and the
primitive. `perturb` captures the gradient of an intermediate and `plant`
injects values at sow sites. Outside `capture` a sow costs nothing, also
under `jax.jit`.

Why: `Module.sow` and `nnx.capture` collect intermediates by mutating the
modules (a `__captures__` attribute on each, method wrappers on their
classes). That is not thread-safe, leaves state behind on error, does not
see through `jax` transforms, and cannot work with immutable (Hijax)
Variables. A jaxpr-level marker needs none of that; the next commit builds
`nnx.capture` on it.

Tests are in tests/nnx/sow/ (no `__init__.py`, as tests/nnx/nn/, so that
their helpers import by name; its conftest.py fails any of them that leaves
global state behind). The property tests use hypothesis, added to the
`testing` extra; without it they skip.'''),
    Commit(
        'integration', integration,
        'nnx: build nnx.capture, Module.sow and Module.perturb on flax.nnx.sow',
        '''\
`Module.sow`, `Module.perturb` and `nnx.capture` keep their signatures,
docstrings and conventions (one State per Variable type, nested by module
path; `reduce_fn`/`init_fn`; `init` for perturbations; `method_outputs`),
and now call `flax.nnx.capture_compat`: `capture` stages the call on copies
of the modules, as `nnx.jit` does, and inside it `Module.sow` is a
functional sow named by the module's path. The modules and their classes
are never modified, so it is thread-safe, nests, leaves nothing behind on
error, and works inside and around every NNX transform and with Hijax
Variables. Outside any capture, `Module.sow` and `Module.perturb` behave as
before (a deprecated Variable attribute, with the same warning at the same
caller). The helpers only the old `capture` used are removed.

`nnx.sow` exports the transform's package (`nnx.sow.sow`,
`nnx.sow.capture`, `nnx.sow.perturb`, `nnx.sow.plant`); `nnx.capture`
stays the Module-level API. `capture_compat.install()`, which points a
released Flax's names at these functions, is not needed here and still
works.

Parity tests compare with Flax 0.12.8's `nnx.capture` bitwise on ten real
models where that implementation exists (the overlay on a released Flax);
here they skip, saying so.'''),
    Commit(
        'codemod', codemod,
        'scripts/migrate: a codemod from Module.sow/nnx.capture to'
        ' flax.nnx.sow',
        '''\
`python scripts/migrate/migrate_sow.py --target=functional|capture PATH...`
rewrites `Module.sow` and `nnx.capture` call sites to the sow transform
where it can prove the rewrite keeps behavior, and flags every other site
with what it found. It is idempotent and leaves files it cannot parse
untouched.

It is outside the flax package because it needs libcst, which Flax does
not depend on; libcst is added to the `testing` extra so that its tests
(tests/nnx/sow/migrate/) run in CI. Without libcst they skip. Its input
and expected files (tests/nnx/sow/migrate/testdata/) are excluded from
ruff: they keep the imports the code they stand for has.'''),
    Commit(
        'docs', docs,
        'docs_nnx: guides for the sow transform; extracting_intermediates'
        ' without __captures__',
        '''\
The sow transform's guides, as paired notebooks (.ipynb + MyST .md, as
the other guides): the API, what comes out under each control-flow
construct, perturbations, the coverage table of higher-order primitives,
every bad input and its error, what changes for users of `nnx.capture`,
and the codemod of the previous commit. They are stored executed, with
their outputs, as the other guides are (the doc build renders them without
running them), and each of them also runs when the build executes
notebooks. Toctree and API reference entries (nnx.capture's docstring,
which the page renders, quotes `(result, *intermediates)`: a bare `*`
starts an RST emphasis that does not end); a CHANGELOG entry.

extracting_intermediates explained `nnx.capture` by printing the
`__captures__` attribute it used to install on every module, which no
longer exists: those cells are rewritten for the new implementation.

tests/nnx/sow/docs/ executes these guides (and only these), a test file
per guide, and checks that the coverage table and the bad-input catalogue
list exactly the tested cases.'''),
)


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


def commit(tree: pathlib.Path, step: Commit, written: list[str],
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


def make_patchset(checkout: pathlib.Path, outdir: pathlib.Path,
                  with_docs: bool = True) -> list[pathlib.Path]:
  """Writes the series for ``checkout``'s HEAD to ``outdir``.

  Returns:
    The patch files, in order.
  """
  check_tests_classified()
  base = check_checkout(checkout)
  identity = _identity()
  steps = [c for c in COMMITS if with_docs or c.key != 'docs']
  with tempfile.TemporaryDirectory(prefix='sow-patchset-') as tmp:
    tree = pathlib.Path(tmp) / 'flax'
    absent = clone(checkout, base, tree)
    if absent:
      print(f'note: {len(absent)} file(s) of {base[:8]} have no blob in'
            f' the checkout (a partial mirror), left out: {absent}')
    for step in steps:
      written = step.make(tree)
      sha = commit(tree, step, written, identity)
      print(f'{sha[:8]} {step.subject} ({len(written)} files)')
    outdir.mkdir(parents=True, exist_ok=True)
    for old in glob.glob(str(outdir / '[0-9][0-9][0-9][0-9]-*.patch')):
      os.remove(old)
    git(tree, 'format-patch', '-q', '--no-signature', f'--base={base}',
        '-o', str(outdir.resolve()), f'{base}..HEAD')
  patches = sorted(outdir.glob('[0-9][0-9][0-9][0-9]-*.patch'))
  if len(patches) != len(steps):
    raise PatchsetError(f'{outdir}: expected {len(steps)} patches, found'
                        f' {len(patches)}')
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
      help='leave out the docs commit; the series is then incomplete')
  return parser.parse_args(argv)


def main(argv: tp.Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  try:
    make_patchset(args.checkout, args.outdir, with_docs=not args.without_docs)
  except (PatchsetError, flax_integration.EditError) as e:
    print(f'make_patchset: error: {e}', file=sys.stderr)
    return 1
  if args.without_docs:
    print('warning: --without-docs: the docs commit is left out')
  return 0


if __name__ == '__main__':
  sys.exit(main())
