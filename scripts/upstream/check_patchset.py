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
"""Applies the upstream patch series to Flax and runs Flax's CI on it.

Usage (``check_patchset.sh`` runs this)::

  python scripts/upstream/check_patchset.py FLAX_CHECKOUT [--work DIR]

Steps, each writing ``results/PART.json`` under the work directory
(``build/patchset/COMMIT``); ``--parts`` runs some, ``--reuse`` skips those
already done:

* ``apply``: ``make_patchset.py`` writes the series for the checkout's
  ``HEAD``; two fresh clones, ``pristine/`` (that commit) and ``patched/``
  (``git am`` of the series), and one fresh venv for each
  (``venv-pristine/``, ``venv-patched/``): the tree installed editable, as
  Flax's CI does, with Flax's ``testing`` extra but the packages only its
  examples and other test folders use (``EXCLUDED``), and jax pinned as
  this project pins it.
* ``commits``: each commit of the series alone (a reviewer may stop after
  any, or bisect), in a clone of it: its tree imports ``flax.nnx`` and
  ``flax.nnx.sow``, pytest collects all our tests in it, its tests pass with
  Flax's CI settings: the test files it adds and the first test of each
  earlier one (``--commit-tests=own``, the default), or every test file of
  ours (``--commit-tests=all``); and the doctests of our modules there pass
  (an example may use only what its commit and those before add).
  ``--commits KEY,...`` checks only those commits (the others' test files
  still count as earlier ones).
* ``--jax VERSION`` makes the venvs with that JAX (every release Flax
  accepts, ``JAX_RELEASES``; the default work directory then ends in
  ``-jaxVERSION``), so the series is checked on the oldest as on the
  newest.
* ``tests``: ``pytest -n 2 tests/nnx`` in each tree with Flax's CI settings
  (``XLA_FLAGS=--xla_force_host_platform_device_count=4``,
  ``JAX_NUMPY_RANK_PROMOTION=raise``, ``FLAX_PROFILE=1``;
  ``tests/run_all_tests.sh``); in ``patched/`` that includes our tests in
  ``tests/nnx/sow``. Flax's own tests must have the same outcome, test by
  test, in both trees.
* ``doctests``: ``pytest -n 2 flax/nnx --doctest-modules``, as
  ``run_all_tests.sh --only-doctest`` runs them (before it sets the CI
  variables), in each tree.
* ``guides``: the guides the series adds and ``extracting_intermediates``
  executed as notebooks, as myst-nb executes them when the doc build
  executes notebooks (``NB_EXECUTION_MODE`` set; ``run_notebooks.py``),
  but for those ``nb_execution_excludepatterns`` excludes (none of ours);
  ``extracting_intermediates`` in ``pristine/`` too.
* ``hooks``: the pre-commit hooks of ``.pre-commit-config.yaml`` at their
  pinned versions (installed from PyPI: pre-commit itself would clone them
  from GitHub), on every file the series adds or changes, in a scratch
  copy; a hook that fails or rewrites a file is a finding.
* ``static``: mypy and pytype as Flax's CI runs them, by ``check_static.py``
  on ``pristine/`` then ``patched/`` (pytype on the Python files the series
  adds or changes; ``--pytype-scope=all`` for all of ``flax/``).
* ``docs``: ``docs_nnx`` built with Sphinx as Flax's CI doctest job builds
  it (``sphinx-build -M doctest``, then ``-M html``, ``-T``; notebooks are
  rendered from their stored outputs, ``nb_execution_mode`` being
  ``'off'``), in each tree, in a venv with Flax's ``docs`` extra
  (``venv-docs/``, jax pinned); the warnings are compared, and none may be
  new or located in a file the series adds or changes, but for those that
  every paired guide of Flax's gets (``ACCEPTED_WARNINGS``). Flax's CI also
  builds the Linen ``docs/``, which the series does not touch.

Then it prints the summary as a Markdown table (also ``summary.md``); exits
1 if any part is not green.
"""

from __future__ import annotations

import argparse
import ast
import collections
import fnmatch
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time
import tomllib
import traceback
import typing as tp

import yaml

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
# pylint: disable-next=g-import-not-at-top,wrong-import-position
import make_patchset  # noqa: E402

PARTS = ('apply', 'commits', 'tests', 'doctests', 'guides', 'hooks', 'static',
         'docs')
TREES = ('pristine', 'patched')
OUR_TESTS = make_patchset.FLAX_TESTS
CI_ENV = {
    'XLA_FLAGS': '--xla_force_host_platform_device_count=4',
    'JAX_NUMPY_RANK_PROMOTION': 'raise',
    'FLAX_PROFILE': '1',
}
# Packages of Flax's `testing` extra that neither tests/nnx nor the nnx
# doctests import (its examples and its other test folders do); installing
# them (TensorFlow, PyTorch with CUDA libraries, Atari) would take gigabytes.
EXCLUDED = frozenset({
    'ale-py', 'clu', 'gymnasium', 'jraph', 'keras', 'ml-collections',
    'opencv-python', 'sentencepiece', 'tensorflow-cpu', 'tensorflow-datasets',
    'tensorflow-text', 'torch', 'grain', 'tensorboard', 'protobuf',
    # The type checkers run in check_static.py's own venv.
    'mypy', 'pytype',
    # Coverage is not measured here.
    'pytest-cov',
})
# What our tests and the notebook runs need besides Flax's extras; jax as
# this project pins it, or as `--jax` asks (every release Flax accepts:
# `JAX_RELEASES`, the oldest first).
JAX_PINNED = '0.10.2'
JAX_RELEASES = ('0.10.0', '0.10.1', '0.10.2')
EXTRA = ('nbclient', 'nbformat', 'ipykernel')
# Flax's docs extra pins jupytext; the guides are paired with that version.
DOCS_PINNED = ('jupytext',)
GUIDE = 'docs_nnx/guides/extracting_intermediates.ipynb'


