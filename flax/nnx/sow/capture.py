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
"""``capture``: run or trace a function and harvest its sows by name."""

from __future__ import annotations

import dataclasses
import functools
import threading
import typing as tp
import warnings
import weakref

import jax

from flax.nnx import variablelib
from flax.nnx.sow import render
from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import eager
from flax.nnx.sow.transform import inner_calls
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform import names as names_lib
from flax.nnx.sow.transform import staged_sows
from flax.nnx.sow.transform import steps
from flax.nnx.sow.lift import module_paths
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.lift import graph_calls
from flax.nnx.sow.lift import graph_nodes
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.selection import NameFilter, Selection
from flax.nnx.sow.transform.sites import Record
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.sites import Site

P = tp.ParamSpec('P')
R = tp.TypeVar('R')


class Collected(dict):
  """What ``capture`` returns: ``{name: (value, ...)}`` in first-sow order.

  A plain ``dict`` subclass, registered as a pytree that keeps insertion
  order: JAX sorts the keys of a plain ``dict``, which fails for a mix of
  ``str`` and tuple names and would reorder them. Its keys are the names
  themselves; an item may also be read by the name's dotted spelling (see
  :mod:`flax.nnx.sow.transform.names`), and :meth:`one` reads a name sown
  once without ``[0]``.

  Printed, it is a table with a name per line and each array summarised
  (``f32[2] mean= std= min= max=``, or only ``f32[2]`` for a traced value),
  never its elements; treescope renders it as a dict of its entries.

  Example::

    >>> import jax.numpy as jnp
    >>> from flax.nnx.sow import capture, sow
    >>> def f(x):
    ...   return sow(x + 1, name=('layers', 0, 'h'))
    >>> _, collected = capture(f)(jnp.zeros(2))
    >>> collected['layers.0.h'] is collected[('layers', 0, 'h')]
    True
    >>> collected.one('layers.0.h')
    Array([1., 1.], dtype=float32)
  """

  def __repr__(self) -> str:
    return self.text(render.terminal_width())

  def text(self, width: int | None = None) -> str:
    """The table, at most ``width`` columns wide, long names and values
    folded onto more lines (``None``: a line per row); printed, it is laid
    out at the terminal's width."""
    summary, lines = render.collected_lines(self, width)
    return '\n'.join((summary, *lines))

  def __treescope_repr__(self, path, subtree_renderer):
    # Called by treescope only, so it is installed.
    from treescope import repr_lib  # type: ignore[import-untyped]  # pylint: disable=g-import-not-at-top

    return repr_lib.render_dictionary_wrapper(
        type(self), self, path, subtree_renderer
    )

  def __getitem__(self, key):
    try:
      return super().__getitem__(key)
    except (KeyError, TypeError):
      pass
    return super().__getitem__(self._name(key))

  def __contains__(self, key):
    try:
      return super().__contains__(key) or (
          isinstance(key, str) and self._name(key) is not None
      )
    except (KeyError, TypeError):
      return False

  def get(self, key, default=None):
    return self[key] if key in self else default

  def one(self, key: tp.Any) -> tp.Any:
    """The one value sown under ``key`` (a name or its spelling); raises if
    the call sowed it another number of times."""
    entries = self[key]
    if len(entries) != 1:
      raise ValueError(
          f'Collected.one: {key!r} was sown {len(entries)} times; read an'
          f' entry with [{key!r}][i].'
      )
    return entries[0]

  def _name(self, key: tp.Any) -> primitive.Name:
    """The collected name a spelled ``key`` names (never a pattern)."""
    primitive.refuse_traced(key, where='Collected')
    if not isinstance(key, str):
      raise KeyError(key)
    spelled = names_lib.Pattern(parts=tuple(key.split('.')), text=key)
    if spelled.wild:
      raise KeyError(
          f'{key!r} is a pattern: select the names it matches with'
          f' capture(f, names={key!r}), or read one name.'
      )
    found = names_lib.resolve(spelled, self, where='Collected')
    if not found:
      close = names_lib.closest(key, self)
      raise KeyError(
          f'{key!r} is not a name nor the spelling of a name collected here'
          + (f'; closest: {", ".join(map(repr, close))}' if close else '')
          + '.'
      )
    return found[0]


