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
"""What the codemod knows about Flax: the qualified names of the APIs."""

from __future__ import annotations

import libcst as cst
from libcst import metadata

_NNX_PREFIXES = ('flax.experimental.nnx.', 'flax.nnx.')
# Public names of flax.nnx that the codemod recognises, whatever submodule of
# flax.nnx defines them (flax.nnx.variablelib.Intermediate is
# flax.nnx.Intermediate).
_KNOWN = frozenset({
    'Module', 'Intermediate', 'Perturbation', 'Variable', 'capture', 'pop',
    'state', 'split', 'StateAxes', 'Not', 'scan', 'vmap', 'pmap', 'remat',
    'RNN', 'fori_loop', 'while_loop', 'cond', 'switch', 'split_rngs',
    'jit', 'grad', 'value_and_grad', 'shard_map', 'to_flat_state',
    'to_pure_dict', 'merge_state', 'iter_graph', 'List', 'Sequential',
    'Dict',
})
# flax.nnx classes that are not Modules (subclassing them makes no Module).
NOT_MODULES = frozenset({
    'Variable', 'Param', 'BatchStat', 'Cache', 'Intermediate', 'Perturbation',
    'VariableState', 'RngState', 'RngKey', 'RngCount', 'RngStream', 'Rngs',
    'Pytree', 'Object', 'State', 'GraphDef', 'Optimizer', 'Metric',
})
INTERMEDIATE = 'flax.nnx.Intermediate'
PERTURBATION = 'flax.nnx.Perturbation'
MODULE = 'flax.nnx.Module'
CAPTURE = 'flax.nnx.capture'
POP = 'flax.nnx.pop'
# nnx transforms under which a sow's values travel through the transform's
# state (a functional sow there is collected differently).
TRANSFORMS = frozenset(f'flax.nnx.{n}' for n in (
    'scan', 'vmap', 'pmap', 'remat', 'RNN', 'fori_loop', 'while_loop',
    'cond', 'switch', 'shard_map'))
# Calls that take a filter: nnx.Intermediate there is not a capture.
FILTER_CALLS = frozenset(f'flax.nnx.{n}' for n in (
    'state', 'split', 'pop', 'StateAxes', 'Not', 'merge_state'))


def canonical(qualified: str) -> str:
  """'flax.nnx.variablelib.Intermediate' -> 'flax.nnx.Intermediate'."""
  for prefix in _NNX_PREFIXES:
    if qualified.startswith(prefix):
      last = qualified.rsplit('.', 1)[-1]
      if last in _KNOWN:
        return 'flax.nnx.' + last
      return 'flax.nnx.' + qualified[len(prefix):]
  return qualified


def is_linen(qualified: str) -> bool:
  return qualified == 'flax.linen' or qualified.startswith('flax.linen.')


def qualified_names(scope: metadata.Scope | None, node: cst.CSTNode,
                    module: str, package: str) -> set[str]:
  """The canonical fully qualified names ``node`` may refer to, in the
  module named ``module`` of the package ``package``.

  Asked of the node's scope (what ``FullyQualifiedNameProvider`` gives, for
  the nodes asked about only: that provider resolves every node of the
  unit, which cost about a seventh of a run over Flax's repository).
  """
  if scope is None:
    return set()
  return {canonical(_absolute(q, module, package))
          for q in scope.get_qualified_names_for(node)}


def _absolute(name: metadata.QualifiedName, module: str, package: str) -> str:
  """``name`` spelt from the top package: a name of this module or one
  imported relatively (``from .layers import Block``) gets its module's."""
  if name.source == metadata.QualifiedNameSource.BUILTIN or (
      name.source == metadata.QualifiedNameSource.IMPORT
      and not name.name.startswith('.')):
    return name.name
  bare = name.name.lstrip('.')
  dots = len(name.name) - len(bare)
  if not dots:
    return f'{module}.{bare}' if module else bare
  # One dot: this package; each more dot, one package up.
  parts = package.split('.') if package else []
  if dots - 1 >= len(parts):
    return name.name  # above the top package (Python refuses): no class
  return '.'.join([*parts[:len(parts) - (dots - 1)], bare])
