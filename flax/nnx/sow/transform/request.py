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
"""What one interpretation of a jaxpr does: the ``Request``."""

from __future__ import annotations

import dataclasses
import typing as tp

from flax.nnx.sow.transform import deferred
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform.selection import SiteFilter
from flax.nnx.sow.transform.steps import LoopBounds


@dataclasses.dataclass(frozen=True)
class Request:
  """What an interpretation does; hashable, so part of every cache key.

  Attributes:
    selection: the sows this interpretation may handle.
    collect: record the values of the selected sows (``capture``).
    planted: the selected sows that take planted values (``plant``), or
      ``None``.
    rebind_unhandled: re-bind the sows it does not handle, so that an
      enclosing interpretation still sees them; ``False`` drops them.
    refuse_unread: planting into a sow whose result the program never reads
      is an error (``plant``); ``nnx.capture`` plants ``init`` perturbations
      wherever legacy added them, read or not.
    fn_names: the planted names whose values a function computes from the
      sown value (``plant(f, {name: fn})``), in a fixed order; the functions
      themselves are per call (``Scope.fns``).
    remove: handle the selected sows by removing them, recording and
      planting nothing (see ``removing``).
    bounds: how many steps of a ``while_loop`` an append site keeps
      (``capture(f, max_steps=...)``).
  """

  selection: SiteFilter
  collect: bool = True
  planted: SiteFilter | None = None
  rebind_unhandled: bool = True
  refuse_unread: bool = False
  fn_names: tuple[primitive.Name, ...] = ()
  remove: bool = False
  bounds: LoopBounds = LoopBounds()

  def handles(self, params: dict[str, tp.Any]) -> bool:
    if deferred.is_deferred(params):
      # Every running capture was asked to name it, and none could.
      raise deferred.refusal(params)
    return self.selection.matches(params) and (
        self.collect or self.remove or self.plants(params)
    )

  def removing(self) -> Request:
    """The request that removes the sows this one selects and keeps the
    others: for a body whose selected sows are taken elsewhere (a custom
    rule's), while an enclosing interpretation still sees the others."""
    return Request(
        self.selection,
        collect=False,
        rebind_unhandled=self.rebind_unhandled,
        remove=True,
    )

  def plants(self, params: tp.Mapping[str, tp.Any]) -> bool:
    """Whether a selected sow with these ``params`` takes a planted value."""
    return self.planted is not None and self.planted.matches(params)