jax.tree_util.register_pytree_with_keys(
    Collected,
    lambda c: (
        [(jax.tree_util.DictKey(k), v) for k, v in c.items()],
        tuple(c),
    ),
    lambda names, values: Collected(zip(names, values)),
    flatten_func=lambda c: (list(c.values()), tuple(c)),
)


def capture(
    f: tp.Callable[P, R],
    *,
    tag: tp.Hashable = None,
    names: NameFilter = None,
    max_steps: int | tp.Mapping[primitive.Name, int] | None = None,
    on_overflow: str = 'error',
    see_through: bool = False,
) -> tp.Callable[P, tuple[R, Collected]]:
  """Returns a function that calls ``f`` and also returns what it sowed.

  ``capture(f)(*args, **kwargs)`` returns ``(out, collected)``: ``out`` is what
  ``f(*args, **kwargs)`` returns, and ``collected`` maps each sown name to a
  tuple with one entry per executed sow, in call order. A sow inside
  ``lax.scan`` gives one entry whose leaves are stacked along the scan axis.
  An appending sow inside ``lax.while_loop`` (a decode loop, say), whose
  number of steps is only known at run time, needs ``max_steps``: it gives
  one :class:`~flax.nnx.sow.Steps` entry, a buffer of that many steps and
  the count of steps run, compiled once.

  Selected sows are consumed; the others stay in the program, so an enclosing
  ``capture`` sees them. A capture around one that took some of its sows (a
  library's own ``nnx.capture``, say, or a ``plant``) warns, naming it
  (:class:`~flax.nnx.sow.transform.inner_calls.TakenByInnerCall`), or, for
  a name it selects, adds that to its error; with ``see_through=True`` it
  collects them too, as the program goes on with them. ``Module.sow(T, 'h', v)`` of a module among the
  arguments is sown as ``(*path, 'h')`` with tag ``T``, ``path`` being the
  module's path (see :mod:`flax.nnx.sow.lift.module_paths` for the naming), and
  :func:`~flax.nnx.sow.tap` sows the inputs and outputs of submodule calls.

  Outside any JAX trace, the call is a direct call of ``f`` (see
  :mod:`flax.nnx.sow.transform.eager`): its Python runs on every call, it
  reads the values of its globals and closures as they are then, its values are
  concrete, and it updates its graph-node arguments in place; the sows are
  recorded as they are bound, and a ``jax.jit`` inside keeps its compiled
  program. Under a JAX trace (``jax.jit(capture(f))``, ``jax.grad``...),
  ``f`` is staged to a jaxpr, whose array arguments are traced and whose
  other arguments reach ``f`` unchanged; its graph nodes run as copies whose
  updates are written back. If ``f`` is a ``jax.jit`` function, its own
  rules decide instead, as for a direct call of ``f``: Python numbers are
  traced with weak types, its static arguments are static and its donated
  arguments donated. A name predicate is asked about each name once per
  call: eagerly, as the call meets it; staged, about the names of the whole
  program.

  Example::

    >>> import jax, jax.numpy as jnp
    >>> from flax.nnx.sow import capture, sow
    >>> def f(x):
    ...   h = sow(jnp.tanh(x), name='h')
    ...   sow(jnp.sum(h), name='loss', tag='metrics')
    ...   return 2 * h
    >>> out, collected = capture(f)(jnp.ones(2))
    >>> sorted(collected)
    ['h', 'loss']
    >>> _, metrics = capture(f, tag='metrics')(jnp.ones(2))
    >>> list(metrics)
    ['loss']
    >>> out, collected = jax.jit(capture(f))(jnp.ones(2))
    >>> collected['h'][0].shape
    (2,)

  Args:
    f: the function to run.
    tag: only capture sows with this tag; ``None`` captures every tag.
    names: only capture these names: ``None`` (all), a name or pattern, a
      collection of names and patterns (a tuple here is a collection; to
      select a tuple name, put it in a collection), or a predicate on
      names. A name may be given by its dotted spelling
      (``'layers.1.mlp.__call__.output'``) and a pattern has ``'*'`` (one
      component) or ``'**'`` (any number): see
      :mod:`flax.nnx.sow.transform.names`. A name, pattern or tag that
      selects no sow of the call is an error naming the closest names it
      sows. A predicate is a filter, asked about the names the call sows, on
      each call (selecting none of them is not an error); compiled programs
      are kept per set of names selected: a new ``lambda`` selecting the
      same names compiles nothing.
    max_steps: how many steps of a ``while_loop`` each of its appending sows
      keeps: an int for every name, or ``{name: int}`` (each name must be
      sown so). ``None``: such a sow is an error.
    on_overflow: what a loop that runs more steps than ``max_steps`` does:
      ``'error'`` raises a ``ValueError`` naming the site (eagerly at once;
      under ``jit`` when the program runs, from a host callback after each
      such loop, which costs a host round trip per call, and a dispatch
      from Python: see :mod:`~flax.nnx.sow.transform.runtime_checks`),
      ``'truncate'`` keeps the first steps, and
      :attr:`~flax.nnx.sow.Steps.count` says how many ran (no callback).
    see_through: also collect the sows that a ``capture``, ``plant`` or
      ``nnx.capture`` inside ``f`` takes (they still get them): each sow
      bound while this capture runs is followed by a copy that only this
      capture selects, holding the value the program goes on with (after
      an inner plant). Under ``jit``, a trace made with and one without
      are kept apart.

  Returns:
    A function with ``f``'s signature returning ``(out, collected)``.
  """
  if not callable(f):
    raise TypeError(
        f'capture: expected a callable, got {f!r} of type {type(f).__name__}.'
    )
  selection = Selection.make(tag=tag, names=names, where='capture')
  bounds = steps.LoopBounds.make(max_steps, on_overflow, where='capture')
  compiled = _compiled_runners(f) if _is_jit(f) else None

  if not isinstance(see_through, bool):
    raise TypeError(
        f'capture: see_through must be True or False, got {see_through!r}.')

  description = inner_calls.describe('capture', f)

  def run(selection, args, kwargs):
    # A selection by predicate is not asked again about what an inner call
    # took (it is asked once per name and call): only reported.
    matches = (None if selection.through or selection.by_predicate
               else selection.matches)
    call = inner_calls.Call(description, matches)
    # Pushed by hand rather than through a context manager: this runs on
    # every eager call, whose fixed cost is measured (benchmarks item 9).
    stack = inner_calls.CALLS.stack
    stack.append(call)
    try:
      if compiled is not None:
        out, collected = compiled(selection, bounds, args, kwargs)
      else:
        out, collected = _call(f, selection, bounds, args, kwargs)
    except ValueError as e:
      new = inner_calls.explained(e, call, 'capture')
      if new is None:
        raise
      raise new from None
    finally:
      popped = stack.pop()
      assert popped is call, (popped, call)
    if call.taken:
      missed = inner_calls.missed(call, collected)
      if missed:
        warnings.warn(inner_calls.explain(missed, 'capture'),
                      inner_calls.TakenByInnerCall, stacklevel=3)
    return out, collected

  @functools.wraps(f)
  def captured(*args, **kwargs):
    if not see_through:
      return run(selection, args, kwargs)
    # One level more than the see-through captures running around this one:
    # each sow bound inside is copied for it (see `primitive.bind`).
    level = primitive.seeing_through.value + 1
    with primitive.seeing_through(level):
      return run(dataclasses.replace(selection, through=level), args, kwargs)

  return captured




