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
"""``--jobs N``: the work of each file, in N worker processes.

Reading and analysing a file, and rewriting it once the decisions are made,
depend on that file alone; deciding needs every file's facts and runs in
the main process. A worker sends back the facts without the syntax trees
(which are large to send), and the rewrite step analyses the file again in
a worker. With one job the same functions run in this process and the trees
are kept. Results come back in the order of the files, so the output is the
same whatever N.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import traceback
import typing as tp

from . import analysis as analysis_lib
from . import plan, progress

T = tp.TypeVar('T')
R = tp.TypeVar('R')


class Pool:
  """``map`` over files, in this process (one job) or in N workers."""

  def __init__(self, jobs: int, bar: progress.Progress | None = None):
    self.jobs = max(1, jobs)
    self._executor = None
    self._bar = bar or progress.Progress(enabled=False)

  @property
  def parallel(self) -> bool:
    return self.jobs > 1

  def map(self, function: tp.Callable[[T], R], items: tp.Sequence[T],
          description: str = '', sizes: tp.Sequence[int] | None = None
          ) -> list[R]:
    """``[function(item) for item in items]``, in order.

    The progress bar (if any) shows ``description`` and the items done.
    With several jobs the items are handed out one at a time, the largest
    (``sizes``) first, so that one large file does not end the run alone.
    """
    with self._bar.phase(description, len(items)) as advance:
      return self._map(function, items, advance, sizes)

  def _map(self, function, items, advance, sizes):
    if not self.parallel or len(items) < 2:
      results = []
      for item in items:
        results.append(function(item))
        advance()
      return results
    if self._executor is None:
      # Spawned, not forked: the caller may hold threads (a test under
      # JAX), which a fork would copy in whatever state they are.
      self._executor = concurrent.futures.ProcessPoolExecutor(
          self.jobs, mp_context=multiprocessing.get_context('spawn'))
    order = sorted(range(len(items)), key=lambda i: -sizes[i]) if sizes else (
        range(len(items)))
    futures = {self._executor.submit(function, items[i]): i for i in order}
    results: list[tp.Any] = [None] * len(items)
    for future in concurrent.futures.as_completed(futures):
      results[futures[future]] = future.result()
      advance()
    return results

  def close(self) -> None:
    if self._executor is not None:
      self._executor.shutdown()
      self._executor = None


def _strip(result: analysis_lib.FileAnalysis) -> analysis_lib.FileAnalysis:
  """The facts of a file without its syntax trees."""
  for unit in result.units:
    unit.module = None
    for site in unit.facts.sites:
      site.node = site.pop_call = site.pop_statement = None
      site.pop_statement_candidate = None
      if site.consumer is not None:
        site.consumer.accesses, site.consumer.call = [], None
  result.doc = None
  return result


def sites_of(result: analysis_lib.FileAnalysis) -> list:
  return [s for unit in result.units for s in unit.facts.sites]


def analyse(job: tuple) -> tuple:
  """Reads and analyses one file.

  Args:
    job: (path, display, root, data, keep_trees).

  Returns:
    ('ok', FileAnalysis) or ('internal', one-line error, traceback).
  """
  path, display, root, data, keep = job
  try:
    result = analysis_lib.analyse(display, data, root, path)
  except Exception as e:  # noqa: BLE001  pylint: disable=broad-except
    return 'internal', f'{type(e).__name__}: {e}', ''.join(
        traceback.format_exception(e))
  return 'ok', result if keep else _strip(result)


def rewrite(job: tuple) -> tuple:
  """Rewrites one file from its decisions (given in the order of its sites).

  Args:
    job: (path, display, root, data, decisions, target, annotate, modes,
      analysis or None to analyse ``data`` again, the flags of its readers
      that are no sites).

  Returns:
    ('ok', FileResult) or ('internal', one-line error, traceback).
  """
  (path, display, root, data, decisions, target, annotate, modes, done,
   readers) = job
  try:
    result = done or analysis_lib.analyse(display, data, root, path)
    sites = sites_of(result)
    if len(sites) != len(decisions):
      raise RuntimeError('the file changed during the run')
    by_site = {id(s): d for s, d in zip(sites, decisions) if d is not None}
    return 'ok', plan.rewrite_file(result, by_site, target, annotate, modes,
                                   readers)
  except Exception as e:  # noqa: BLE001  pylint: disable=broad-except
    return 'internal', f'{type(e).__name__}: {e}', ''.join(
        traceback.format_exception(e))
