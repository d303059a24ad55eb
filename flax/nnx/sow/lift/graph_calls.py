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
Hijax Variables (``nnx.var_defaults(hijax=True)``) are passed by value, and
their copies are ordinary Variables (``hijax=False``) holding the same value:
Flax 0.12.8's Hijax Variables do not yet support, under a trace, everything
they support in a direct call (``LayerNorm`` reads ``.size``, ``BatchNorm``
``._can_update``), and a copy behaves like the Variable of a direct call.
Their final values are written back into the caller's Hijax Variables.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import typing as tp

import jax
import jax.core
import jax.extend.core
import jax.extend.linear_util
from jax.interpreters import partial_eval

from flax.nnx import graphlib
from flax.nnx import variablelib
from flax.nnx.sow.transform import deferred
from flax.nnx.sow.transform import staged_sows
from flax.nnx.sow.lift import module_paths
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.lift import graph_nodes
from flax.nnx.sow.lift import taps
from flax.nnx.sow.lift import write_back


def _is_traced(leaf: tp.Any) -> bool:
  # Array references are traced too: the jaxpr then reads and writes them.
  return primitive.is_array(leaf) or variablelib.is_array_ref(leaf)


def _trace_flat(
    fun: tp.Callable[..., list[tp.Any]], inputs: tp.Sequence[tp.Any]
) -> jax.extend.core.ClosedJaxpr:
  """The closed jaxpr of ``fun(*inputs)``, which takes and returns flat
  lists of arrays.

  What ``jax.make_jaxpr`` gives, without naming each input and output (a
  keypath rendered per leaf, a few microseconds each): the jaxpr is this
  package's own, interpreted and staged as one call, and its inputs and
  outputs are positions.
  """
  debug_info = jax.extend.core.DebugInfo(
      'capture', _FLAT_SOURCE, None, None)
  wrapped = jax.extend.linear_util.wrap_init(fun, debug_info=debug_info)
  jaxpr, _, consts = partial_eval.trace_to_jaxpr_dynamic(
      wrapped, [jax.typeof(x) for x in inputs])
  return jax.extend.core.ClosedJaxpr(jaxpr, consts)


_FLAT_SOURCE = 'flat_f'


def graph_node_of(f) -> tp.Any:
  """The graph node ``f`` calls (a Module, a bound method's, a tapped
  one's), or ``None``."""
  return _split_callable(f)[0]


def _split_callable(f):
  """Returns ``(graph node or None, call(node, *args, **kwargs))``."""
  if isinstance(f, taps.Tapped):
    # A tapped Module (or bound method) is staged as that graph node.
    node, inner = _split_callable(f.fn)
    run = f.run  # bound here: pytype loses the isinstance inside a lambda
    if node is not None:
      return node, lambda node, *args, **kwargs: run(
          lambda: inner(node, *args, **kwargs), (node, args, kwargs)
      )
  if graphlib.is_graph_node(f):
    return f, lambda node, *args, **kwargs: node(*args, **kwargs)
  if inspect.ismethod(f) and graphlib.is_graph_node(f.__self__):
    func = f.__func__
    return f.__self__, lambda node, *args, **kwargs: func(node, *args, **kwargs)
  return None, lambda _, *args, **kwargs: f(*args, **kwargs)


def _without_hijax(graphdef: graphlib.GraphDef) -> graphlib.GraphDef:
  """``graphdef`` with its Hijax Variables made ordinary ones."""
  nodes = [
      dataclasses.replace(
          node,
          metadata=graphlib.HashableMapping(
              dict(node.metadata, hijax=False), copy=False
          ),
      )
      if isinstance(node, graphlib.VariableDef) and node.metadata.get('hijax')
      else node
      for node in graphdef.nodes
  ]
  if all(a is b for a, b in zip(nodes, graphdef.nodes)):
    return graphdef
  return dataclasses.replace(graphdef, nodes=nodes)


def _raw_value(leaf: tp.Any) -> tp.Any:
  """The value a flat-state leaf contributes to the trace."""
  if isinstance(leaf, variablelib.Variable) or isinstance(
      leaf, variablelib.HijaxVariable
  ):
    return leaf.get_raw_value()
  return leaf