_JIT_FUNCTION = type(jax.jit(lambda: None))


def _is_jit(f: tp.Any) -> bool:
  return isinstance(f, _JIT_FUNCTION)


class _CompiledRunners:
  """``capture(jax.jit(g))`` runs as ``jax.jit(capture(g))``, with ``g``'s
  jit options.

  A jitted function is traced once per call signature, so tracing it again
  on every eager call would only cost time: the call runs as one jitted
  runner per selection, made with the options of ``jax.jit(g)`` (static and
  donated arguments, ``keep_unused``, compiler options). JAX's dispatch then
  decides what is traced and what is static exactly as for ``jax.jit(g)``: a
  Python scalar is traced with a weak type, a static argument keys a
  compilation, a donated argument is donated. The runner returns ``(out,
  collected)`` itself, so their structure is kept per call signature by JAX,
  never shared between signatures or threads.

  The runner captures ``g`` itself, as ``jax.jit(capture(g))`` would, and
  hands it the static arguments as given. NNX graph nodes among the other
  arguments reach ``g`` as copies whose updates are written back, so Hijax
  Variables are updated as ``jax.jit(g)`` updates them (``jax.jit(g)``
  inside the capture would receive ordinary copies, whose updates a jit
  drops); ``g`` itself is closed over, as ``jax.jit`` closes over it, even
  if it is a Module. The runners of a jitted function with shardings are
  jitted with them (``out_shardings`` apply to ``out``). One with layouts is
  captured as it is, with its layouts, and refuses Hijax Variables among its
  arguments: their copies would reach it as ordinary Variables, whose
  updates ``jax.jit`` drops.

  A name predicate is resolved on each call to the names ``g`` sows for that
  call (read from the trace of ``jax.jit(g)``, which JAX caches), so that
  predicates selecting the same names share a runner. At most
  ``_MAX_RUNNERS`` selections keep a runner, the oldest going first; each
  runner keeps its compilations as ``jax.jit`` does.
  """

  _MAX_RUNNERS = 8

  def __init__(self, f, info):
    # Weakly: the table of runners is keyed weakly by `f`, so an entry that
    # held `f` would keep it alive forever.
    self.f = weakref.ref(f)
    self.target = _target(f, info)
    self.name = getattr(f, '__name__', 'captured')
    self.signature = info.fun_signature
    self.options = dict(
        static_argnums=info.static_argnums,
        static_argnames=info.static_argnames,
        donate_argnums=info.donate_argnums,
        donate_argnames=info.donate_argnames,
        keep_unused=info.keep_unused,
        compiler_options=dict(info.compiler_options_kvs) or None,
        **_placement(info),
    )
    # By selection, loop bounds and what Module.sow is (see `__call__`).
    self.runners: dict[tuple[Selection, steps.LoopBounds, tp.Any],
                       tp.Callable[..., tp.Any]] = {}
    self.lock = threading.Lock()

  def __call__(self, selection: Selection, bounds: steps.LoopBounds, args,
               kwargs):
    selection = selection.resolve(lambda: self._sow_keys(args, kwargs))
    # A runner is a `jax.jit`, whose traces JAX keeps by its arguments only:
    # one traced under Flax's own Module.sow (before the overlay's
    # `install`) would not see the modules' sows.
    key = (selection, bounds, module_paths.sow_methods())
    runner = self.runners.get(key)
    if runner is None:
      runner = self._add(key)
    return runner(*args, **kwargs)

  def _sow_keys(self, args, kwargs):
    """The (name, tag) of the sows of this call of the jitted function."""
    f = self.f()
    assert f is not None  # the caller holds it
    if not graph_nodes.holds_graph_nodes((args, kwargs)):
      # No module to name by path: the jitted function's own trace, which
      # JAX caches, is the program the capture runs.
      with primitive.harvesting(True):  # as a capture traces it
        return primitive.sow_keys(f.trace(*args, **kwargs).jaxpr.jaxpr)
    # Staged as a capture stages it (graph nodes copied, module copies
    # marked with their paths), so that Module.sow sites are sows here too.
    with graph_calls.updating():
      jaxpr, _ = graph_calls.Prepared(f, args, kwargs).trace()
    return primitive.sow_keys(jaxpr.jaxpr)

  def _add(self, key: tuple[Selection, steps.LoopBounds, tp.Any]):
    with self.lock:
      runner = self.runners.get(key)
      if runner is None:
        if len(self.runners) >= self._MAX_RUNNERS:
          del self.runners[next(iter(self.runners))]
        runner = self.runners[key] = self._make_runner(key[0], key[1])
      return runner

  def _make_runner(self, selection: Selection, bounds: steps.LoopBounds):
    target = self.target
    argnums = self.options['static_argnums']
    argnames = self.options['static_argnames']
    jitted_itself = isinstance(target, weakref.ref)
    name = self.name

    def run(*args, **kwargs):
      if jitted_itself:
        _refuse_hijax_arguments(name, args, kwargs)
      fun, args, kwargs = _bind_static(
          target(), args, kwargs, argnums, argnames
      )
      return _call(fun, selection, bounds, args, kwargs)

    run.__name__ = run.__qualname__ = self.name
    if self.signature is not None:
      run.__signature__ = self.signature  # names arguments in JAX's messages
    return jax.jit(run, **self.options)


