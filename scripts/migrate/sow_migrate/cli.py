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
"""The command line: its options, and what to install when libcst is missing.

``migrate-sow`` (``pip install 'flax-nnx-sow[migrate]'``) and
``scripts/migrate/migrate_sow.py`` run ``main``. Without libcst (``pip
install flax-nnx-sow`` installs the command without it) it says what to
install instead of failing with a traceback; nothing here imports libcst
before it is known to be there, so ``--help`` works without it.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import hazards

EXIT_USAGE = 2
MISSING = ('{prog}: the codemod needs libcst, which is not installed here; '
           "install it with: pip install 'flax-nnx-sow[migrate]' (or pip "
           "install 'libcst>=1.9')\n")


def main(argv: list[str] | None = None) -> int:
  """Runs the codemod's command line; exit code 2 without libcst."""
  args = parse_args(sys.argv[1:] if argv is None else argv)
  # pylint: disable=g-import-not-at-top
  try:
    import libcst  # noqa: F401  pylint: disable=unused-import
  except ImportError:
    prog = (sys.argv[0].rsplit('/', 1)[-1] if sys.argv and sys.argv[0]
            else 'migrate-sow')
    sys.stderr.write(MISSING.format(prog=prog))
    return EXIT_USAGE
  from . import runner
  # pylint: enable=g-import-not-at-top
  err = open(os.devnull, 'w') if args.quiet else sys.stderr
  try:
    code, summary = runner.run(
        args.paths, target=args.target, mode=args.mode,
        annotate=args.annotate, root=args.root, verbose=args.verbose,
        err=err, jobs=args.jobs, nnx_capture=args.nnx_capture,
        progress=args.progress and not args.quiet)
    for line in summary.lines():
      err.write(line + '\n')
  finally:
    if args.quiet:
      err.close()
  return code


def parse_args(argv: list[str]) -> argparse.Namespace:
  parser = build_parser()
  args = parser.parse_args(argv)
  missing = [p for p in args.paths if not os.path.exists(p)]
  if missing:
    parser.error('no such file or directory: ' + ', '.join(missing))
  if args.jobs < 1:
    parser.error('--jobs must be at least 1')
  args.mode = args.mode or 'diff'
  return args


def build_parser() -> argparse.ArgumentParser:
  """The command line's options, each with its help text."""
  parser = argparse.ArgumentParser(
      description='Migrates Flax NNX code that reads sown values off '
      'modules (y = m(x) then nnx.pop) to nnx.capture, keeping Module.sow '
      'and Module.perturb as they are; reports every other reader with a '
      'reason. Whatever cannot be rewritten safely is left as it is and '
      'reported as path:line:col: code: reason.',
      epilog='Exit codes: 0 ok; 1 --check found changes; 2 usage error (or '
             'libcst missing); 3 some file could not be read or parsed; 4 '
             'internal error on some file (left untouched); 5 a file to '
             'write is not writable (nothing written).')
  parser.add_argument(
      'paths', nargs='+', metavar='PATH',
      help='.py files, notebooks (.ipynb) and Markdown pages (.md), or '
      'directories searched for them')
  parser.add_argument(
      '--target', choices=('capture', 'functional'), default='capture',
      help="'capture' (default): keep Module.sow/perturb (sites of the sow "
      "transform, named by module path) and turn a call followed by "
      "nnx.pop into nnx.capture. 'functional': also rewrite self.sow to "
      "flax.nnx.sow's sow where that keeps every name (a sow at the root "
      'of every State that reads it)')
  parser.add_argument(
      '--nnx-capture', choices=('auto', hazards.LEGACY, hazards.TRANSFORM),
      default='auto',
      help="the nnx.capture (and Module.sow) the migrated code will run on. "
      "'legacy' (Flax 0.12.8's, which writes on the model) keeps pops it "
      'would break, and, with --target=functional, captures that would run '
      "a Module.sow left as it is; 'transform' (flax.nnx.capture_compat's) "
      'has no such hazard. Default: the one installed here')
  group = parser.add_mutually_exclusive_group()
  group.add_argument('--diff', dest='mode', action='store_const',
                     const='diff', help='print a unified diff, with paths '
                     'relative to the project root (default)')
  group.add_argument('--write', dest='mode', action='store_const',
                     const='write', help='rewrite the files in place')
  group.add_argument('--check', dest='mode', action='store_const',
                     const='check', help='exit 1 if anything would change')
  parser.add_argument('--annotate', action='store_true',
                      help='add TODO(migrate_sow) comments at flagged sites')
  parser.add_argument('--project-root', dest='root', default=None,
                      metavar='DIR',
                      help='where readers are searched, and what paths are '
                      'relative to (default: the nearest folder above the '
                      'first PATH with pyproject.toml, setup.py or .git)')
  parser.add_argument('--jobs', type=int, default=1, metavar='N',
                      help='analyse and rewrite files in N processes (the '
                      'output is the same as with 1)')
  parser.add_argument('--no-progress', dest='progress', action='store_false',
                      help='no progress bar (it is drawn only when stderr is '
                      'a terminal)')
  parser.add_argument('--quiet', action='store_true',
                      help='print no flags, summary or progress on stderr '
                      '(the diff and the exit code stay)')
  parser.add_argument('--verbose', action='store_true',
                      help='print the traceback of internal errors')
  return parser
