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
"""``recv.perturb(name, v)`` -> ``perturb(v, name=name)``."""

from __future__ import annotations

import libcst as cst

from . import base

_PARAMS = ('name', 'value', 'variable_type')


def rewrite(call: cst.Call, alias: str) -> cst.Call:
  bound = base.bound_args(call, _PARAMS)
  args = [cst.Arg(bound['value'].value),
          base.keyword('name', bound['name'].value)]
  return call.with_changes(func=cst.Name(alias), args=base.arg_list(args))


class PerturbToFunctional(base.SiteTransformer):
  """Rewrites the planned ``Module.perturb`` calls."""

  ENTRIES = 'perturbs'

  def edits(self):
    edits = {}
    for unit, call, alias in self.plan.perturbs:
      if unit != self.unit:
        continue
      node = self.tracker[call]
      edits[node] = lambda updated, a=alias: rewrite(updated, a)
      self.needs(node, 'perturb', alias)
    return edits
