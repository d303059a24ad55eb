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
"""Reads of a captured State: ``s['n'].value`` -> ``s['n']``, ``s.n`` ->
``s['n']``; for a keep-last sow (``mode='clobber'``) ``s['n'][0]``."""

from __future__ import annotations

import libcst as cst

from . import base


def rewrite(node: cst.CSTNode, access, mode: str) -> cst.CSTNode:
  value = node.value if access.value else node
  if isinstance(value, cst.Attribute):
    value = cst.Subscript(value.value, [cst.SubscriptElement(cst.Index(
        cst.SimpleString(repr(access.name))))])
  if mode == 'clobber':
    # The legacy Variable holds the last value itself; the functional tuple
    # holds it as its only element.
    value = cst.Subscript(value, [cst.SubscriptElement(
        cst.Index(cst.Integer('0')))])
  return value


class StateAccess(base.SiteTransformer):
  """Rewrites the planned reads of captured States."""

  ENTRIES = 'accesses'

  def edits(self):
    edits = {}
    for unit, access, mode in self.plan.accesses:
      if unit != self.unit:
        continue
      node = self.tracker[access.node]
      edits[node] = base.chain(edits.get(node), lambda updated, a=access,
                               m=mode: rewrite(updated, a, m))
    return edits