def _has_layouts(info) -> bool:
  return any(layout is not None for layout in info.in_layouts_leaves) or any(
      layout is not None for layout in info.out_layouts_leaves
  )


def _placement(info) -> dict[str, tp.Any]:
  """The shardings of the jitted function ``info`` describes, for a runner.

  The runner takes ``f``'s arguments, so ``f``'s ``in_shardings`` apply to
  it as they are; it returns ``(out, collected)``, so ``f``'s
  ``out_shardings`` apply to ``out`` and the sown values are left to XLA,
  as under ``jax.jit(capture(f), ...)``. Layouts are not rebuilt: a function
  with layouts is captured as it is (see ``_target``).
  """
  if _has_layouts(info):
    return {}
  placement = {}
  if info.user_specified_in_shardings:
    placement['in_shardings'] = info.in_shardings_treedef.unflatten(
        info.in_shardings_leaves
    )
  unspecified = type(_jax.UNSPECIFIED)
  if any(type(s) is not unspecified for s in info.out_shardings_leaves):
    placement['out_shardings'] = (
        info.out_shardings_treedef.unflatten(info.out_shardings_leaves),
        _jax.UNSPECIFIED,
    )
  return placement


def _target(f, info) -> tp.Callable[[], tp.Any]:
  """What a runner of the jitted ``f`` captures: ``f``'s own function, or
  ``f`` (held weakly) if it has layouts, which a runner cannot take."""
  fun = getattr(f, '__wrapped__', None)
  if _has_layouts(info) or fun is None:
    return weakref.ref(f)

  def call(*args, **kwargs):
    # A plain function, as `jax.jit` sees `fun`: a Module or a bound method
    # of one is closed over, not staged as an input graph node.
    return fun(*args, **kwargs)

  return lambda: call