class CheckError(RuntimeError):
  pass


def run(cmd: tp.Sequence[str], cwd: pathlib.Path | None = None,
        env: dict[str, str] | None = None, log: pathlib.Path | None = None,
        check: bool = True, timeout: float | None = None) -> int:
  """Runs ``cmd``; its output goes to ``log`` (appended) or is kept."""
  words = [str(c) for c in cmd]
  shown = ' '.join(words if len(words) <= 16 else
                   words[:14] + [f'... ({len(words) - 14} more)'])
  print(f'$ {shown}' + (f'  (log: {log})' if log else ''), flush=True)
  # pylint: disable-next=consider-using-with
  out = open(log, 'a', encoding='utf-8') if log else None
  try:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, stdout=out or
        subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=timeout, check=False,
    )
  finally:
    if out:
      out.close()
  if check and proc.returncode:
    tail = proc.stdout[-3000:] if proc.stdout else f'see {log}'
    raise CheckError(f'{shown} exited {proc.returncode}:\n{tail}')
  return proc.returncode


# ---------------------------------------------------------------------------
# apply: the series, the trees, the venvs
# ---------------------------------------------------------------------------


def _requirement_name(requirement: str) -> str:
  name = re.split(r'[<>=!~;\[ ]', requirement, maxsplit=1)[0]
  return re.sub(r'[-_.]+', '-', name).lower()


def test_requirements(tree: pathlib.Path,
                      jax: str = JAX_PINNED) -> list[str]:
  """Flax's testing extra less ``EXCLUDED``, plus jax and jaxlib ``jax``,
  ``EXTRA`` and the docs extra's pins of ``DOCS_PINNED``."""
  with open(tree / 'pyproject.toml', 'rb') as f:
    extras = tomllib.load(f)['project']['optional-dependencies']
  kept = [r for r in extras['testing']
          if _requirement_name(r) not in EXCLUDED
          and _requirement_name(r) not in ('jax', 'jaxlib')]
  pinned = [r for r in extras['docs'] if _requirement_name(r) in DOCS_PINNED]
  return kept + [f'jax=={jax}', f'jaxlib=={jax}', *EXTRA] + pinned


def venv_python(venv: pathlib.Path) -> pathlib.Path:
  return venv / 'bin' / 'python'


def make_venv(venv: pathlib.Path, tree: pathlib.Path, python: str,
              log: pathlib.Path, jax: str = JAX_PINNED) -> list[str]:
  if venv.exists():
    shutil.rmtree(venv)
  run([python, '-m', 'venv', venv], log=log)
  pip = [venv_python(venv), '-m', 'pip', 'install', '-q']
  run([*pip, '--upgrade', 'pip'], log=log)
  requirements = test_requirements(tree, jax)
  run([*pip, '-e', tree, *requirements], log=log)
  return requirements


def _kept(args, work: pathlib.Path, tree: str) -> bool:
  """Whether ``--keep-pristine`` reuses this tree and its venv."""
  return (tree == 'pristine' and args.keep_pristine
          and venv_python(work / 'venv-pristine').exists()
          and (work / 'pristine' / '.git').exists())


def part_apply(args, work: pathlib.Path) -> dict[str, tp.Any]:
  patches = work / 'patches'
  files = make_patchset.make_patchset(
      args.checkout, patches, with_docs=not args.without_docs)
  base = make_patchset.check_checkout(args.checkout)
  identity = make_patchset._identity()  # pylint: disable=protected-access
  trees = [t for t in TREES if not _kept(args, work, t)]
  for name in trees:
    if (work / name).exists():
      shutil.rmtree(work / name)
    make_patchset.clone(args.checkout, base, work / name)
  run(['git', 'am', '-q', *[str(p) for p in files]], cwd=work / 'patched',
      env={**os.environ, **identity})
  commits = make_patchset.git(
      work / 'patched', 'log', '--format=%h %s', f'{base}..HEAD'
  ).splitlines()
  changed = make_patchset.git(
      work / 'patched', 'diff', '--name-only', base, 'HEAD').split()
  log = work / 'logs' / 'venv.log'
  requirements = {name: test_requirements(work / name, args.jax)
                  for name in TREES}
  for name in trees:
    make_venv(work / f'venv-{name}', work / name, args.python, log, args.jax)
  versions = {}
  for name in TREES:
    out = subprocess.run(
        [venv_python(work / f'venv-{name}'), '-c',
         'import sys, jax, flax; print(sys.version.split()[0], jax.__version__,'
         ' flax.__version__, flax.__file__)'],
        cwd=work / name, capture_output=True, text=True, check=True,
    ).stdout.split()
    versions[name] = out
  return {
      'base': base, 'patches': [p.name for p in files], 'commits': commits,
      'changed': changed, 'requirements': requirements, 'versions': versions,
      'green': True,
  }


# ---------------------------------------------------------------------------
# commits: each commit of the series on its own
# ---------------------------------------------------------------------------


def _first_tests(log: str, files: tp.Collection[str]) -> list[str]:
  """The first test id of each of ``files`` in a ``--collect-only -q``
  output."""
  first: dict[str, str] = {}
  for line in log.splitlines():
    path = line.split('::', 1)[0]
    if '::' in line and path in files and path not in first:
      first[path] = line.strip()
  return list(first.values())


