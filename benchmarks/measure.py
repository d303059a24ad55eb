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
"""How the benchmarks measure: paired medians and XLA compile counts.

Shared by ``sow_bench.py`` and ``device_suite.py``, so that a ratio means
the same thing in both.
"""

from __future__ import annotations

import statistics
import time
import typing as tp

import jax

# The event JAX reports for each XLA compilation.
_BACKEND_COMPILE_EVENT = '/jax/core/compile/backend_compile_duration'


def paired(*fns: tp.Callable[[], tp.Any], repeats: int, number: int = 1,
           warmup: int = 1) -> tuple[float, ...]:
  """Median seconds per call of each fn, alternating repeat by repeat (so
  that the machine's load falls on every side alike)."""
  for _ in range(warmup):
    for fn in fns:
      jax.block_until_ready(fn())
  times: list[list[float]] = [[] for _ in fns]
  for _ in range(repeats):
    for fn, fn_times in zip(fns, times):
      start = time.perf_counter()
      for _ in range(number):
        out = fn()
      jax.block_until_ready(out)
      fn_times.append((time.perf_counter() - start) / number)
  return tuple(statistics.median(t) for t in times)


def count_compiles(fn: tp.Callable[[], tp.Any], calls: int) -> int:
  """XLA compilations during ``calls`` calls of ``fn``."""
  compiles = []

  def listener(event, duration_secs, **kwargs):
    del duration_secs, kwargs
    if event == _BACKEND_COMPILE_EVENT:
      compiles.append(event)

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    for _ in range(calls):
      jax.block_until_ready(fn())
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)
  return len(compiles)
