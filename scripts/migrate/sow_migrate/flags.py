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
"""Flags: why a site was left alone, one line a person can act on."""

from __future__ import annotations

import dataclasses

# The longest line of the errors (a parse error quotes the parser's whole
# expectation); reasons are never cut.
MAX_LINE = 200

REASONS = {
    'nested-consumer': 'the captured State is read by module path',
    'to-pure-dict': '.to_pure_dict() over the captured State',
    'to-flat-state': 'the captured State is flattened',
    'tree-leaves': 'jax.tree functions over the captured State',
    'state-use': 'the captured State is used in a way the codemod cannot map',
    'escaping-state': 'the captured State is returned, stored or passed on',
    'unknown-result': 'the result of nnx.capture is not unpacked as (y, s)',
    'multi-instance': 'one name sown by several instances in one model',
    'module-path': 'a free sow would lose the module path of the values',
    'transform': 'the sow runs under an NNX transform',
    'filter-use': 'nnx.Intermediate used as a filter',
    'subclass': 'a Variable type other than nnx.Intermediate',
    'unknown-type': 'a Variable type the codemod cannot resolve',
    'custom-reducer': 'custom reduce_fn/init_fn',
    'kwargs': '*args/**kwargs hide the arguments',
    'method-outputs': 'method_outputs= captures method results implicitly',
    'perturbation': 'the perturbation workflow (nnx.Perturbation, init=)',
    'several-types': 'several variable types in one call',
    'direct-intermediate': 'an nnx.Intermediate Variable assigned directly',
    'nonliteral-name': 'the name is neither a literal nor a string constant',
    'sow-result-used': 'the bool returned by .sow() is used',
    'not-in-module': 'not inside an NNX Module method',
    'no-sow-found': 'no sow in the project reaches this capture',
    'pop-not-adjacent': 'nnx.pop is not right after a call on the object',
    'pop-form': 'nnx.pop with several filters or an unusual shape',
    'pop-discarded': 'nnx.pop result discarded (it clears the module)',
    'earlier-call': 'an earlier call may have left intermediates to pop',
    'later-pop': 'a later nnx.pop of the object reads what capture keeps',
    'capture-hazard': "Flax 0.12.8's nnx.capture would break this model "
                      '(--nnx-capture=transform: the code will not run on '
                      'it)',
    'kept-module-sow': 'the functional capture would run a Module.sow that '
                       "stays (it raises on Flax 0.12.8's own)",
    'legacy-reader': 'read by a legacy consumer that is not migrated',
    'legacy-sow': 'reads a sow that is not migrated',
    'attribute-read': 'a sown value is read as a module attribute',
    'may-read': 'getattr with a computed name may read a sown value',
    'captures-read': "__captures__, where Flax 0.12.8's nnx.capture keeps "
                     'what it collects, is read',
    'internal-error': 'the codemod failed on this file',
    'outside-paths': 'in a file of the project not among the PATHs given',
    'library': 'sown in a library the project imports (not rewritten)',
}


def shorten(items, limit: int = 3) -> str:
  """'a, b, c and 4 more' for a list of strings."""
  items = list(dict.fromkeys(items))
  head = ', '.join(items[:limit])
  if len(items) > limit:
    head += f' and {len(items) - limit} more'
  return head


@dataclasses.dataclass(frozen=True, order=True)
class Flag:
  """One site left alone, and why."""

  path: str
  line: int
  col: int
  code: str
  detail: str = ''
  unit: str = ''  # 'cell 3' in a notebook; '' elsewhere

  @property
  def message(self) -> str:
    return self.detail or REASONS[self.code]

  def __str__(self) -> str:
    # The whole reason, on one line: never cut (the terminal wraps it,
    # runner.write_flag).
    suffix = f' [{self.unit}]' if self.unit else ''
    head = f'{self.path}:{self.line}:{self.col}: {self.code}: '
    return head + ' '.join(self.message.split()) + suffix