def _refuse_hijax_arguments(name: str, args, kwargs) -> None:
  """Raises if a Hijax Variable reaches a jitted function captured as is.

  The jitted function receives copies of the graph nodes with ordinary
  Variables (see ``lift.graph_calls``), and ``jax.jit`` drops their updates:
  rather than lose them silently, refuse.
  """
  hijax = [
      leaf
      for leaf in jax.tree_util.tree_leaves(
          (args, kwargs),
          is_leaf=lambda x: isinstance(x, variablelib.HijaxVariable),
      )
      if isinstance(leaf, variablelib.HijaxVariable)
  ]
  if hijax:
    raise NotImplementedError(
        f'capture: the jitted function {name!r} has layouts, so it is'
        ' captured as it is, and updates of the'
        f' {len(hijax)} Hijax Variable(s) among its arguments would not be'
        ' written back. Use jax.jit(capture(f), ...) with the layouts'
        ' instead.'
    )


def _bind_static(fun, args, kwargs, argnums, argnames):
  """``fun`` with its static arguments bound, and the other arguments.

  ``jax.jit`` hands static arguments over as they are; bound, they reach
  ``fun`` so, instead of being staged as arguments (a static NumPy scalar
  would be traced).
  """
  if not argnums and not argnames:
    return fun, args, kwargs
  static_at = {i % len(args) for i in argnums if -len(args) <= i < len(args)}
  static_args = {i: args[i] for i in static_at}
  static_kwargs = {k: v for k, v in kwargs.items() if k in argnames}

  def bound(*dynamic_args, **dynamic_kwargs):
    values = iter(dynamic_args)
    full = [
        static_args[i] if i in static_at else next(values)
        for i in range(len(args))
    ]
    return fun(*full, **dynamic_kwargs, **static_kwargs)

  dynamic_args = [a for i, a in enumerate(args) if i not in static_at]
  dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in argnames}
  return bound, dynamic_args, dynamic_kwargs