def part_commits(args, work: pathlib.Path) -> dict[str, tp.Any]:
  """Each commit of the series on its own, in its own tree.

  A reviewer may stop after any commit (or bisect through them): each must
  stand alone. Its tree imports ``flax.nnx`` and ``flax.nnx.sow``, pytest
  collects every test of ours in it (importing every test module and its
  helpers), and its tests pass with Flax's CI settings: with
  ``--commit-tests=all`` every test file of ours in the tree; with ``own``
  (the default) the test files the commit adds, and a smoke of the others:
  the first test of each test file of the commits before. The doctests of
  our modules in the tree must pass too. With ``--commits``, only those
  commits are checked.
  """
  import run_flax_nnx_tests  # pylint: disable=g-import-not-at-top

  applied = json.loads((work / 'results' / 'apply.json').read_text())
  manifest = json.loads((work / 'patches' / 'series.json').read_text())
  shas = [line.split(' ', 1) for line in applied['commits'][::-1]]
  if len(shas) != len(manifest):
    raise CheckError(f'{len(shas)} commits applied, {len(manifest)} in'
                     ' series.json')
  patched = work / 'patched'
  python = venv_python(work / 'venv-patched')
  records = []
  earlier: list[str] = []
  unknown = set(args.commits or ()) - {e['key'] for e in manifest}
  if unknown:
    raise CheckError(f'--commits: no commit {sorted(unknown)} in the series')
  for (sha, subject), entry in zip(shas, manifest):
    if args.commits and entry['key'] not in args.commits:
      earlier += entry['tests']
      continue
    start = time.monotonic()
    tree = work / 'commit-tree'
    if tree.exists():
      shutil.rmtree(tree)
    # A clone, not `git archive`: it copes with blobs a partial mirror lacks.
    make_patchset.clone(patched, sha, tree)
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'VIRTUAL_ENV', 'XLA_FLAGS',
                        'JAX_NUMPY_RANK_PROMOTION', 'FLAX_PROFILE',
                        'JAX_ENABLE_X64')}
    env.update(CI_ENV)
    # Ahead of the editable install; the plugin that records outcomes.
    env['PYTHONPATH'] = os.pathsep.join([str(tree), str(HERE)])
    log = work / 'logs' / f'commit-{sha}.log'
    log.unlink(missing_ok=True)
    imported = run([python, '-c', 'import flax.nnx, flax.nnx.sow;'
                    ' assert flax.nnx.__file__.startswith(%r)' % str(tree)],
                   cwd=tree, env=env, log=log, check=False)
    ours = OUR_TESTS if (tree / OUR_TESTS).is_dir() else None
    collected, listing = 0, ''
    if ours:
      listing_log = work / 'logs' / f'commit-{sha}.collect.log'
      listing_log.unlink(missing_ok=True)
      collected = run([python, '-m', 'pytest', '--collect-only', '-q',
                       '-p', 'no:cacheprovider', ours], cwd=tree, env=env,
                      log=listing_log, check=False)
      listing = listing_log.read_text()
    own = [t for t in entry['tests'] if (tree / t).exists()]
    if args.commit_tests == 'all':
      targets = [ours] if ours else []
    else:
      targets = own + _first_tests(listing, set(earlier))
    outcomes: dict[str, tuple[str, str]] = {}
    if targets:
      results = work / 'results' / f'commit-{sha}.jsonl'
      run([python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
           '-n', str(args.workers), '-p', 'results_plugin',
           f'--upstream-results={results}', *targets],
          cwd=tree, env=env, log=log, check=False)
      outcomes = run_flax_nnx_tests.load_outcomes(str(results))
    modules = [p for p in ('flax/nnx/sow', 'flax/nnx/capture_compat')
               if (tree / p).is_dir()]
    doc_results = work / 'results' / f'commit-{sha}.doctests.jsonl'
    run([python, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
         '--doctest-modules', '-p', 'results_plugin',
         f'--upstream-results={doc_results}', *modules],
        cwd=tree, env={k: v for k, v in env.items() if k not in CI_ENV},
        log=log, check=False)
    doctests = run_flax_nnx_tests.load_outcomes(str(doc_results))
    tail = [line for line in listing.strip().splitlines()[-1:]] or ['']
    records.append({
        'commit': sha, 'subject': subject, 'key': entry['key'],
        'index': manifest.index(entry) + 1,
        'added': entry['added'], 'import': imported, 'collect': collected,
        'collected': tail[0], 'own': own, 'smoke': len(targets) - len(own)
        if args.commit_tests != 'all' else 0,
        'tests': _counts(outcomes), 'failing': _failing(outcomes),
        'doctests': _counts(doctests),
        'doctests_failing': sorted(_failing(doctests)),
        'seconds': round(time.monotonic() - start),
    })
    print(f"commit {records[-1]['index']} {entry['key']}:"
          f" {_counts(outcomes)};"
          f" doctests {_counts(doctests)} ({records[-1]['seconds']}s)",
          flush=True)
    earlier += own
  shutil.rmtree(work / 'commit-tree', ignore_errors=True)
  return {'commits': records, 'mode': args.commit_tests,
          'selected': sorted(args.commits or ()), 'of': len(manifest),
          'jax': applied['versions']['patched'][1],
          'green': all(_commit_green(r) for r in records)}


def _commit_green(record: dict[str, tp.Any]) -> bool:
  """It imports, collects, its tests ran and passed, and so did the
  doctests of our modules in its tree."""
  ran = record['own'] or record['smoke'] or record['tests']
  return (record['import'] == 0 and record['collect'] == 0
          and not record['failing']
          and not record.get('doctests_failing')
          and (not ran or record['tests'].get('passed', 0) > 0))


# ---------------------------------------------------------------------------
# tests and doctests
# ---------------------------------------------------------------------------