@dataclasses.dataclass(frozen=True)
class _Packed:
  """A pytree split into jaxpr outputs and static leaves (no tracers)."""

  treedef: tp.Any
  static: tuple[tp.Any, ...]  # a leaf, or _OUT for a jaxpr output

  def unpack(self, outputs: tp.Iterator[tp.Any]) -> tp.Any:
    leaves = [next(outputs) if s is _OUT else s for s in self.static]
    return jax.tree_util.tree_unflatten(self.treedef, leaves)


_OUT = object()


def _pack(tree: tp.Any, outputs: list[tp.Any]) -> _Packed:
  """Appends the array leaves of ``tree`` to ``outputs``; keeps the rest.

  ``tree`` is flat state from ``graphlib.flatten``, which holds the values of
  array references, never references, so every array leaf can be an output.
  """
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  static = []
  for leaf in leaves:
    if primitive.is_array(leaf):
      outputs.append(leaf)
      static.append(_OUT)
    else:
      static.append(leaf)
  return _Packed(treedef, tuple(static))


@dataclasses.dataclass
class _Outcome:
  """What the traced function learned about the call; static, no tracers.

  Filled while tracing (step 3), used by ``StagedCall.unflatten_out``.
  """

  # f's result: per leaf, ('out' | 'static', value) or ('original', index)
  # (a copy of an input node) or ('new', position in the new nodes).
  out_treedef: tp.Any = None
  out_kinds: list[tuple[str, tp.Any]] = dataclasses.field(
      default_factory=list
  )
  num_out_leaves: int = 0
  # Value write-back: (flat-state position, packed new value).
  updates: list[tuple[int, _Packed]] = dataclasses.field(default_factory=list)
  # New graph nodes returned by f that do not reference the inputs.
  new_graphdef: tp.Any = None
  new_state: _Packed | None = None
  # Graph write-back (structure changed, or new nodes referencing inputs).
  graph_graphdef: tp.Any = None
  graph_state: _Packed | None = None
  # The sows collected as they were staged (`staged_sows.Harvested`), if asked.
  harvested: tp.Any = None


@dataclasses.dataclass(frozen=True)
class StagedCall:
  """A call staged to a jaxpr, ready to be evaluated on ``inputs``.

  Attributes:
    jaxpr: the closed jaxpr of the call, over ``inputs``.
    inputs: the traced (array) leaves of the arguments, in order.
    harvested: the sows collected as they were staged
      (``staged_sows.Harvested``), whose leaves are the last outputs of
      ``jaxpr``; ``None`` unless the call was staged to collect them.
  """

  jaxpr: jax.extend.core.ClosedJaxpr
  inputs: list[tp.Any]
  harvested: tp.Any
  _finish: tp.Callable[[tp.Sequence[tp.Any]], tp.Any]

  def unflatten_out(self, out_flat: tp.Sequence[tp.Any]) -> tp.Any:
    """Returns ``f``'s result from the evaluated outputs.

    Also writes the final state of the call's graph nodes back into the
    caller's objects; so call it once, after evaluation succeeded (nothing is
    written if evaluation fails).
    """
    return self._finish(out_flat)


# The tag of the update context a staged call runs in: nested captures
# stack their contexts under it, apart from those of NNX's transforms.
_UPDATE_TAG = 'flax.nnx.sow'


def updating() -> tp.ContextManager[tp.Any]:
  """The context in which calls are prepared, traced and finished.

  In graph mode, the four steps of a staged call are the four splits and
  merges of ``nnx.update_context``, which keeps the references between the
  caller's objects and their copies, as ``nnx.jit`` does; so every
  :class:`Prepared` call is made, traced and finished inside one.
  """
  return graphlib.update_context(_UPDATE_TAG)


@contextlib.contextmanager
def staged(
    f: tp.Callable[..., tp.Any], args, kwargs, collect: tp.Any = None
) -> tp.Iterator[StagedCall]:
  """Traces ``f(*args, **kwargs)`` to a jaxpr over its array leaves.

  Evaluate the jaxpr and call :meth:`StagedCall.unflatten_out` inside the
  ``with`` block. With ``collect``, see :meth:`Prepared.trace`.
  """
  with updating():
    yield Prepared(f, args, kwargs).stage(collect)