# Per jitted function, held weakly, so that the common inline use
# `capture(f)(x)` in a loop reuses the runners of earlier calls; an entry
# goes with its function.
_RUNNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_RUNNERS_LOCK = threading.Lock()


def _compiled_runners(f) -> _CompiledRunners | None:
  """The runners of the jitted function ``f``; ``None`` if it has none."""
  info = _jax.jit_info(f)
  if info.backend is not None or info.device is not None:
    return None  # deprecated options a runner cannot take: the general path
  with _RUNNERS_LOCK:
    runners = _RUNNERS.get(f)
    if runners is None:
      runners = _RUNNERS[f] = _CompiledRunners(f, info)
    return runners


def _call(f, selection, bounds, args, kwargs):
  if eager.can_run():
    return _call_eagerly(f, selection, bounds, args, kwargs)
  return _call_staged(f, selection, bounds, args, kwargs)


def _call_eagerly(f, selection, bounds, args, kwargs):
  """A direct call of ``f`` whose sows are recorded as they run (see
  :mod:`.eager`): its Python runs, its graph nodes are updated in place."""
  scope = Scope(Request(selection, bounds=bounds))
  out = eager.run(scope, lambda: graph_calls.call_directly(f, args, kwargs))
  _took(scope.records)
  check_selected(selection, scope.records, scope.passed_keys)
  return out, collect(scope.records, bounds)


def _call_staged(f, selection, bounds, args, kwargs):
  """``f`` staged to a jaxpr, which is interpreted under the current trace
  (a ``jit`` around the capture, say): the trace is made once per call."""
  out, records, _ = staged_records(f, selection, bounds, args, kwargs)
  _took(records)
  return out, collect(records, bounds)


def _took(records: tp.Sequence[Record]) -> None:
  """Tells the captures around this one which of their sows it took."""
  if len(inner_calls.CALLS.stack) > 1:
    inner_calls.took(inner_calls.CALLS.stack[-1],
                     [(site.name, site.tag) for site, _ in records])


def staged_records(
    f, selection: Selection, bounds: steps.LoopBounds, args, kwargs, *,
    keep_equations: bool = False,
) -> tuple[tp.Any, list[Record], tp.Any]:
  """``f``'s result, the records of its selected sows and its closed jaxpr.

  With ``keep_equations``, every sow stays an equation of the jaxpr, which
  says where each was sown (``discover`` reads it); otherwise the sows
  staged into the capture's own trace may be taken as they are staged.
  """
  request = Request(selection, bounds=bounds)
  # The sows staged into the capture's own trace are taken as they are
  # staged (see `staged_sows`), unless names are chosen by a predicate, which
  # is asked about the names of the whole program.
  eligible = not keep_equations and staged_sows.eligible(request)
  collecting = request if eligible else None
  with graph_calls.staged(f, args, kwargs, collecting) as staged:
    selection = selection.resolve(
        lambda: primitive.sow_keys(staged.jaxpr.jaxpr)
    )
    scope = Scope(Request(selection, bounds=bounds))
    out_flat = interpreter.evaluate(
        staged.jaxpr.jaxpr, staged.jaxpr.consts, staged.inputs, scope,
        staged.harvested,
    )
    check_selected(
        selection, scope.records,
        lambda: primitive.sow_keys(staged.jaxpr.jaxpr),
    )
    return staged.unflatten_out(out_flat), scope.records, staged.jaxpr