def _pytest(work: pathlib.Path, tree: str, targets: list[str],
            extra: list[str], env_extra: dict[str, str], name: str,
            workers: int, keep: bool) -> dict[str, tuple[str, str]]:
  import run_flax_nnx_tests  # pylint: disable=g-import-not-at-top

  results = work / 'results' / f'{name}.{tree}.jsonl'
  log = work / 'logs' / f'{name}.{tree}.log'
  if tree == 'pristine' and keep and results.exists():
    print(f'reusing {results} (--keep-pristine)')
    return run_flax_nnx_tests.load_outcomes(str(results))
  log.unlink(missing_ok=True)
  env = dict(os.environ)
  for key in ('PYTHONPATH', 'VIRTUAL_ENV', 'XLA_FLAGS',
              'JAX_NUMPY_RANK_PROMOTION', 'FLAX_PROFILE', 'JAX_ENABLE_X64'):
    env.pop(key, None)
  env.update(env_extra)
  # Only the plugin that records outcomes comes from here.
  env['PYTHONPATH'] = str(HERE)
  cmd = [venv_python(work / f'venv-{tree}'), '-m', 'pytest', *targets,
         '-n', str(workers), '-rfE', '-p', 'results_plugin',
         f'--upstream-results={results}', *extra]
  run(cmd, cwd=work / tree, env=env, log=log, check=False)
  return run_flax_nnx_tests.load_outcomes(str(results))


def _counts(outcomes: dict[str, tuple[str, str]]) -> dict[str, int]:
  counts = collections.Counter(status for status, _ in outcomes.values())
  return dict(sorted(counts.items()))


def _failing(outcomes: dict[str, tuple[str, str]]) -> dict[str, str]:
  return {i: f'[{s}] {m}' for i, (s, m) in sorted(outcomes.items())
          if s in ('failed', 'error')}


def _is_ours(test_id: str) -> bool:
  return test_id.startswith(OUR_TESTS + '/')


def part_tests(args, work: pathlib.Path) -> dict[str, tp.Any]:
  outcomes = {
      tree: _pytest(work, tree, ['tests/nnx'], [], CI_ENV, 'tests',
                    args.workers, args.keep_pristine)
      for tree in TREES
  }
  flax_pristine = outcomes['pristine']
  flax_patched = {i: o for i, o in outcomes['patched'].items()
                  if not _is_ours(i)}
  ours = {i: o for i, o in outcomes['patched'].items() if _is_ours(i)}
  differ = {
      i: [flax_pristine.get(i, ('absent', ''))[0],
          flax_patched.get(i, ('absent', ''))[0]]
      for i in sorted(flax_pristine.keys() | flax_patched.keys())
      if flax_pristine.get(i, ('absent', ''))[0]
      != flax_patched.get(i, ('absent', ''))[0]
  }
  skipped_ours = collections.Counter(
      m for s, m in ours.values() if s == 'skipped')
  return {
      'flax_pristine': _counts(flax_pristine),
      'flax_patched': _counts(flax_patched),
      'flax_differ': differ,
      'flax_failing_patched': _failing(flax_patched),
      'ours': _counts(ours),
      'ours_failing': _failing(ours),
      'ours_skip_reasons': dict(skipped_ours),
      'green': not differ and not _failing(flax_patched)
               and not _failing(ours) and bool(ours),
  }


def part_doctests(args, work: pathlib.Path) -> dict[str, tp.Any]:
  extra = ['--doctest-modules', '--suppress-no-test-exit-code',
           '--ignore=flax/nnx/examples']
  outcomes = {
      tree: _pytest(work, tree, ['flax/nnx'], extra, {}, 'doctests',
                    args.workers, args.keep_pristine)
      for tree in TREES
  }
  ours = [i for i in outcomes['patched']
          if i.startswith(('flax/nnx/sow/', 'flax/nnx/capture_compat/'))]
  return {
      tree: _counts(o) for tree, o in outcomes.items()
  } | {
      'ours': len(ours),
      'failing': {t: _failing(o) for t, o in outcomes.items()},
      'green': not _failing(outcomes['patched']),
  }


# ---------------------------------------------------------------------------
# guides
# ---------------------------------------------------------------------------


def excluded_from_execution(tree: pathlib.Path) -> list[str]:
  """``nb_execution_excludepatterns`` of the tree's ``docs_nnx/conf.py``."""
  module = ast.parse((tree / 'docs_nnx' / 'conf.py').read_text())
  for node in module.body:
    if (isinstance(node, ast.Assign) and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == 'nb_execution_excludepatterns'):
      return list(ast.literal_eval(node.value))
  return []


def _executed(path: str, patterns: list[str]) -> bool:
  """Whether the doc build executes ``path`` (relative to the tree)."""
  relative = path.removeprefix('docs_nnx/')
  return not any(fnmatch.fnmatch(relative, p) or p in relative
                 for p in patterns)


def part_guides(args, work: pathlib.Path) -> dict[str, tp.Any]:
  del args
  applied = json.loads((work / 'results' / 'apply.json').read_text())
  added = [p for p in applied['changed']
           if p.startswith('docs_nnx/') and p.endswith('.ipynb')]
  patterns = excluded_from_execution(work / 'patched')
  executed = [p for p in added if _executed(p, patterns)]
  notebooks = {'pristine': [GUIDE],
               'patched': sorted(set(executed) | {GUIDE})}
  records = {}
  for tree, paths in notebooks.items():
    out = work / 'results' / f'guides.{tree}.jsonl'
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'VIRTUAL_ENV')}
    run([venv_python(work / f'venv-{tree}'), HERE / 'run_notebooks.py', out,
         *paths], cwd=work / tree, env=env,
        log=work / 'logs' / f'guides.{tree}.log', check=False)
    records[tree] = [json.loads(line) for line in out.read_text()
                     .splitlines()] if out.exists() else []
  return {
      **records,
      'not_executed': sorted(set(added) - set(executed)),
      'green': bool(records['patched']) and len(records['patched']) == len(
          notebooks['patched']) and not any(
              r['error'] for r in records['patched']),
  }


# ---------------------------------------------------------------------------
# pre-commit hooks
# ---------------------------------------------------------------------------

