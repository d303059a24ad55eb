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
"""``recv.sow(nnx.Intermediate, name, v)`` -> ``sow(v, name=name)``."""

from __future__ import annotations

import libcst as cst

from . import base

_PARAMS = ('variable_type', 'name', 'value', 'reduce_fn', 'init_fn')


def rewrite(call: cst.Call, alias: str, mode: str) -> cst.Call:
  bound = base.bound_args(call, _PARAMS)
  args = [cst.Arg(bound['value'].value),
          base.keyword('name', bound['name'].value)]
  if mode == 'clobber':  # reduce_fn=lambda x, y: y keeps the last value
    args.append(base.keyword('mode', cst.SimpleString("'clobber'")))
  return call.with_changes(func=cst.Name(alias), args=base.arg_list(args))


class SowToFunctional(base.SiteTransformer):
  """Rewrites the planned ``Module.sow`` calls."""

  ENTRIES = 'sows'

  def edits(self):
    edits = {}
    for unit, call, alias, mode in self.plan.sows:
      if unit != self.unit:
        continue
      node = self.tracker[call]
      edits[node] = lambda updated, a=alias, m=mode: rewrite(updated, a, m)
      self.needs(node, 'sow', alias)
    return edits