def check_selected(
    selection: Selection,
    records: tp.Sequence[Record],
    sown: tp.Callable[[], tp.Iterable[tuple[primitive.Name, tp.Hashable]]],
) -> None:
  """Raises if a name, pattern or tag of ``selection`` selected no sow.

  A selection that matches nothing is a typo far more often than a wish for
  an empty result, so it is an error naming the closest names the call does
  sow (``sown()``: the (name, tag) of its other sows, asked only then).
  """
  if selection.everything:
    return  # on every call: nothing to check
  missing = selection.unmatched({site.name for site, _ in records})
  if missing == []:
    return
  keys = set(sown()) | {(site.name, site.tag) for site, _ in records}
  all_names = sorted({name for name, _ in keys}, key=names_lib.spell)
  given = selection.given
  if missing is None:  # nothing selected at all
    asked = []
    if given is not None:
      asked.append(f'names={given!r}')
    if selection.tag is not None:
      asked.append(f'tag={selection.tag!r}')
    lines = [f'capture({", ".join(asked)}) selected no sow of this call.']
    missing = sorted(
        tp.cast(frozenset, selection.names or frozenset()), key=repr
    ) + list(selection.patterns)
  else:
    with_tag = '' if selection.tag is None else f' with tag={selection.tag!r}'
    lines = [
        f'capture: {", ".join(map(repr, missing))} selected no sow{with_tag}'
        ' of this call.'
    ]
  if isinstance(given, tuple) and _names_something(given, all_names):
    lines.append(
        f'A tuple of names is a collection of {len(given)} names; to select'
        f' the tuple name or pattern {given!r}, put it in a list:'
        f' names=[{given!r}].'
    )
  if not all_names:
    lines.append('The call sows nothing.')
  else:
    close = []
    for k in missing:
      if not any(names_lib.matches(k, name) for name in all_names):
        close.extend(names_lib.closest(k, all_names))
    if close:
      lines.append(
          'Closest names it sows: '
          + ', '.join(map(repr, dict.fromkeys(close))) + '.'
      )
    shown = ', '.join(map(repr, all_names[:_NAMES_SHOWN]))
    more = len(all_names) - _NAMES_SHOWN
    lines.append(
        f'It sows {len(all_names)} name(s): {shown}'
        + (f' and {more} more' if more > 0 else '') + '.'
    )
    if selection.tag is not None:
      tags = sorted({repr(tag) for _, tag in keys})
      lines.append(f'Its tags: {", ".join(tags)}.')
      for k in missing:
        other = sorted({
            repr(tag) for name, tag in keys if names_lib.matches(k, name)})
        if other:
          lines.append(f'{k!r} is sown with tag {", ".join(other)}.')
  raise ValueError(' '.join(lines))


def _names_something(given: tuple, all_names: list[primitive.Name]) -> bool:
  try:
    k = names_lib.key(given)
  except (TypeError, ValueError):
    return False
  return any(names_lib.matches(k, name) for name in all_names)


# How many of a call's names an error message lists.
_NAMES_SHOWN = 20


def collect(records: tp.Sequence[Record],
            bounds: steps.LoopBounds | None = None) -> Collected:
  """Groups records by name into tuples of pytrees, in call order.

  An ``'append'`` record adds an entry; a ``'clobber'`` record replaces every
  entry collected so far under its name. Each name ``bounds`` gives a bound
  must have a record of a ``while_loop`` (a ``Steps``).
  """
  if bounds is not None and bounds.by_name:
    bounds.check_used(
        {site.name for site, _ in records if steps.holds_steps(site.tree)},
        where='capture',
    )
  grouped = group(records, key=lambda site: site.name)
  return Collected((name, tuple(values)) for name, values in grouped.items())


def group(
    records: tp.Iterable[Record],
    key: tp.Callable[[Site], tp.Hashable],
) -> dict[tp.Hashable, list[tp.Any]]:
  """The values of ``records`` as pytrees, by ``key(site)``, in call order.

  An ``'append'`` record adds an entry; a ``'clobber'`` record replaces every
  entry grouped so far under its key.
  """
  grouped: dict[tp.Hashable, list[tp.Any]] = {}
  for site, leaves in records:
    value = jax.tree_util.tree_unflatten(site.tree, leaves)
    if site.mode == 'clobber':
      grouped[key(site)] = [value]
    else:
      grouped.setdefault(key(site), []).append(value)
  return grouped