# The PyPI package of each hook repository of Flax's .pre-commit-config.yaml.
HOOK_PACKAGES = {
    'https://github.com/mwouts/jupytext': 'jupytext',
    'https://github.com/pre-commit/pre-commit-hooks': 'pre-commit-hooks',
    'https://github.com/kynan/nbstripout': 'nbstripout',
    'https://github.com/astral-sh/ruff-pre-commit': 'ruff',
    'https://github.com/asottile/pyupgrade': 'pyupgrade',
}
# Each hook's command and the files it takes (its `types`), as the hook
# repositories define them at these versions.
HOOKS = {
    'jupytext': (['jupytext'], ('.ipynb', '.md', '.py')),
    'check-toml': (['check-toml'], ('.toml',)),
    'trailing-whitespace': (['trailing-whitespace-fixer'], None),
    'nbstripout': (['nbstripout'], ('.ipynb',)),
    'ruff': (['ruff', 'check', '--force-exclude'], ('.py', '.pyi')),
    'pyupgrade': (['pyupgrade'], ('.py',)),
}


def hooks_config(tree: pathlib.Path) -> list[dict[str, tp.Any]]:
  """The active hooks: id, package==version, args, exclude."""
  with open(tree / '.pre-commit-config.yaml', encoding='utf-8') as f:
    config = yaml.safe_load(f)
  hooks = []
  for repo in config['repos']:
    package = HOOK_PACKAGES.get(repo['repo'])
    if package is None:
      raise CheckError(f"unknown pre-commit repository {repo['repo']}")
    version = str(repo['rev']).lstrip('v')
    for hook in repo['hooks']:
      if hook['id'] not in HOOKS:
        raise CheckError(f"unknown pre-commit hook {hook['id']}")
      hooks.append({
          'id': hook['id'], 'package': f'{package}=={version}',
          'args': [str(a) for a in hook.get('args', [])],
          'exclude': hook.get('exclude'),
      })
  return hooks


def _is_text(path: pathlib.Path) -> bool:
  try:
    path.read_text(encoding='utf-8')
  except (UnicodeDecodeError, IsADirectoryError):
    return False
  return True


def _paired(path: str, tree: pathlib.Path) -> bool:
  """A notebook pair member (jupytext --sync only syncs pairs)."""
  stem = os.path.splitext(path)[0]
  return all((tree / f'{stem}{ext}').exists() for ext in ('.ipynb', '.md'))


def part_hooks(args, work: pathlib.Path) -> dict[str, tp.Any]:
  applied = json.loads((work / 'results' / 'apply.json').read_text())
  patched = work / 'patched'
  hooks = hooks_config(patched)
  venv = work / 'venv-hooks'
  log = work / 'logs' / 'hooks.log'
  log.unlink(missing_ok=True)
  if not venv_python(venv).exists():
    run([args.python, '-m', 'venv', venv], log=log)
  run([venv_python(venv), '-m', 'pip', 'install', '-q',
       *sorted({h['package'] for h in hooks})], log=log)
  scratch = work / 'hooks-scratch'
  if scratch.exists():
    shutil.rmtree(scratch)
  run(['git', 'clone', '-q', '--shared', '--no-checkout', patched, scratch])
  absent = make_patchset.missing_blobs(scratch, 'HEAD')
  if absent:
    for key, value in (('core.repositoryformatversion', '1'),
                       ('extensions.partialClone', 'origin'),
                       ('remote.origin.promisor', 'true')):
      make_patchset.git(scratch, 'config', key, value)
    make_patchset.git(scratch, 'sparse-checkout', 'set', '--no-cone', '/*',
                      *[f'!/{p}' for p in absent])
  make_patchset.git(scratch, 'checkout', '-q', 'HEAD')
  changed = [p for p in applied['changed'] if (scratch / p).exists()]
  env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
  env.pop('PYTHONPATH', None)
  results = []
  for hook in hooks:
    command, types = HOOKS[hook['id']]
    files = [p for p in changed
             if (types is None and _is_text(scratch / p))
             or (types is not None and p.endswith(types))]
    if hook['exclude']:
      files = [p for p in files if not re.search(hook['exclude'], p)]
    if hook['id'] == 'jupytext':
      files = [p for p in files if _paired(p, scratch)]
    code = 0
    if files:
      with open(log, 'a', encoding='utf-8') as f:
        f.write(f"\n== {hook['id']} {hook['package']} on {len(files)}"
                ' files\n')
      code = run([*command, *hook['args'], *files], cwd=scratch, env=env,
                 log=log, check=False)
    rewritten = make_patchset.git(scratch, 'status', '--porcelain').split(
        '\n')
    rewritten = [line[3:] for line in rewritten if line.strip()]
    results.append({'hook': hook['id'], 'package': hook['package'],
                    'files': len(files), 'exit': code,
                    'rewrites': rewritten})
    make_patchset.git(scratch, 'checkout', '-q', '--', '.')
    make_patchset.git(scratch, 'clean', '-qfd')
  return {'hooks': results,
          'green': all(r['exit'] == 0 and not r['rewrites']
                       for r in results)}


# ---------------------------------------------------------------------------
# static: mypy and pytype
# ---------------------------------------------------------------------------


def part_static(args, work: pathlib.Path) -> dict[str, tp.Any]:
  applied = json.loads((work / 'results' / 'apply.json').read_text())
  python_changed = [p for p in applied['changed']
                    if p.startswith('flax/') and p.endswith('.py')]
  out = work / 'static'
  cmd = [sys.executable, HERE / 'check_static.py',
         f"--flax={work / 'pristine'}", f"--patched={work / 'patched'}",
         '--tools=mypy,pytype', f'--out={out}',
         f"--workdir={args.static_workdir or work / 'static-tree'}"]
  if args.pytype_scope == 'changed':
    cmd.append('--pytype-files=' + ','.join(python_changed))
  else:
    cmd.append('--pytype-scope=all')
  code = run(cmd, log=work / 'logs' / 'static.log', check=False)
  summary = json.loads((out / 'summary.json').read_text())
  return {'exit': code, 'tools': summary['tools'],
          'pytype_scope': args.pytype_scope, 'versions': summary['versions'],
          'green': code == 0}


# ---------------------------------------------------------------------------
# docs: Sphinx on docs_nnx
# ---------------------------------------------------------------------------

