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
"""``plant``: run a function with chosen values injected at its sow sites."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing as tp

from flax.nnx.sow.transform import eager
from flax.nnx.sow.transform import inner_calls
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform import names as names_lib
from flax.nnx.sow.transform import planting
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.lift import graph_calls
from flax.nnx.sow.lift import graph_nodes
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.selection import Selection
from flax.nnx.sow.transform.request import Request

Values = tp.Mapping[
    primitive.Name, tp.Union[tp.Sequence[tp.Any], planting.Fn]
]
P = tp.ParamSpec('P')
R = tp.TypeVar('R')


def plant(
    f: tp.Callable[P, R],
    values: Values,
    *,
    tag: tp.Hashable = None,
) -> tp.Callable[P, R]:
  """Returns ``f`` with the sows named in ``values`` returning those values.

  ``values`` has the shape ``capture`` returns: ``values[name]`` is a tuple
  with one entry per execution of a sow named ``name``, in call order; a sow
  inside ``lax.scan`` takes one entry stacked along the scan axis and is
  planted per iteration. So ``plant(f, capture(f)(x)[1])(x)`` equals
  ``f(x)``, and ``jax.grad`` with respect to ``values`` gives gradients of
  intermediates. Planted sows are consumed; other sows stay in the program.

  An entry may instead be a function ``fn(value, index)`` returning the value
  to plant (same structure, shapes and dtypes as ``value``): an intervention
  that transforms what the sow computes. ``index`` counts the executions of
  that name in the order they run: a Python int at the top level of ``f``, a
  traced int32 inside a ``lax.scan``, ``fori_loop`` or ``while_loop`` (the
  executions before the loop plus those of earlier iterations) and inside a
  ``jit``, ``cond`` or ``checkpoint`` in ``f``. ``fn`` may close over traced
  values (``jit`` arguments, a ``vmap``-ed selector, ``grad`` inputs), so a
  sweep over layers is one compiled program; a loop takes them as
  invariants. ``fn`` sees the value as the sow in ``f`` sees it: for a sow
  under a ``jax.vmap`` in ``f``, one example at a time.

  A key may also be a name's dotted spelling (``'layers.1.h'``) or a
  pattern (``'layers.*.h'``, ``('layers', '*', 'h')``; see
  :mod:`flax.nnx.sow.transform.names`). A spelling names one sow and takes
  what its name takes. A pattern with wildcards takes one function for
  every sow it selects, called as ``fn(value, index, name)`` with the
  static name it plants at, so a layer index ``name[1]`` can be compared
  with a traced selector; ``index`` counts the executions of that name. A
  pattern that selects no sow of the call, or a name two keys select, is an
  error.

  Outside any JAX trace, a plant whose keys are names is a direct call of
  ``f``, as ``capture`` is: its Python runs on every call with concrete
  values (``float(h)`` works where it works in ``f``). A planted sow whose
  result the program never uses is an error, as when staged; eagerly it is
  raised after the call, if no JAX operation took the planted value and the
  call neither returned it nor left it in a Variable of its graph nodes (a
  value read only by NumPy or ``float`` counts as unused). A pattern key
  selects the names the call sows as it meets them (a pattern that
  selected none is an error after the call).

  Example::

    >>> import jax, jax.numpy as jnp
    >>> from flax.nnx.sow import capture, plant, sow
    >>> def f(x):
    ...   h = sow(x * 2, name='h')
    ...   return h + 1
    >>> plant(f, {'h': (jnp.zeros(2),)})(jnp.ones(2))
    Array([1., 1.], dtype=float32)
    >>> out, collected = capture(f)(jnp.ones(2))
    >>> bool((plant(f, collected)(jnp.ones(2)) == out).all())
    True
    >>> def layers(x):
    ...   for _ in range(3):
    ...     x = sow(x + 1, name='h')
    ...   return x
    >>> ablate = lambda layer: lambda value, index: jnp.where(
    ...     index == layer, 0.0, value)
    >>> # One compiled program for every layer: the second one is zeroed.
    >>> jax.jit(lambda l: plant(layers, {'h': ablate(l)})(jnp.ones(2)))(1)
    Array([1., 1.], dtype=float32)
    >>> def named_layers(x):
    ...   for i in range(3):
    ...     x = sow(x + 1, name=('layers', i, 'h'))
    ...   return x
    >>> zero = lambda layer: lambda value, index, name: jnp.where(
    ...     name[1] == layer, 0.0, value)
    >>> # Every layer's ablation in one batched program.
    >>> jax.vmap(lambda l: plant(named_layers, {'layers.*.h': zero(l)})(
    ...     jnp.ones(1)))(jnp.arange(3))
    Array([[2.],
           [1.],
           [0.]], dtype=float32)

  Args:
    f: the function to run.
    values: ``{name: (value, ...)}``, one value per sow of that name, or
      ``{name: fn}``, or ``{pattern: fn}``; the kinds may be mixed.
    tag: only plant into sows with this tag; ``None`` plants into any.

  Returns:
    A function with ``f``'s signature returning what ``f`` returns.
  """
  if not callable(f):
    raise TypeError(
        f'plant: expected a callable, got {f!r} of type {type(f).__name__}.'
    )
  keyed = _check_values(values)
  selection = Selection.make(tag=tag, names=None, where='plant')
  by_pattern = any(isinstance(k, names_lib.Pattern) for k in keyed)
  fixed = None if by_pattern else _request(
      selection, tp.cast(dict[primitive.Name, tp.Any], keyed))

  description = inner_calls.describe('plant', f)

  def matches(params) -> bool:
    if tag is not None and params['tag'] != tag:
      return False
    return any(names_lib.matches(key, params['sow_name']) for key in keyed)

  @functools.wraps(f)
  def planted(*args, **kwargs):
    with inner_calls.running(description, matches) as call:
      try:
        return run(call, args, kwargs)
      except ValueError as e:
        new = inner_calls.explained(e, call, 'plant')
        if new is None:
          raise
        raise new from None

  def run(call, args, kwargs):
    with primitive.planting(True):
      return run_planting(call, args, kwargs)

  def run_planting(call, args, kwargs):
    if eager.can_run() and eager.can_track_reads():
      if fixed is not None:
        return _plant_eagerly(f, fixed, keyed, tag, args, kwargs, call)
      patterns = _EagerPatterns(keyed, tag)
      out = _plant_eagerly(
          f, _request(selection, patterns.entries), patterns.entries, tag,
          args, kwargs, call, on_names=patterns)
      patterns.check()
      return out
    with graph_calls.staged(f, args, kwargs) as staged:
      entries = tp.cast(dict[primitive.Name, tp.Any], keyed)
      if by_pattern:  # the names the patterns select in this program
        entries = _resolve(keyed, staged.jaxpr.jaxpr, tag)
      request = fixed or _request(selection, entries)
      # Per call: what it transforms holds the tracers the functions close
      # over.
      fns = planting.Functions(
          {name: entries[name] for name in request.fn_names}
      )
      planter = planting.ValuesPlanter(entries, fns)
      scope = Scope(request, planter, fns)
      out_flat = interpreter.evaluate(
          staged.jaxpr.jaxpr, staged.jaxpr.consts, staged.inputs, scope
      )
      planter.check_all_used(tag, lambda: [
          name for name, _ in primitive.sow_keys(staged.jaxpr.jaxpr)])
      _took(call, planter, tag)
      return staged.unflatten_out(out_flat)

  return planted


def _took(call: inner_calls.Call, planter: planting.ValuesPlanter,
          tag: tp.Hashable) -> None:
  """Tells the captures around the plant ``call`` the names it planted
  (each key resolved: a spelling or a pattern by the names it selected)."""
  inner_calls.took(call, [(name, tag) for name in planter.values])


def _plant_eagerly(f, request: Request, entries, tag: tp.Hashable, args,
                   kwargs, call: inner_calls.Call, on_names=None):
  """A direct call of ``f`` (see :mod:`flax.nnx.sow.transform.eager`) whose
  sows named in ``entries`` return the planted values.

  As staged, a planted sow whose result nothing reads is an error: here
  once the call has run, if no operation took the value, and the call
  neither returned it nor left it in a Variable of its graph nodes. With
  ``on_names`` (see :class:`_EagerPatterns`), ``entries`` grows as the call
  meets the names its patterns select.
  """
  fns = planting.Functions({name: entries[name] for name in request.fn_names})
  planter = planting.ValuesPlanter(entries, fns)
  scope = Scope(request, planter, fns)
  scope.on_names = on_names
  unread = eager.Unread()
  out = eager.run(
      scope, lambda: graph_calls.call_directly(f, args, kwargs), unread)
  if unread.values:
    unread.read(graph_nodes.arrays_in(
        (out, graph_calls.graph_node_of(f), args, kwargs)))
  first = unread.first()
  if first is not None:
    raise interpreter.unread_plant(*first)
  planter.check_all_used(tag, lambda: [
      name for name, _ in scope.passed_keys()])
  _took(call, planter, tag)
  return out


class _EagerPatterns:
  """The names an eager plant's patterns select, as the call meets them.

  A direct call has no program to resolve patterns in beforehand (see
  :func:`_resolve`): each sow's name (or the names inside a primitive about
  to be bound) is matched against the patterns as the call meets it, and a
  name one selects joins the plant's entries and request before its sow is
  handled. The errors are those of the staged plant: a name two keys
  select, a spelling of two names, and, after the call, a pattern that
  selected nothing.
  """

  def __init__(self, keyed: dict[names_lib.Key, tp.Any], tag: tp.Hashable):
    self.keyed = keyed
    self.tag = tag
    self.patterns = [k for k in keyed if isinstance(k, names_lib.Pattern)]
    self.entries: dict[primitive.Name, tp.Any] = {
        tp.cast(primitive.Name, k): e for k, e in keyed.items()
        if not isinstance(k, names_lib.Pattern)}
    self.by: dict[primitive.Name, names_lib.Key] = {
        name: name for name in self.entries}
    self.selected: dict[names_lib.Key, list[primitive.Name]] = {
        k: [] for k in self.patterns}
    self.met: dict[primitive.Name, None] = {}

  def __call__(self, scope: Scope, keys) -> None:
    new = []
    for name, t in keys:
      if self.tag is not None and t != self.tag or name in self.met:
        continue
      self.met[name] = None
      for k in self.patterns:
        if not names_lib.resolve(k, [name], where='plant'):
          continue
        if name in self.by:
          raise ValueError(
              f'plant: {name!r} is selected by both {self.by[name]!r} and'
              f' {k!r}; give each sow one entry.'
          )
        self.by[name] = k
        self.selected[k].append(name)
        if not tp.cast(names_lib.Pattern, k).wild:
          # A spelling that selects a second name is ambiguous (raises).
          names_lib.resolve(k, self.selected[k], where='plant')
        entry = self.keyed[k]
        if callable(entry) and _wants_name(k, entry):
          entry = functools.partial(_called_with_name, entry, name)
        new.append((name, entry))
    if not new:
      return
    request = scope.request
    assert scope.planter is not None and scope.fns is not None
    planter = tp.cast(planting.ValuesPlanter, scope.planter)
    for name, entry in new:
      self.entries[name] = entry
      if callable(entry):
        scope.fns.fns[name] = entry
        planter.counters[name] = planting.Counter(0)
    planted = frozenset(self.entries)
    scope.request = dataclasses.replace(
        request, planted=Selection(names=planted),
        fn_names=request.fn_names + tuple(
            name for name, entry in new if callable(entry)))

  def check(self) -> None:
    """Raises for a pattern that selected no sow of the call."""
    for k, names in self.selected.items():
      if names:
        continue
      raise _selects_nothing(tp.cast(names_lib.Pattern, k), list(self.met))


def _request(selection: Selection, entries: dict[primitive.Name, tp.Any]):
  return Request(
      selection,
      collect=False,
      planted=Selection(names=frozenset(entries)),
      fn_names=tuple(name for name, e in entries.items() if callable(e)),
      refuse_unread=True,
  )


def _resolve(
    values: dict[names_lib.Key, tp.Any], jaxpr: tp.Any, tag: tp.Hashable
) -> dict[primitive.Name, tp.Any]:
  """``values`` by the names of the program ``jaxpr`` its keys select.

  A pattern's function is called with the name it plants at; a pattern
  that selects no sow, or a name two keys select, is an error.
  """
  sown = sorted(
      {name for name, t in primitive.sow_keys(jaxpr)
       if tag is None or t == tag},
      key=names_lib.spell,
  )
  entries: dict[primitive.Name, tp.Any] = {}
  by: dict[primitive.Name, names_lib.Key] = {}
  for k, entry in values.items():
    if not isinstance(k, names_lib.Pattern):
      found = [k]
    else:
      found = names_lib.resolve(k, sown, where='plant')
      if not found:
        raise _selects_nothing(k, sown)
    for name in found:
      if name in by:
        raise ValueError(
            f'plant: {name!r} is selected by both {by[name]!r} and {k!r};'
            ' give each sow one entry.'
        )
      by[name] = k
      if callable(entry) and _wants_name(k, entry):
        entries[name] = functools.partial(_called_with_name, entry, name)
      else:
        entries[name] = entry
  return entries


def _selects_nothing(k: names_lib.Pattern, sown: list[primitive.Name]
                     ) -> ValueError:
  """The error for a pattern that selects none of the names ``sown``."""
  close = names_lib.closest(k, sown)
  return ValueError(
      f'plant: the pattern {k.text!r} selects no sow of this call'
      + (f'; closest names: {", ".join(map(repr, close))}' if close
         else '; it sows nothing' if not sown else '')
      + '.'
  )


def _called_with_name(fn, name, value, index):
  return fn(value, index, name)


class WithName:
  """A plant function that takes the static name it plants at, whatever
  its key: ``fn(value, index, name)`` (for a library over ``plant``, such
  as ``capture_grads``, which sows copies under that name)."""

  def __init__(self, fn: tp.Callable[..., tp.Any]):
    self.fn = fn

  def __call__(self, value, index, name):
    return self.fn(value, index, name)


def _wants_name(k: names_lib.Key, entry: tp.Any) -> bool:
  """Whether the function ``entry`` of key ``k`` is called with the name:
  for a pattern with wildcards (which selects several), or if asked."""
  return isinstance(entry, WithName) or (
      isinstance(k, names_lib.Pattern) and k.wild)


def _check_function(k: names_lib.Key, fn: tp.Callable[..., tp.Any]) -> None:
  """Raises if ``fn`` cannot be called as plant calls it for the key ``k``:
  ``fn(value, index)`` for a name (or its spelling), ``fn(value, index,
  name)`` for a pattern with wildcards. A callable whose signature Python
  cannot read is called as it is."""
  by_pattern = _wants_name(k, fn)
  try:
    signature = inspect.signature(fn)
  except (TypeError, ValueError):
    return
  try:
    signature.bind(*(None,) * (3 if by_pattern else 2))
  except TypeError:
    what = (f'the pattern {tp.cast(names_lib.Pattern, k).text!r}'
            if by_pattern else f'the name {k!r}')
    form = 'fn(value, index, name)' if by_pattern else 'fn(value, index)'
    name_too = ', name: the static name it plants at' if by_pattern else ''
    raise TypeError(
        f'plant: the function for {what} is called as {form} (index: the'
        f' execution of that name{name_too}); its signature is'
        f' {getattr(fn, "__name__", "fn")}{signature}.'
    ) from None


def _check_values(values: tp.Any) -> dict[names_lib.Key, tp.Any]:
  if not isinstance(values, tp.Mapping):
    raise TypeError(
        'plant: values must map names to tuples of values (the shape'
        f' capture returns), got {type(values).__name__}.'
    )
  checked: dict[names_lib.Key, tp.Any] = {}
  for name, entries in values.items():
    name = names_lib.key(name, where='plant')
    if callable(entries):  # fn(value, index[, name]) -> the value to plant
      _check_function(name, entries)
      checked[name] = entries
      continue
    if isinstance(name, names_lib.Pattern) and name.wild:
      raise TypeError(
          f'plant: values[{name.text!r}] is a pattern, which takes a'
          ' function fn(value, index, name) called at each sow it selects;'
          f' got {type(entries).__name__}.'
      )
    if not isinstance(entries, (tuple, list)):
      raise TypeError(
          f'plant: values[{name!r}] must be a tuple with one value per sow'
          f' or a function fn(value, index), got {type(entries).__name__}.'
      )
    checked[name] = tuple(entries)
  return checked
