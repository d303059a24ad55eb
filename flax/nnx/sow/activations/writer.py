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
"""The host side of an export: a thread that writes batches as they come.

The device computes batch ``k + 1`` while this thread writes batch ``k``:
JAX dispatches a jitted step asynchronously, the step's outputs wait in a
bounded queue (``in_flight`` batches), and the thread takes each in turn,
copies the shards this process holds to host memory and starts writing
them with tensorstore; the writes of two batches overlap, and batches are
committed in order as their writes finish. So host memory holds at most
``in_flight + 3`` batches of outputs (the queue's, the two being written
and the one being queued), whatever the dataset's size, and a full queue
makes the producer wait (back pressure) rather than grow.

Each process writes only its addressable shards with ``replica_id == 0``:
a replicated array is written once, by the process holding its first
replica, and nothing is gathered across processes.
"""

from __future__ import annotations

import collections
import queue
import threading
import typing as tp

import numpy as np

from flax.nnx.sow.activations import store as store_lib

_DONE = object()
# Batches whose writes may be under way at once.
_WRITING = 2


def _bounds(index: tuple[slice, ...], shape: tuple[int, ...]):
  return tuple(
      (0 if s.start is None else s.start, n if s.stop is None else s.stop)
      for s, n in zip(index, shape)
  )


def shard_writes(spec: store_lib.ArraySpec, row0: int,
                 value: tp.Any) -> list[tuple[tuple[slice, ...], tp.Any]]:
  """The ``(target index, shard)`` pairs this process writes of ``value``,
  an output of the batch whose first row is ``row0``."""
  writes = []
  for shard in value.addressable_shards:
    if shard.replica_id != 0:
      continue
    bounds = _bounds(shard.index, value.shape)
    if spec.per == 'row':
      (start, stop), rest = bounds[0], bounds[1:]
      target = (slice(row0 + start, row0 + stop),
                *(slice(a, b) for a, b in rest))
    else:
      target = (slice(row0, row0 + 1), *(slice(a, b) for a, b in bounds))
    writes.append((target, shard.data))
  return writes


class Writer:
  """Writes the outputs of batches, in order, on a thread of its own.

  Args:
    store: the open store.
    process: this process's index, whose progress it commits.
    in_flight: the most batches waiting to be written.
    on_written: called with ``(batch, bytes)`` once a batch is committed.
  """

  def __init__(self, store: store_lib.Store, process: int, in_flight: int,
               on_written: tp.Callable[[int, int], None]):
    self._store = store
    self._process = process
    self._on_written = on_written
    self._queue: queue.Queue = queue.Queue(maxsize=in_flight)
    self._error: BaseException | None = None
    self.bytes_written = 0
    self._thread = threading.Thread(
        target=self._run, name='flax.nnx.sow.activations.writer', daemon=True)
    self._thread.start()

  def put(self, batch: int, outputs: tp.Mapping[str, tp.Any]) -> None:
    """Queues batch ``batch``'s outputs, waiting while the queue is full."""
    while True:
      self._raise()
      try:
        self._queue.put((batch, outputs), timeout=0.05)
        return
      except queue.Full:
        continue

  def close(self) -> None:
    """Writes and commits every queued batch, then stops the thread."""
    if self._thread.is_alive():
      while self._thread.is_alive():
        try:
          self._queue.put(_DONE, timeout=0.05)
          break
        except queue.Full:
          continue
      self._thread.join()
    self._raise()

  def _raise(self) -> None:
    if self._error is not None:
      error, self._error = self._error, None
      raise RuntimeError(
          'export: writing to the activations store failed; the batches'
          ' before it are complete.'
      ) from error

  def _run(self) -> None:
    writing: collections.deque = collections.deque()
    try:
      while True:
        if len(writing) == _WRITING:
          self._finish(*writing.popleft())
        if (item := self._queue.get()) is _DONE:
          break
        writing.append(self._start(*item))
      while writing:
        self._finish(*writing.popleft())
    except BaseException as e:  # pylint: disable=broad-exception-caught
      self._error = e

  def _start(self, batch: int, outputs: tp.Mapping[str, tp.Any]):
    """Starts writing a batch; returns what ``_finish`` waits for."""
    futures, nbytes = [], 0
    for spec in self._store.layout.arrays:
      array = self._store.arrays[spec.path]
      row0 = self._store.rows(spec, batch)
      for target, data in shard_writes(spec, row0, outputs[spec.path]):
        host = np.asarray(data)
        if spec.per == 'batch':
          host = host[None]
        nbytes += host.nbytes
        # The shard is never modified, so tensorstore may keep it rather
        # than copy it.
        futures.append(array[target].write(
            host, can_reference_source_data_indefinitely=True))
    return batch, futures, nbytes

  def _finish(self, batch: int, futures: list[tp.Any], nbytes: int) -> None:
    """Waits for a batch's writes, then commits it."""
    for future in futures:
      future.result()
    self._store.commit(self._process, batch + 1)
    self.bytes_written += nbytes
    self._on_written(batch, nbytes)