# Warnings Sphinx gives every paired guide of Flax's, ours alike, and why.
ACCEPTED_WARNINGS = {
    'multiple files found for the document': 'each guide is an .ipynb + .md'
    ' pair and docs_nnx/conf.py lists both suffixes; Sphinx builds the'
    ' .ipynb',
}
_WARNING = re.compile(r'^(?:(?P<where>.*?): )?(?:WARNING|ERROR|CRITICAL): '
                      r'(?P<message>.*)$')
_DOCTEST = re.compile(r'^\s+(\d+) (tests?|failures? in tests|failures? in'
                      r' setup code|failures? in cleanup code)$', re.M)


def sphinx_warnings(log: str, tree: pathlib.Path) -> list[dict[str, str]]:
  """The warnings of a Sphinx log: where (relative to the tree, line
  numbers dropped) and the message (the tree's path dropped)."""
  def relative(text):
    for root in {str(tree), str(tree.resolve())}:
      text = text.replace(f'{root}/', '')
    return text

  found = []
  for line in log.splitlines():
    match = _WARNING.match(line)
    if not match:
      continue
    where = re.sub(r':\d+$', '', relative(match.group('where') or ''))
    found.append({'where': where,
                  'message': relative(match.group('message'))})
  return found


def located_in(where: str, changed: list[str]) -> bool:
  path = where.split(':', 1)[0]
  if path.startswith(('docs_nnx/', 'flax/')):
    candidates = (path,)
  else:  # a document name, relative to docs_nnx, or a path of one
    candidates = (f'docs_nnx/{path}',)
  return any(c == p or os.path.splitext(c)[0] == os.path.splitext(p)[0]
             for c in candidates for p in changed)


def _accepted(warning: dict[str, str]) -> bool:
  return any(warning['message'].startswith(m) for m in ACCEPTED_WARNINGS)


def doctest_summary(log: str) -> dict[str, int]:
  """``tests``, ``failures in tests``, ... of the doctest builder's log."""
  return {re.sub(r'failures?', 'failures', re.sub(r'tests?$', 'tests', k)):
          int(n) for n, k in _DOCTEST.findall(log)}


def _sphinx(work: pathlib.Path, tree: str, builder: str) -> dict[str, tp.Any]:
  root = work / tree
  out = work / 'docs-build' / tree
  log = work / 'logs' / f'docs-{builder}.{tree}.log'
  warnings = log.with_suffix('.warnings')
  log.unlink(missing_ok=True)
  env = {k: v for k, v in os.environ.items()
         if k not in ('PYTHONPATH', 'VIRTUAL_ENV', 'NB_EXECUTION_MODE')}
  # conf.py puts its tree first on sys.path too; this makes it explicit.
  env['PYTHONPATH'] = str(root)
  # -w: the warnings alone, also in a file (the log interleaves them with
  # the progress lines).
  code = run([work / 'venv-docs' / 'bin' / 'sphinx-build', '-M', builder,
              'docs_nnx', out, '-T', '-w', warnings], cwd=root, env=env,
             log=log, check=False)
  text = log.read_text()
  result = {'exit': code,
            'warnings': sphinx_warnings(warnings.read_text(), root)}
  if builder == 'doctest':
    result['doctest'] = doctest_summary(text)
    # What a failing setup or test could not import (not installed here).
    result['missing'] = sorted(set(re.findall(
        r"ModuleNotFoundError: No module named '([\w.]+)'", text)))
  return result


def _pages(work: pathlib.Path, changed: list[str]) -> dict[str, int]:
  """Each page the series adds to docs_nnx: the number of cell outputs in
  its HTML (-1: no page)."""
  pages = {}
  for path in changed:
    if not path.startswith('docs_nnx/') or not path.endswith(
        ('.ipynb', '.rst')):
      continue
    name = os.path.splitext(path.removeprefix('docs_nnx/'))[0]
    if name in pages or name == 'guides_advanced' or name.endswith('index'):
      continue
    html = work / 'docs-build' / 'patched' / 'html' / f'{name}.html'
    pages[name] = (html.read_text().count('class="cell_output')
                   if html.exists() else -1)
  return pages


def part_docs(args, work: pathlib.Path) -> dict[str, tp.Any]:
  applied = json.loads((work / 'results' / 'apply.json').read_text())
  log = work / 'logs' / 'docs-venv.log'
  venv = work / 'venv-docs'
  if not venv_python(venv).exists():
    run([args.python, '-m', 'venv', venv], log=log)
    pip = [venv_python(venv), '-m', 'pip', 'install', '-q']
    run([*pip, '--upgrade', 'pip'], log=log)
    # The docs extra leaves jax unpinned: pinned as in the test venvs.
    run([*pip, '-e', f"{work / 'patched'}[docs]", f'jax=={args.jax}',
         f'jaxlib=={args.jax}'], log=log)
  builds = {}
  for tree in TREES:
    shutil.rmtree(work / 'docs-build' / tree, ignore_errors=True)
    # The order of Flax's CI: the doctest builder, then html.
    builds[tree] = {b: _sphinx(work, tree, b) for b in ('doctest', 'html')}
  changed = applied['changed']

  def keyed(tree):
    return collections.Counter(
        (b, w['where'], w['message']) for b, r in builds[tree].items()
        for w in r['warnings'])

  new = keyed('patched') - keyed('pristine')
  gone = keyed('pristine') - keyed('patched')
  new_list = [{'builder': b, 'where': w, 'message': m}
              for (b, w, m), n in sorted(new.items()) for _ in range(n)]
  findings = [w for w in new_list if not _accepted(w)]
  # Of the new ones, those located in (or naming) a file of the series.
  ours = [w for w in new_list if located_in(w['where'], changed)
          or any(f'"{os.path.splitext(p.removeprefix("docs_nnx/"))[0]}"'
                 in w['message'] for p in changed)]
  accepted = [w for w in new_list if _accepted(w)]
  pages = _pages(work, changed)
  exits = {t: {b: r['exit'] for b, r in builds[t].items()} for t in TREES}
  return {
      'exit': exits,
      'warnings': {t: {b: len(r['warnings']) for b, r in builds[t].items()}
                   for t in TREES},
      'doctest': {t: builds[t]['doctest']['doctest'] for t in TREES},
      'missing': {t: builds[t]['doctest']['missing'] for t in TREES},
      'new': new_list, 'gone': [list(k) for k in gone],
      'ours': ours, 'accepted': len(accepted), 'findings': findings,
      'pages': pages,
      'green': (exits['patched']['html'] == 0
                and exits['patched']['doctest'] <= exits['pristine']['doctest']
                and builds['patched']['doctest']['doctest'].get(
                    'failures in tests', 0)
                <= builds['pristine']['doctest']['doctest'].get(
                    'failures in tests', 0)
                and not findings
                and all(n >= 0 for n in pages.values())),
  }