class Prepared:
  """Step (1) of staging a call: its arguments split, ready to be traced.

  Graph nodes are split as ``nnx.jit`` splits them in the current graph mode
  (``nnx.set_graph_mode``, default the ``nnx_graph_mode`` flag): in graph
  mode, shared references stay shared and the copies returned by ``f`` are
  the caller's objects; in tree mode, graph nodes are pytrees, and a shared
  Variable, a Variable returned by ``f`` or a change of structure is an
  error, as in ``nnx.jit``. Make, trace and finish it inside
  :func:`updating`.
  """

  def __init__(
      self, f: tp.Callable[..., tp.Any], args, kwargs, *, paths: bool = True
  ):
    callable_node, self.call = _split_callable(f)
    # Whether the call runs in a functional frame, which names Module.sow
    # sites by module path (nnx.capture runs in its own frame instead).
    self.paths = paths
    self.leaves, self.treedef = jax.tree_util.tree_flatten(
        (callable_node, args, kwargs), is_leaf=graph_nodes.is_graph_node
    )
    is_node = [graph_nodes.is_graph_node(leaf) for leaf in self.leaves]
    self.node_pos = [i for i, node in enumerate(is_node) if node]
    self.nodes = [self.leaves[i] for i in self.node_pos]

    # Flatten every graph node at once, keeping shared references.
    self.graph = graphlib.set_graph_mode.current_value()
    if self.graph:
      with graphlib.split_context(_UPDATE_TAG) as split:
        self.graphdef, self.flat_state = split.flatten(
            self.nodes, with_paths=True
        )
    else:
      try:
        self.graphdef, self.flat_state = graphlib.flatten(
            self.nodes, with_paths=True, graph=False
        )
      except ValueError as e:  # a Variable reached twice
        raise ValueError(
            'capture: tree mode (nnx_graph_mode=False) does not support'
            f' shared references among the arguments, as in nnx.jit. {e}'
        ) from None
    self.traced_graphdef = _without_hijax(self.graphdef)
    state_values = [_raw_value(leaf) for leaf in self.flat_state.leaves]
    self.state_leaves, self.state_treedef = jax.tree_util.tree_flatten(
        state_values
    )
    self.arg_traced = [
        not node and _is_traced(leaf)
        for leaf, node in zip(self.leaves, is_node)
    ]
    self.state_traced = [_is_traced(leaf) for leaf in self.state_leaves]
    self.inputs = [
        leaf for leaf, t in zip(self.leaves, self.arg_traced) if t
    ] + [leaf for leaf, t in zip(self.state_leaves, self.state_traced) if t]

  def trace(
      self, collect: tp.Any = None
  ) -> tuple[jax.extend.core.ClosedJaxpr, _Outcome]:
    """Steps (2) and (3): the jaxpr of the call and its outcome.

    The jaxpr returns the array leaves of ``f``'s result, followed by the
    updated state of the graph nodes; the outcome says how to use them.
    With ``collect`` (a ``Request``), the sows it handles that are staged
    into this trace are collected as they are staged
    (:mod:`flax.nnx.sow.transform.staged_sows`): their leaves follow, and
    ``outcome.harvested`` says what they are.
    """
    outcome = _Outcome()
    leaves, arg_traced = self.leaves, self.arg_traced
    state_leaves, state_traced = self.state_leaves, self.state_traced
    graphdef = self.traced_graphdef

    # What each input is in the frames of the call, found before the trace
    # ends (its copies hold its tracers, which must not outlive it).
    origins: list[tp.Any] = []
    started: list[module_paths.Frame] = []

    def flat_f(*input_values):
      values = iter(input_values)
      call_leaves = [
          next(values) if t else leaf for leaf, t in zip(leaves, arg_traced)
      ]
      values_in = jax.tree_util.tree_unflatten(
          self.state_treedef,
          [next(values) if t else leaf
           for leaf, t in zip(state_leaves, state_traced)],
      )
      # (2) Inside: merge the traced leaves into copies.
      if self.graph:
        with graphlib.merge_context(_UPDATE_TAG, inner=True) as merge:
          copies = merge.unflatten(graphdef, list(values_in))
      else:
        copies = graphlib.unflatten(graphdef, list(values_in))
      for i, node_copy in zip(self.node_pos, copies):
        call_leaves[i] = node_copy
      node, call_args, call_kwargs = jax.tree_util.tree_unflatten(
          self.treedef, call_leaves
      )
      if self.paths:
        out = _call_in_frame(
            self.call, node, call_args, call_kwargs, bool(self.node_pos)
        )
      else:
        out = self.call(node, *call_args, **call_kwargs)
      origins[:] = module_paths.release(started, input_values)
      # (3) After f: flatten the copies again and return what changed.
      return _after_call(out, copies, self.graph, graphdef, values_in, outcome)

    def collecting_f(*input_values):
      with staged_sows.collecting(collect) as taking:
        outputs = flat_f(*input_values)
        outcome.harvested = taking.finish()
        return outputs + taking.leaves()

    with primitive.harvesting(True), module_paths.started(started):
      closed = _trace_flat(flat_f if collect is None else collecting_f,
                           self.inputs)
    # Sows deferred inside the call (on copies that transforms made of its
    # copies) are named from its frames, now that the program is whole.
    if started:
      with module_paths.finishing(started):
        closed = deferred.rename_jaxpr(closed, origins)
    return closed, outcome

  def stage(self, collect: tp.Any = None) -> StagedCall:
    """Steps (2) and (3), with step (4) ready for the evaluated outputs."""
    closed, outcome = self.trace(collect)
    return StagedCall(
        jaxpr=closed,
        inputs=self.inputs,
        harvested=outcome.harvested,
        _finish=functools.partial(self.finish, outcome),
    )

  def finish(self, outcome: _Outcome, out_flat: tp.Sequence[tp.Any]) -> tp.Any:
    """Step (4): writes back into this call's objects, returns the result."""
    out_flat = list(out_flat)
    results = iter(out_flat[: outcome.num_out_leaves])
    state_out = iter(out_flat[outcome.num_out_leaves :])
    originals = (
        graphlib.current_update_context(_UPDATE_TAG).outer_index_outer_ref
        if self.graph else None
    )
    new_nodes = []
    if outcome.graph_graphdef is not None:
      assert outcome.graph_state is not None
      with graphlib.merge_context(_UPDATE_TAG, inner=False) as merge:
        _, new_nodes = merge.unflatten(
            outcome.graph_graphdef, outcome.graph_state.unpack(state_out)
        )
    else:
      write_back.write_back(
          self.nodes,
          self.flat_state,
          [(i, packed.unpack(state_out)) for i, packed in outcome.updates],
      )
      if outcome.new_graphdef is not None:
        assert outcome.new_state is not None
        new_nodes = graphlib.unflatten(
            outcome.new_graphdef, outcome.new_state.unpack(state_out)
        )
    out_leaves = []
    for kind, value in outcome.out_kinds:
      if kind == 'out':
        out_leaves.append(next(results))
      elif kind == 'original':
        assert originals is not None  # only in graph mode
        out_leaves.append(originals[value])
      elif kind == 'new':
        out_leaves.append(new_nodes[value])
      else:
        out_leaves.append(value)
    return jax.tree_util.tree_unflatten(outcome.out_treedef, out_leaves)


