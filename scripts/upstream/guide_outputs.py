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
"""Stores the outputs of the series' guides, as Flax keeps its guides.

Flax commits its ``docs_nnx`` guides executed: the ``.ipynb`` holds the
outputs (its nbstripout hook runs with ``--keep-output``), and the doc build
renders them without running anything (``nb_execution_mode`` is ``'off'``
unless ``NB_EXECUTION_MODE`` is set). So the docs commit executes the pairs
that :func:`flax_docs.apply_docs` wrote, in the patched tree (the kernel
imports ``flax`` from it, ahead of any installed Flax), and stores what
they print. In ``extracting_intermediates`` only the cells we wrote get
outputs; Flax's own cells keep theirs.

A guide with a failing cell stops the series: nothing is stored.
"""

from __future__ import annotations

import os
import pathlib
import typing as tp

import execute_guides
import flax_notebooks


class GuideError(RuntimeError):
  """A guide failed to execute; the message names the cells."""


def kernel_env(tree: pathlib.Path) -> dict[str, str]:
  """This process's environment, with ``flax`` imported from ``tree``."""
  env = {k: v for k, v in os.environ.items()
         if k not in ('PYTHONPATH', 'JAX_ENABLE_X64', 'XLA_FLAGS',
                      'JAX_NUMPY_RANK_PROMOTION', 'FLAX_PROFILE')}
  env['PYTHONPATH'] = str(tree)
  return env


def store(tree: pathlib.Path, names: tp.Sequence[str],
          keep: tp.Mapping[str, tp.Collection[str]] | None = None,
          ) -> list[pathlib.Path]:
  """Executes ``docs_nnx/guides/NAME.ipynb`` of ``tree`` for each name and
  stores the outputs in the pair; ``keep[NAME]`` are ids of cells whose
  stored outputs stay. Returns the paths written."""
  keep = keep or {}
  pin = flax_notebooks.jupytext_pin(tree)
  env = kernel_env(tree)
  runs = {}
  for name in names:
    stem = tree / execute_guides.GUIDES_DIR / name
    runs[name] = execute_guides.execute(stem, env=env)
  failed = {name: run.failed for name, (run, _) in runs.items() if run.failed}
  if failed:
    raise GuideError('guides failed in the patched tree: ' + '; '.join(
        f'{name}: ' + ', '.join(f'code cell {i}: {e}' for i, e in cells)
        for name, cells in failed.items()))
  written = []
  for name, (_, executed) in runs.items():
    stem = tree / execute_guides.GUIDES_DIR / name
    written += execute_guides.store_outputs(
        stem, executed, pin, keep.get(name, ()))
  return written