# ---------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------


def _fmt_counts(counts: dict[str, int]) -> str:
  order = ('passed', 'failed', 'error', 'skipped', 'xfailed', 'xpassed')
  return ', '.join(f'{counts[k]} {k}' for k in order if counts.get(k)) or '-'


def _docs_rows(docs: dict[str, tp.Any]) -> list[tuple[str, ...]]:
  """The Sphinx builds: one row per builder."""

  def new(builder):
    found = [w for w in docs['new'] if w['builder'] == builder]
    others = collections.Counter(
        w['message'][:60] for w in docs['findings']
        if w['builder'] == builder)
    accepted = len(found) - sum(others.values())
    text = f'{len(found)} new warnings'
    if accepted:
      text += (f', {accepted} of them as every Flax guide gets (an .ipynb'
               ' and an .md)')
    return text + (f', others: {dict(others)}' if others else '')

  def doctest(tree):
    d = docs['doctest'][tree]
    text = (f"{d.get('tests', 0)} tests, {d.get('failures in tests', 0)}"
            ' failures')
    setup = d.get('failures in setup code', 0)
    return text + (f', {setup} failing setup' if setup else '')

  missing = sorted(set().union(*docs.get('missing', {}).values()))
  pages = ', '.join(
      f"{name.removeprefix('guides/')} ({n} outputs)" if n >= 0
      else f'{name}: NOT BUILT' for name, n in docs['pages'].items())
  return [
      ('`docs_nnx`: Sphinx `-M doctest`', doctest('pristine'),
       doctest('patched'),
       ('same results' if docs['doctest']['pristine']
        == docs['doctest']['patched'] else 'results differ')
       + (f"; not installed: {', '.join(missing)}" if missing else '')
       + f"; {new('doctest')}"),
      ('`docs_nnx`: Sphinx `-M html` (stored outputs)',
       f"{docs['warnings']['pristine']['html']} warnings",
       f"{docs['warnings']['patched']['html']} warnings",
       f"{new('html')}; pages: {pages}"),
  ]


def _commit_rows(commits: dict[str, tp.Any]) -> list[tuple[str, ...]]:
  """A row per commit: what it adds and how its tests ran."""
  rows = []
  for i, r in enumerate(commits['commits'], 1):
    if r['import'] or r['collect']:
      result = f"FAILED (import {r['import']}, collect {r['collect']})"
    elif r['failing']:
      result = f"{_fmt_counts(r['tests'])}: {', '.join(sorted(r['failing']))[:300]}"
    else:
      result = _fmt_counts(r['tests'])
    what = (f"{len(r['own'])} test files" + (
        f" + smoke of {r['smoke']}" if r['smoke'] else '')
            if commits['mode'] != 'all' else 'all our tests')
    doctests = r.get('doctests', {})
    notes = f"{what}; {r['seconds']} s"
    if doctests.get('failed'):
      notes += (f"; doctests: {doctests['failed']} failing"
                f" ({', '.join(m.split('::')[0].rsplit('/', 1)[-1] for m in r['doctests_failing'])})")
    rows.append((f"commit {r.get('index', i)} `{r['key']}`"
                 f" (+{r['added']} lines)", '-',
                 result, notes))
  return rows