def call_directly(f: tp.Callable[..., tp.Any], args, kwargs) -> tp.Any:
  """``f(*args, **kwargs)`` on the caller's own objects, in a functional
  frame that names their modules' ``Module.sow`` sites by path.

  For an eager interpretation, which needs no copies: its values are
  concrete, and ``f`` updates the graph nodes in place as a direct call
  does.
  """
  node, call = _split_callable(f)
  return _call_in_frame(call, node, args, kwargs, True)


def _call_in_frame(call, node, args, kwargs, has_nodes: bool):
  """``call(node, *args, **kwargs)`` in a functional frame that names the
  modules of its arguments by path (see :mod:`.module_paths`).

  The frame is there even without graph node arguments: a ``Module.sow`` on
  a module the function closes over then raises rather than writing an
  attribute.
  """
  found = module_paths.roots(node, args, kwargs) if has_nodes else []
  return taps.run_in_frame(
      module_paths.Frame(), found, lambda: call(node, *args, **kwargs))


def _references(nodes: list[tp.Any], copy_index: graphlib.RefMap) -> bool:
  """Whether the graph of ``nodes`` reaches one of the input copies."""
  for _, value in graphlib.iter_graph(nodes, graph=True):
    if graphlib.is_graph_node(value) and value in copy_index:
      return True
  return False


