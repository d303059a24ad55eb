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
"""A progress bar on stderr for long runs, as ruff and pip draw theirs.

Drawn with rich (a dependency of Flax) only where stderr is a terminal and
``--no-progress``/``--quiet`` are not given; the bar is erased when the run
ends, so what stays on the terminal is the same as without it. Elsewhere (a
pipe, a CI log, a test) it writes nothing.
"""

from __future__ import annotations

import contextlib
import typing as tp


class Progress:
  """Phases of a run, each a bar of the files it works on."""

  def __init__(self, stream: tp.Any = None, enabled: bool = True):
    self._bar = None
    if not enabled or stream is None or not _is_terminal(stream):
      return
    try:
      # pylint: disable=g-import-not-at-top
      from rich import console as rich_console
      from rich import progress as rich_progress
      # pylint: enable=g-import-not-at-top
    except ImportError:  # rich comes with Flax; without it, no bar
      return
    self._bar = rich_progress.Progress(
        rich_progress.TextColumn('{task.description}'),
        rich_progress.BarColumn(),
        rich_progress.MofNCompleteColumn(),
        rich_progress.TimeElapsedColumn(),
        console=rich_console.Console(file=stream),
        transient=True)

  @property
  def enabled(self) -> bool:
    return self._bar is not None

  @contextlib.contextmanager
  def phase(self, description: str, total: int):
    """Yields ``advance()``, to call once per file done."""
    if self._bar is None or total < 1:
      yield lambda: None
      return
    task = self._bar.add_task(description, total=total)
    try:
      yield lambda: self._bar.advance(task)
    finally:
      self._bar.remove_task(task)

  def __enter__(self) -> Progress:
    if self._bar is not None:
      self._bar.start()
    return self

  def __exit__(self, *exc_info) -> None:
    if self._bar is not None:
      self._bar.stop()


def _is_terminal(stream) -> bool:
  try:
    return bool(stream.isatty())
  except (AttributeError, ValueError):  # no isatty, or a closed stream
    return False
