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
"""Staging a call ``f(*args, **kwargs)`` to a jaxpr for the interpreter.

Array leaves of the arguments are traced; every other leaf reaches ``f``
unchanged, as in a direct call. The trace runs while ``harvesting`` is on, so
sow markers carry their effect and survive dead-code elimination.

NNX graph nodes (Modules, Variables, any ``nnx.Pytree``), as arguments or as
the callable itself (a Module or a bound method of one), are staged the way
``nnx.jit`` stages them, without ever putting a tracer into the caller's
objects:

1. outside, every graph node of the call is flattened at once (shared
   references stay shared) into a graph definition and its leaves;
2. inside the trace, the leaves are traced and merged into *copies*, and ``f``
   runs on the copies;
3. after ``f``, the copies are flattened again: each leaf ``f`` changed
   becomes an output of the jaxpr (or, if not an array, is kept aside);
4. once the interpreter has evaluated the jaxpr, ``unflatten_out`` writes the
   final, concrete values into the caller's Variables, as ``nnx.update``
   would, and returns ``f``'s result with the copies replaced by the caller's
   objects.

Only changed leaves are written back, so a call that updates nothing (a model
in evaluation mode) never writes to the caller's objects, and threads staging
the same model concurrently do not disturb each other. A call that changes
the graph structure (adds an attribute, replaces a submodule) or returns a new
graph node is written back through Flax's graph update, which, as in
``nnx.jit``, rebuilds the caller's objects in place.

Variables whose value is a mutable array reference (``nnx.var_defaults(
ref=True)``) are passed by reference: the jaxpr reads and writes the
reference, so evaluating it updates the caller's Variable directly.
Hijax Variables (``nnx.var_defaults(hijax=True)``) are passed by value like
ordinary ones; their copies are hijax Variables created inside the trace.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing as tp

import jax
import numpy as np
from jax._src import core

from flax.nnx import graphlib
from flax.nnx import statelib
from flax.nnx import variablelib
from flax.nnx.sow import primitive


def is_graph_node(x: tp.Any) -> bool:
  """Whether ``x`` is staged as an NNX graph node (copied, then updated)."""
  return graphlib.is_graph_node(x)


def _is_array(leaf: tp.Any) -> bool:
  return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


def _is_traced(leaf: tp.Any) -> bool:
  # Array references are traced too: the jaxpr then reads and writes them.
  return _is_array(leaf) or variablelib.is_array_ref(leaf)


def _is_output(leaf: tp.Any) -> bool:
  return _is_array(leaf) or isinstance(leaf, core.Tracer)


def _split_callable(f):
  """Returns ``(graph node or None, call(node, *args, **kwargs))``."""
  if is_graph_node(f):
    return f, lambda node, *args, **kwargs: node(*args, **kwargs)
  if inspect.ismethod(f) and is_graph_node(f.__self__):
    func = f.__func__
    return f.__self__, lambda node, *args, **kwargs: func(node, *args, **kwargs)
  return None, lambda _, *args, **kwargs: f(*args, **kwargs)


def _raw_value(leaf: tp.Any) -> tp.Any:
  """The value a flat-state leaf contributes to the trace."""
  if isinstance(leaf, variablelib.Variable) or type(leaf).__name__ == (
      'HijaxVariable'
  ):
    return leaf.get_raw_value()
  return leaf


@dataclasses.dataclass
class _Outcome:
  """What the traced function learned about the call; static, no tracers.

  Filled while tracing, read by ``StagedCall.unflatten_out``.
  """

  out_treedef: tp.Any = None
  out_kinds: list[tuple[str, tp.Any]] = dataclasses.field(
      default_factory=list
  )
  # Simple write-back: (flat-state position, 'out' | 'static', static value).
  updates: list[tuple[int, str, tp.Any]] = dataclasses.field(
      default_factory=list
  )
  # General write-back (structure changed or new graph nodes returned).
  general_graphdef: tp.Any = None
  general_kinds: list[tuple[str, tp.Any]] = dataclasses.field(
      default_factory=list
  )
  num_out_leaves: int = 0


@dataclasses.dataclass(frozen=True)
class StagedCall:
  """A call staged to a jaxpr, ready to be evaluated on ``inputs``.

  Attributes:
    jaxpr: the closed jaxpr of the call, over ``inputs``.
    inputs: the traced (array) leaves of the arguments, in order.
    out_tree: the pytree structure of the jaxpr's outputs: ``f``'s result
      (graph nodes and non-array leaves excluded) followed by the updated
      state of the graph nodes.
  """

  jaxpr: core.ClosedJaxpr
  inputs: list[tp.Any]
  out_tree: tp.Any
  _finish: tp.Callable[[tp.Sequence[tp.Any]], tp.Any]

  def unflatten_out(self, out_flat: tp.Sequence[tp.Any]) -> tp.Any:
    """Returns ``f``'s result from the evaluated outputs.

    Also writes the final state of the call's graph nodes back into the
    caller's objects, exactly once; so call it once, after evaluation
    succeeded (nothing is written if evaluation fails).
    """
    return self._finish(out_flat)


def stage(f: tp.Callable[..., tp.Any], args, kwargs) -> StagedCall:
  """Traces ``f(*args, **kwargs)`` to a jaxpr over its array leaves."""
  callable_node, call = _split_callable(f)
  is_leaf = lambda x: is_graph_node(x)
  leaves, treedef = jax.tree_util.tree_flatten(
      (callable_node, args, kwargs), is_leaf=is_leaf
  )
  node_pos = [i for i, leaf in enumerate(leaves) if is_graph_node(leaf)]
  nodes = [leaves[i] for i in node_pos]

  # (1) Outside: flatten every graph node at once, keeping shared references.
  ref_index = graphlib.RefMap()
  graphdef, flat_state = graphlib.flatten(
      nodes, ref_index=ref_index, with_paths=True, graph=True
  )
  state_values = [_raw_value(leaf) for leaf in flat_state.leaves]

  arg_traced = [
      not is_graph_node(leaf) and _is_traced(leaf) for leaf in leaves
  ]
  state_traced = [_is_traced(value) for value in state_values]
  inputs = [leaf for leaf, t in zip(leaves, arg_traced) if t] + [
      value for value, t in zip(state_values, state_traced) if t
  ]
  outcome = _Outcome()

  def flat_f(*input_values):
    values = iter(input_values)
    call_leaves = [
        next(values) if t else leaf for leaf, t in zip(leaves, arg_traced)
    ]
    values_in = [
        next(values) if t else value
        for value, t in zip(state_values, state_traced)
    ]
    # (2) Inside: merge the traced leaves into copies.
    index_ref = graphlib.IndexMap()
    copies = graphlib.unflatten(graphdef, list(values_in), index_ref=index_ref)
    for i, copy in zip(node_pos, copies):
      call_leaves[i] = copy
    node, call_args, call_kwargs = jax.tree_util.tree_unflatten(
        treedef, call_leaves
    )
    out = call(node, *call_args, **call_kwargs)
    # (3) After f: flatten the copies again and return what changed.
    return _after_call(out, copies, index_ref, graphdef, values_in, outcome)

  with primitive.harvesting(True):
    closed, out_shape = jax.make_jaxpr(flat_f, return_shape=True)(*inputs)

  originals = graphlib.IndexMap.from_refmap(ref_index)

  def finish(out_flat):
    # (4) Outside again: write back, then rebuild f's result.
    out_flat = list(out_flat)
    result_flat = out_flat[: outcome.num_out_leaves]
    state_flat = iter(out_flat[outcome.num_out_leaves :])
    if outcome.general_graphdef is None:
      _write_back(nodes, flat_state, outcome.updates, state_flat)
      new_nodes = None
    else:
      general_leaves = [
          next(state_flat) if kind == 'out' else value
          for kind, value in outcome.general_kinds
      ]
      _, new_nodes = graphlib.unflatten(
          outcome.general_graphdef,
          general_leaves,
          outer_index_outer_ref=originals,
      )
    results = iter(result_flat)
    new_node_iter = iter(new_nodes or ())
    out_leaves = []
    for kind, value in outcome.out_kinds:
      if kind == 'out':
        out_leaves.append(next(results))
      elif kind == 'original':
        out_leaves.append(originals[value])
      elif kind == 'new_node':
        out_leaves.append(next(new_node_iter))
      else:
        out_leaves.append(value)
    return jax.tree_util.tree_unflatten(outcome.out_treedef, out_leaves)

  return StagedCall(
      jaxpr=closed,
      inputs=inputs,
      out_tree=jax.tree_util.tree_structure(out_shape),
      _finish=finish,
  )


def _after_call(out, copies, index_ref, graphdef, values_in, outcome):
  """Step (3): the jaxpr outputs, recording in ``outcome`` how to use them."""
  copy_index = graphlib.RefMap.from_indexmap(index_ref)
  out_leaves, outcome.out_treedef = jax.tree_util.tree_flatten(
      out, is_leaf=is_graph_node
  )
  result = []
  new_nodes = []
  outcome.out_kinds = []
  for leaf in out_leaves:
    if is_graph_node(leaf):
      if leaf in copy_index:
        outcome.out_kinds.append(('original', copy_index[leaf]))
      else:
        outcome.out_kinds.append(('new_node', None))
        new_nodes.append(leaf)
    elif variablelib.is_array_ref(leaf):
      raise ValueError(
          'capture: the function returned a mutable array reference'
          f' {leaf!r}; references cannot leave a traced function.'
      )
    elif _is_output(leaf):
      outcome.out_kinds.append(('out', None))
      result.append(leaf)
    else:
      outcome.out_kinds.append(('static', leaf))
  outcome.num_out_leaves = len(result)

  final_graphdef, final_values = graphlib.flatten(
      copies, with_paths=False, graph=True
  )
  state_out = []
  if final_graphdef == graphdef and not new_nodes:
    outcome.general_graphdef = None
    outcome.updates = []
    for i, (before, after) in enumerate(zip(values_in, final_values)):
      if after is before:
        continue
      if variablelib.is_array_ref(after):
        raise ValueError(
            'capture: a Variable of a graph node was given a new mutable'
            ' array reference; references cannot leave a traced function.'
        )
      if _is_output(after):
        outcome.updates.append((i, 'out', None))
        state_out.append(after)
      else:
        outcome.updates.append((i, 'static', after))
  else:
    # General case, as nnx.jit's graph updates: flatten the copies and the
    # new nodes against the input indexes, to be merged into the originals.
    general_graphdef, general_values = graphlib.flatten(
        [copies, new_nodes],
        ref_index=graphlib.RefMap(),
        ref_outer_index=copy_index,
        with_paths=False,
        graph=True,
    )
    outcome.general_graphdef = general_graphdef
    outcome.general_kinds = []
    for value in general_values:
      if _is_output(value):
        outcome.general_kinds.append(('out', None))
        state_out.append(value)
      else:
        outcome.general_kinds.append(('static', value))
  return result + state_out


def _write_back(nodes, flat_state, updates, values) -> None:
  """Writes the changed leaves into the caller's objects (``nnx.update``)."""
  if not updates:
    return
  paths = flat_state.paths
  changed = []
  for i, kind, static in updates:
    changed.append((paths[i], next(values) if kind == 'out' else static))
  graphlib.update(nodes, statelib.from_flat_state(changed))