def _after_call(out, copies, graph, graphdef, values_in, outcome):
  """Step (3): the jaxpr outputs, recording in ``outcome`` how to use them."""
  # In graph mode, the copies by the index of their originals (step (2)
  # recorded it); in tree mode, graph nodes have no identity to keep.
  copy_index = (
      graphlib.current_update_context(_UPDATE_TAG).inner_ref_outer_index
      if graph else None
  ) or graphlib.RefMap()
  out_leaves, outcome.out_treedef = jax.tree_util.tree_flatten(
      out, is_leaf=graphlib.is_graph_node
  )
  result = []
  new_nodes = []
  outcome.out_kinds = []
  for leaf in out_leaves:
    if graphlib.is_graph_node(leaf):
      if leaf in copy_index:
        outcome.out_kinds.append(('original', copy_index[leaf]))
      else:
        outcome.out_kinds.append(('new', len(new_nodes)))
        new_nodes.append(leaf)
    elif variablelib.is_array_ref(leaf):
      raise ValueError(
          'capture: the function returned a mutable array reference;'
          ' references cannot leave a traced function.'
      )
    elif primitive.is_array(leaf):
      outcome.out_kinds.append(('out', None))
      result.append(leaf)
    else:
      outcome.out_kinds.append(('static', leaf))
  outcome.num_out_leaves = len(result)

  state_out: list[tp.Any] = []
  # Step (3) of the update context: it forgets the copies when it ends.
  with (
      graphlib.split_context(_UPDATE_TAG) if graph
      else contextlib.nullcontext()
  ) as split:
    final_graphdef, final_values = _flatten_values(copies, graph)
    if not graph:
      _check_tree_mode(copies, new_nodes, graphdef, final_graphdef)
    if final_graphdef == graphdef and not (
        graph and _references(new_nodes, copy_index)
    ):
      for i, (before, after) in enumerate(zip(values_in, final_values)):
        if after is not before:
          outcome.updates.append((i, _pack(after, state_out)))
      if new_nodes:
        outcome.new_graphdef, new_values = _flatten_values(new_nodes, graph)
        outcome.new_state = _pack(new_values, state_out)
    else:
      # As nnx.jit's graph updates: flatten the copies and the new nodes
      # against the input indexes, to be merged into the originals. Graph
      # mode only: in tree mode a changed structure was refused above.
      assert split is not None
      outcome.graph_graphdef, graph_values = split.flatten(
          [copies, new_nodes], with_paths=False
      )
      outcome.graph_state = _pack(graph_values, state_out)
  return result + state_out


def _flatten_values(nodes, graph: bool):
  """``nodes``' graph definition and the values of their leaves."""
  graphdef, leaves = graphlib.flatten(nodes, with_paths=False, graph=graph)
  # Tree mode keeps the Variables themselves as leaves.
  return graphdef, [_raw_value(leaf) for leaf in leaves]


def _check_tree_mode(copies, new_nodes, graphdef, final_graphdef) -> None:
  """Refuses in tree mode what ``nnx.jit`` cannot write back there either."""
  try:
    graphlib.flatten([copies, new_nodes], with_paths=False, graph=False)
  except ValueError as e:  # a Variable both in the input and the output
    raise ValueError(
        'capture: the function returned a graph node or Variable of its'
        ' arguments, which tree mode (nnx_graph_mode=False) cannot tell'
        f' from a copy, as in nnx.jit. {e}'
    ) from None
  if final_graphdef != graphdef:
    raise ValueError(
        'capture: the function changed the structure of its graph-node'
        ' arguments (added, removed or replaced an attribute, or a'
        ' submodule), which tree mode (nnx_graph_mode=False) cannot write'
        ' back. Make the change outside the captured function, or capture'
        ' in graph mode: `with nnx.set_graph_mode(True): ...`.'
    )
