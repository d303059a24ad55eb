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
"""A stack per thread: what is innermost on this thread, last."""

from __future__ import annotations

import contextlib
import threading
import typing as tp

T = tp.TypeVar('T')


class ThreadStack(threading.local, tp.Generic[T]):
  """A list per thread, innermost last: the captures, frames and refusals
  active on a thread are that thread's alone (another thread's calls run
  beside them, not inside)."""

  def __init__(self):
    self.stack: list[T] = []

  @contextlib.contextmanager
  def pushed(self, item: T) -> tp.Iterator[T]:
    """Puts ``item`` on this thread's stack while the block runs."""
    self.stack.append(item)
    try:
      yield item
    finally:
      popped = self.stack.pop()
      assert popped is item, (popped, item)
