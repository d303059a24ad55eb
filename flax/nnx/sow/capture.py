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
"""``capture``: trace a function to a jaxpr and harvest its sows by name."""

from __future__ import annotations

import functools
import threading
import typing as tp
import weakref

import jax

from flax.nnx.sow import interpreter
from flax.nnx.sow import primitive
from flax.nnx.sow import tracing
from flax.nnx.sow.selection import NameFilter, Selection

P = tp.ParamSpec('P')
R = tp.TypeVar('R')


class Collected(dict):
  """What ``capture`` returns: ``{name: (value, ...)}`` in first-sow order.

  A plain ``dict`` subclass, registered as a pytree that keeps insertion
  order: JAX sorts the keys of a plain ``dict``, which fails for a mix of
  ``str`` and tuple names and would reorder them.
  """


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
) -> tp.Callable[P, tuple[R, Collected]]:
  """Returns a function that calls ``f`` and also returns what it sowed.

  ``capture(f)(*args, **kwargs)`` returns ``(out, collected)``: ``out`` is what
  ``f(*args, **kwargs)`` returns, and ``collected`` maps each sown name to a
  tuple with one entry per executed sow, in call order. A sow inside
  ``lax.scan`` gives one entry whose leaves are stacked along the scan axis.

  Selected sows are consumed; the others stay in the program, so an enclosing
  ``capture`` sees them. Array arguments are traced; every other argument
  reaches ``f`` unchanged, as in a direct call.

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
    names: only capture these names: ``None`` (all), a name, a collection of
      names (a tuple here is a collection; to select a tuple name, put it in
      a collection), or a predicate on names.

  Returns:
    A function with ``f``'s signature returning ``(out, collected)``.
  """
  if not callable(f):
    raise TypeError(
        f'capture: expected a callable, got {f!r} of type {type(f).__name__}.'
    )
  selection = Selection.make(tag=tag, names=names, where='capture')
  compiled = _compiled_runners(f, selection) if _is_jit(f) else None

  @functools.wraps(f)
  def captured(*args, **kwargs):
    if compiled is not None:
      result = compiled(args, kwargs)
      if result is not None:
        return result
    return _call(f, selection, args, kwargs)

  return captured


sown = capture


_JIT_FUNCTION = type(jax.jit(lambda: None))


def _is_jit(f: tp.Any) -> bool:
  return isinstance(f, _JIT_FUNCTION)


class _CompiledRunners:
  """``capture(jax.jit(g))`` runs as ``jax.jit(capture(jax.jit(g)))``.

  A ``jax.jit`` function already caches its trace per argument structure, so
  tracing it again on every eager call would only cost time: this keeps one
  jitted runner per call structure (tree, static arguments), dispatched by
  JAX's C++ fast path, so an eager capture costs about what ``jax.jit(g)``
  costs. Calls whose static arguments are unhashable take the general path.
  NNX graph nodes go through it as pytrees, as they go through ``jax.jit(g)``
  itself, which never writes to the caller's objects either.
  """

  _MAX_RUNNERS = 64

  def __init__(self, f, selection):
    self.f, self.selection = f, selection
    self.runners: dict[tp.Any, tp.Any] = {}
    # (tree, leaf types) -> runner, for calls whose leaves are all arrays:
    # found without looking at each leaf in Python.
    self.array_runners: dict[tp.Any, tp.Any] = {}

  def __call__(self, args, kwargs):
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    kinds = (treedef, tuple(map(type, leaves)))
    runner = self.array_runners.get(kinds)
    if runner is not None:
      return runner(leaves)
    traced = tuple(map(primitive.is_array, leaves))
    static = () if all(traced) else tuple(
        leaf for leaf, t in zip(leaves, traced) if not t
    )
    key = (treedef, traced, static)
    try:
      runner = self.runners.get(key)
    except TypeError:  # an unhashable static argument
      return None
    if runner is None:
      runner = self._make_runner(treedef, traced, static)
      if len(self.runners) >= self._MAX_RUNNERS:
        self.runners.clear()
        self.array_runners.clear()
      self.runners[key] = runner
    if not static:
      self.array_runners[kinds] = runner
    return runner(leaves if not static else [
        leaf for leaf, t in zip(leaves, traced) if t
    ])

  def _make_runner(self, treedef, traced, static):
    out_tree = []

    @jax.jit
    def run(arrays):
      values, statics = iter(arrays), iter(static)
      full = [next(values) if t else next(statics) for t in traced]
      call_args, call_kwargs = jax.tree_util.tree_unflatten(treedef, full)
      result = _call(self.f, self.selection, call_args, call_kwargs)
      # A flat list of arrays leaves jit's C++ dispatch nothing to rebuild;
      # the (out, collected) structure is rebuilt once, below.
      flat, tree = jax.tree_util.tree_flatten(result)
      out_tree[:] = [tree]
      return flat

    def runner(arrays):
      flat = run(arrays)
      return jax.tree_util.tree_unflatten(out_tree[0], flat)

    return runner


# Per jitted function (weakly held) and selection, so that the common inline
# use `capture(f)(x)` in a loop reuses the runners of earlier calls.
_RUNNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_RUNNERS_LOCK = threading.Lock()


def _compiled_runners(f, selection) -> _CompiledRunners:
  with _RUNNERS_LOCK:
    per_selection = _RUNNERS.setdefault(f, {})
    if selection not in per_selection:
      per_selection[selection] = _CompiledRunners(f, selection)
    return per_selection[selection]


def _call(f, selection, args, kwargs):
  with tracing.staged(f, args, kwargs) as staged:
    scope = interpreter.Scope(interpreter.Request(selection))
    out_flat = interpreter.evaluate(
        staged.jaxpr.jaxpr, staged.jaxpr.consts, staged.inputs, scope
    )
    return staged.unflatten_out(out_flat), collect(scope.records)


def collect(records: tp.Iterable[interpreter.Record]) -> Collected:
  """Groups records by name into tuples of pytrees, in call order.

  An ``'append'`` record adds an entry; a ``'clobber'`` record replaces every
  entry collected so far under its name.
  """
  grouped = group(records, key=lambda site: site.name)
  return Collected((name, tuple(values)) for name, values in grouped.items())


def group(
    records: tp.Iterable[interpreter.Record],
    key: tp.Callable[[interpreter.Site], tp.Hashable],
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
