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
"""``nnx.capture(f, nnx.Intermediate)`` -> ``capture(f)``."""

from __future__ import annotations

import libcst as cst

from . import base


def rewrite(call: cst.Call, alias: str,
            decorator: bool) -> cst.BaseExpression:
  if decorator:  # @nnx.capture(nnx.Intermediate) -> @capture
    return cst.Name(alias)
  return call.with_changes(func=cst.Name(alias),
                           args=base.arg_list([call.args[0]]))


class CaptureToFunctional(base.SiteTransformer):
  """Rewrites the planned legacy ``nnx.capture`` calls."""

  ENTRIES = 'captures'

  def edits(self):
    edits = {}
    for unit, call, alias, decorator in self.plan.captures:
      if unit != self.unit:
        continue
      node = self.tracker[call]
      edits[node] = lambda updated, a=alias, d=decorator: rewrite(
          updated, a, d)
      self.needs(node, 'capture', alias)
    return edits