def summary_table(results: dict[str, dict[str, tp.Any]]) -> str:
  rows = []
  commits = results.get('commits')
  if commits:
    rows += _commit_rows(commits)
  tests = results.get('tests')
  if tests:
    rows.append((
        'Flax `tests/nnx` (CI settings, `-n 2`)',
        _fmt_counts(tests['flax_pristine']),
        _fmt_counts(tests['flax_patched']),
        'same outcome for every test' if not tests['flax_differ'] else
        f"{len(tests['flax_differ'])} tests differ"))
    reasons = '; '.join(
        f'{n}: {r if len(r) <= 90 else r[:87] + "..."}'
        for r, n in sorted(tests['ours_skip_reasons'].items(),
                           key=lambda item: -item[1]))
    rows.append((
        f'our tests in `{OUR_TESTS}`', '-', _fmt_counts(tests['ours']),
        f'skips: {reasons}' if reasons else 'no skips'))
  doctests = results.get('doctests')
  if doctests:
    rows.append((
        'doctests `flax/nnx` (`--doctest-modules`)',
        _fmt_counts(doctests['pristine']), _fmt_counts(doctests['patched']),
        f"{doctests['ours']} in our modules"))
  guides = results.get('guides')
  if guides:
    def cells(records):
      return '; '.join(
          f"{pathlib.Path(r['path']).stem}: {r['ran']}/{r['cells']} cells"
          + (f" ({r['error']})" if r['error'] else '') for r in records)
    skipped = ', '.join(pathlib.Path(p).stem for p in guides['not_executed'])
    rows.append(('guides executed as notebooks',
                 cells(guides['pristine']), cells(guides['patched']),
                 f'not executed by the doc build: {skipped}' if skipped
                 else ''))
  hooks = results.get('hooks')
  if hooks:
    found = [f"{r['hook']}: exit {r['exit']}, rewrites {r['rewrites']}"
             for r in hooks['hooks'] if r['exit'] or r['rewrites']]
    names = ', '.join(
        f"{r['hook']} {r['package'].split('==')[1]} ({r['files']} files)"
        for r in hooks['hooks'])
    rows.append(('pre-commit hooks on the changed files', '-',
                 '; '.join(found) or '0 findings', names))
  static = results.get('static')
  if static:
    for tool, data in static['tools'].items():
      scope = '' if tool != 'pytype' else f" ({static['pytype_scope']})"
      rows.append((f'{tool}{scope}', f"{data['baseline']} errors",
                   f"{data['with_ours']} errors",
                   f"{len(data['in_ours'])} in changed files"))
  docs = results.get('docs')
  if docs:
    rows += _docs_rows(docs)
  lines = ['| check | pristine | with the series | notes |',
           '|---|---|---|---|']
  for row in rows:
    lines.append('| ' + ' | '.join(str(c).replace('|', '\\|') for c in row)
                 + ' |')
  apply = results.get('apply', {})
  head = ''
  if apply:
    versions = apply['versions']['patched']
    head = (f"Flax commit `{apply['base'][:8]}`, {len(apply['patches'])}"
            f" patches; Python {versions[0]}, jax {versions[1]}, flax"
            f" {versions[2]}.\n\n")
  verdict = ', '.join(f"{part}: {'green' if r['green'] else 'NOT green'}"
                      for part, r in results.items())
  return head + '\n'.join(lines) + f'\n\n{verdict}\n'


RUNNERS = {
    'apply': part_apply, 'commits': part_commits, 'tests': part_tests,
    'doctests': part_doctests,
    'guides': part_guides, 'hooks': part_hooks, 'static': part_static,
    'docs': part_docs,
}


def parse_args(argv: tp.Sequence[str] | None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('checkout', type=pathlib.Path,
                      help='a clean git checkout of google/flax')
  parser.add_argument('--work', type=pathlib.Path,
                      help='work directory (default build/patchset/COMMIT)')
  parser.add_argument('--parts', default=','.join(PARTS),
                      help=f'comma-separated subset of {",".join(PARTS)}')
  parser.add_argument('--reuse', action='store_true',
                      help='skip the parts whose results are already there')
  parser.add_argument('--workers', type=int, default=2,
                      help='pytest-xdist workers, as Flax CI (default 2)')
  parser.add_argument(
      '--commit-tests', choices=('own', 'all'), default='own',
      help="at each commit, run the test files it adds and the first test"
      " of each earlier one (own), or every test file of ours (all)")
  parser.add_argument(
      '--commits', default='',
      help='comma-separated keys of the commits to check (default: all)')
  parser.add_argument(
      '--jax', default=JAX_PINNED, choices=JAX_RELEASES,
      help=f'the jax (and jaxlib) release of the venvs (default {JAX_PINNED})')
  parser.add_argument('--python', default=sys.executable,
                      help='the interpreter of the fresh venvs')
  parser.add_argument(
      '--keep-pristine', action='store_true',
      help='reuse the pristine tree, venv and test results if present (they'
      ' do not depend on the series)')
  parser.add_argument('--without-docs', action='store_true',
                      help='the series without its docs commit')
  parser.add_argument('--pytype-scope', choices=('changed', 'all'),
                      default='changed',
                      help='pytype on the changed files, or all of flax/')
  parser.add_argument('--static-workdir', type=pathlib.Path,
                      help="check_static.py's kept copy (pytype's cache)")
  args = parser.parse_args(argv)
  args.parts = [p.strip() for p in args.parts.split(',') if p.strip()]
  args.commits = [c.strip() for c in args.commits.split(',') if c.strip()]
  unknown = set(args.parts) - set(PARTS)
  if unknown:
    parser.error(f'unknown parts: {sorted(unknown)}')
  return args


def main(argv: tp.Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  args.checkout = args.checkout.resolve()
  try:
    base = make_patchset.check_checkout(args.checkout)
  except make_patchset.PatchsetError as e:
    print(f'check_patchset: error: {e}', file=sys.stderr)
    return 2
  default = base[:12] + ('' if args.jax == JAX_PINNED else f'-jax{args.jax}')
  work = (args.work or REPO / 'build' / 'patchset' / default).resolve()
  (work / 'results').mkdir(parents=True, exist_ok=True)
  (work / 'logs').mkdir(parents=True, exist_ok=True)
  results = {}
  for part in PARTS:
    path = work / 'results' / f'{part}.json'
    if part in args.parts and not (args.reuse and path.exists()):
      if part != 'apply' and not (work / 'results' / 'apply.json').exists():
        print(f'check_patchset: {part} needs apply first', file=sys.stderr)
        return 2
      print(f'== {part}', flush=True)
      start = time.monotonic()
      try:
        result = RUNNERS[part](args, work)
      except Exception as e:  # pylint: disable=broad-except
        # One part that cannot run does not stop the others.
        traceback.print_exc()
        result = {'error': f'{type(e).__name__}: {e}', 'green': False}
      result['seconds'] = round(time.monotonic() - start)
      path.write_text(json.dumps(result, indent=2))
      print(f'== {part}: {"green" if result["green"] else "NOT green"}'
            f' ({result["seconds"]}s)', flush=True)
    if path.exists():
      results[part] = json.loads(path.read_text())
  table = summary_table({p: r for p, r in results.items() if 'error' not in r})
  (work / 'summary.md').write_text(table)
  print('\n' + table)
  for part, result in results.items():
    if 'error' in result:
      print(f'{part}: {result["error"][:2000]}')
  return 0 if all(r['green'] for r in results.values()) else 1


if __name__ == '__main__':
  sys.exit(main())
