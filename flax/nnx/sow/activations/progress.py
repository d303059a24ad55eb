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
"""The progress bar of an export: batches, examples/s and bytes/s.

Drawn with rich (a dependency of Flax) on standard error, by the first
process only, and only when that is a terminal or when asked.
"""

from __future__ import annotations

import sys
import threading
import time
import typing as tp

from flax.nnx.sow import render


class Progress:
  """Counts committed batches and draws them, if ``enabled``.

  Args:
    enabled: ``None`` draws when standard error is a terminal.
    total: the batches to come, if known.
    examples_per_batch: for examples/s.
  """

  def __init__(self, enabled: bool | None, total: int | None,
               examples_per_batch: int, done: int = 0):
    if enabled is None:
      enabled = sys.stderr.isatty()
    self._lock = threading.Lock()
    self._examples = examples_per_batch
    self._start = time.perf_counter()
    self.batches = 0
    self.bytes = 0
    self._bar: tp.Any = None
    if enabled:
      from rich import console  # pylint: disable=g-import-not-at-top
      from rich import progress as rich_progress  # pylint: disable=g-import-not-at-top

      self._bar = rich_progress.Progress(
          rich_progress.TextColumn('export'),
          rich_progress.BarColumn(),
          rich_progress.MofNCompleteColumn(),
          rich_progress.TextColumn('{task.fields[rates]}'),
          rich_progress.TimeElapsedColumn(),
          console=console.Console(file=sys.stderr),
          transient=False,
      )
      self._task = self._bar.add_task(
          'export', total=None if total is None else done + total,
          completed=done, rates='')

  def __enter__(self) -> Progress:
    if self._bar is not None:
      self._bar.start()
    return self

  def __exit__(self, *exc) -> None:
    if self._bar is not None:
      self._bar.stop()

  def written(self, batch: int, nbytes: int) -> None:
    del batch
    with self._lock:
      self.batches += 1
      self.bytes += nbytes
      if self._bar is None:
        return
      seconds = max(time.perf_counter() - self._start, 1e-9)
      rates = (f'{self.batches * self._examples / seconds:,.0f} examples/s'
               f'  {render.format_bytes(self.bytes / seconds)}/s')
      self._bar.update(self._task, advance=1, rates=rates)

