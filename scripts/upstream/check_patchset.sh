#!/usr/bin/env bash
# Applies the upstream patch series to a Flax checkout and runs Flax's CI on
# it; see check_patchset.py (beside this script) for the steps and options.
#
#   scripts/upstream/check_patchset.sh FLAX_CHECKOUT [options]
#
# Runs in the Python of the active venv (this repository's), which needs
# PyYAML (a Flax dependency); the checks themselves run in fresh venvs.
set -euo pipefail
if [ "$#" -lt 1 ]; then
  echo "usage: $0 FLAX_CHECKOUT [check_patchset.py options]" >&2
  exit 2
fi
exec python "$(dirname "$0")/check_patchset.py" "$@"
