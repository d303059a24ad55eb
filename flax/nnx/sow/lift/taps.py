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
"""``tap``: sow the inputs and outputs of submodule calls, by module path.

Python finds a module's methods through its class, so a tap sees the calls
of the modules it matches through a *class hook* (see :mod:`.class_hooks`):
for the duration of the tapped call, each matched module's class holds,
for each listed method, a dispatcher that calls the class's own method and,
for an instance of that very class that a tap of this thread's frames
matches by its path (see :mod:`.module_paths`), sows its inputs and
outputs. Every other instance, thread and call goes straight to the class's
method. Nothing is written onto a module: inside the call ``type(module)``
is its class, ``nnx.split`` of it is what it is outside, and a module
merged from it inside the call is a plain one.

A copy of a matched module made inside the call (by ``nnx.jit``,
``nnx.vmap``, ``nnx.scan``, ``nnx.remat``, or ``jax.jit`` of the module as
a pytree) is an instance of the same class that no frame holds: its sows
are deferred and named by the path of the module it copies, found as for
``Module.sow`` (:func:`.module_paths.deferred_sow`). A module of the class
that nothing tells to be such a copy (made inside the call, or closed
over) has no path, so no pattern selects it: it is not tapped. A copy made
by an NNX transform that cannot be named is refused.

A ``super().method()`` call into a base class is not sown: the dispatcher
of a class taps only instances of the class itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import types
import typing as tp

import jax

from flax.nnx import graphlib
from flax.nnx.sow.lift import class_hooks
from flax.nnx.sow.lift import graph_nodes
from flax.nnx.sow.lift import module_paths
from flax.nnx.sow.transform import deferred
from flax.nnx.sow.transform import eager
from flax.nnx.sow.transform import names as names_lib
from flax.nnx.sow.transform import primitive

PathParts = module_paths.PathParts
# Components: a str (with '*' for any characters: '*' alone is any one
# component), an int (negative: counted from the last sibling), or '**' for
# any number of components.
Pattern = tuple[tp.Union[str, int], ...]
WILDCARD = '*'
ANY_DEPTH = '**'
# What a tap sows of a call's inputs: all of them (`True`), none, or one
# argument by position or by name.
Inputs = tp.Union[bool, int, str]
# What a tap sows of a call's output: all of it (`True`), nothing, or one
# item of a tuple/list (int) or mapping (str) output.
Outputs = tp.Union[bool, int, str]

_NOT_PLAIN = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
)


@dataclasses.dataclass(frozen=True)
class TapSpec:
  """What one tap sows, and where.

  Attributes:
    patterns: the module paths it applies to; ``None`` for every module.
    methods: the method names it watches; ``None`` for the public methods
      (and ``__call__``) each class defines itself, as Flax 0.12.8's
      ``method_outputs`` wraps them.
    inputs: ``True``: sow ``(args, kwargs)`` as ``(*path, method,
      'inputs')``; an int or str: sow that argument (by position, or by
      parameter name whether passed so or by position) as ``(*path,
      method, 'inputs', inputs)``; ``False``: none.
    outputs: ``True``: sow the output as ``(*path, method, 'output')``; an
      int or str: sow only that item of a tuple/list or mapping output,
      under the same name; ``False``: none.
    tag: the tag of those sows.
    mode: their mode (``'clobber'`` inside a ``while_loop``).
    on_output: instead of sowing the output, ``on_output(module, method,
      result)`` (``nnx.capture``'s ``method_outputs``).
  """

  patterns: tuple[Pattern, ...] | None
  methods: tuple[str, ...] | None
  inputs: Inputs
  outputs: Outputs
  tag: tp.Hashable
  on_output: tp.Callable[[tp.Any, str, tp.Any], None] | None = None
  mode: str = 'append'
  # The paths the patterns matched in the call being tapped (negative
  # indices are resolved against its modules); `None`: match by pattern.
  paths: frozenset[PathParts] | None = None

  def matches(self, path: PathParts) -> bool:
    if self.paths is not None:
      return path in self.paths
    if self.patterns is None:
      return True
    return any(_matches(pattern, path) for pattern in self.patterns)

  def method_names(self, cls: type) -> frozenset[str]:
    if self.methods is None:
      return frozenset(own_public_methods(cls))
    return frozenset(self.methods)

  def applies(self, path: PathParts, cls: type, method: str) -> bool:
    return method in self.method_names(cls) and self.matches(path)

  def key(self) -> tp.Hashable:
    """What decides the sows this tap stages: its fields, with ``on_output``
    as its code (a closure made per call stages the same)."""
    on_output = getattr(self.on_output, '__code__', self.on_output)
    # `inputs` and `outputs` with their types: `1 == True` and `0 == False`,
    # but the item 1 is not the whole output, nor the argument 0 none.
    return (self.patterns, self.methods, _typed(self.inputs),
            _typed(self.outputs), self.tag, self.mode, self.paths, on_output)


def _typed(which: Inputs | Outputs) -> tuple[str, tp.Hashable]:
  return type(which).__name__, which


# The taps of this thread's running calls, in JAX's trace context and jit
# key: a jit called inside a tapped call (``nnx.jit`` of a block, a jitted
# method) traces anew for those taps, running the Python through which the
# tap sees its modules' calls, and a later call with the same taps reuses
# that trace. Without it, a trace made outside the tap would be reused and
# its modules' calls never seen.
# Kept across a reload of this module, as `primitive.harvesting` is.
_tapping = globals().get('_tapping') or jax.make_user_context(
    default_value=None)


def tapping(frames: tp.Sequence[module_paths.Frame]):
  """A context in which JAX's caches are keyed by the taps of ``frames``
  (see ``_tapping``)."""
  return _tapping(
      tuple(spec.key() for frame in frames for spec in frame.taps) or None)


def _matches(
    pattern: Pattern,
    path: PathParts,
    siblings: tp.Callable[[PathParts], list[int]] = lambda prefix: [],
) -> bool:
  """Whether ``path`` matches ``pattern``; ``siblings(prefix)`` gives the
  sorted int components after ``prefix`` (for negative indices)."""
  if not pattern:
    return not path
  head, rest = pattern[0], pattern[1:]
  if head == ANY_DEPTH:
    return any(_matches(rest, path[i:], _after(siblings, path[:i]))
               for i in range(len(path) + 1))
  if not path:
    return False
  step = path[0]
  if isinstance(head, int) and head < 0:
    ints = siblings(())
    ok = len(ints) >= -head and ints[head] == step
  elif isinstance(head, str) and WILDCARD in head:
    ok = head == WILDCARD or isinstance(step, str) and (
        names_lib.component_matches(head, step))
  else:
    ok = head == step
  return ok and _matches(rest, path[1:], _after(siblings, (step,)))


def _after(siblings, prefix: PathParts):
  if not prefix:
    return siblings
  return lambda more: siblings((*prefix, *more))


class Tapped:
  """``tap``'s result: calls ``f`` with its modules' calls sown.

  A class rather than a closure so that the staging can see through it: a
  tapped Module (or bound method of one) is staged as that graph node.
  """

  def __init__(self, f, spec: TapSpec):
    self.fn = f
    self.spec = spec
    functools.update_wrapper(self, f, updated=())

  def __call__(self, *args, **kwargs):
    return self.run(lambda: self.fn(*args, **kwargs), (self.fn, args, kwargs))

  def run(self, call: tp.Callable[[], tp.Any], reach: tp.Any) -> tp.Any:
    """Runs ``call()``, tapping the modules of ``reach`` that match."""
    frame = module_paths.innermost_functional()
    if frame is None:
      return call()  # the sows would be identities
    modules = _matching(frame, self.spec, reach)
    # Matched in this call: negative indices count its modules.
    spec = dataclasses.replace(
        self.spec, paths=frozenset(path for path, _ in modules))
    frame.taps.append(spec)
    watched: list[class_hooks.Key] = []
    try:
      watched = watch((m, self.spec.method_names(type(m)))
                      for _, m in modules)
      with tapping(module_paths.FRAMES.stack):
        return call()
    finally:
      class_hooks.release(watched)
      popped = frame.taps.pop()
      assert popped is spec


def _matching(frame, spec: TapSpec, reach) -> list[tuple[PathParts, tp.Any]]:
  """The modules of ``reach`` with a path in ``frame`` matching ``spec``."""
  nodes = graph_nodes.graph_nodes_in(reach)
  reached = {id(node) for node in nodes}
  if all(id(node) in reached for node in
         graph_nodes.graph_nodes_in([root for _, root in frame.roots])):
    # The call's own roots (the common case: tap(f) called on the captured
    # function's arguments): every module of the frame, walked once.
    candidates = list(frame.modules)
  else:
    candidates = []
    seen: set[int] = set()
    for node in nodes:
      for _, module in module_paths.modules_of(node):
        path = frame.path_of(module)
        if path is not None and id(module) not in seen:
          seen.add(id(module))
          candidates.append((path, module))
  assert spec.patterns is not None
  by_prefix: dict[PathParts, list[int]] = {}
  for path, _ in candidates:
    if path and isinstance(path[-1], int):
      by_prefix.setdefault(path[:-1], []).append(path[-1])
  siblings = lambda prefix: sorted(by_prefix.get(prefix, ()))
  matched = []
  for pattern in spec.patterns:
    hits = [(p, m) for p, m in candidates if _matches(pattern, p, siblings)]
    if not hits:
      known = ', '.join(repr(p) for p, _ in candidates[:8])
      raise ValueError(
          f'tap: the pattern {pattern!r} matches no module of the function\'s'
          f' arguments (module paths: {known or "none"}'
          f'{", ..." if len(candidates) > 8 else ""}).'
      )
    tapped = [(p, m) for p, m in hits if not _lacking(spec, m)]
    if not tapped:
      # Only modules without the method (a container such as an nnx.List):
      # an error named as `methods=` names it, never nothing tapped. A
      # wildcard skips such modules where it matches others.
      path, module = next((p, m) for p, m in hits if _lacking(spec, m))
      lacking = _lacking(spec, module)
      items = [p for p, _ in candidates if p[:len(path)] == path
               and len(p) == len(path) + 1]
      hint = (f' Its items are {", ".join(map(repr, items[:4]))}'
              f'{", ..." if len(items) > 4 else ""}: tap'
              f' {(*path, WILDCARD)!r} for each.' if items else '')
      raise TypeError(
          f'tap: the pattern {pattern!r} matches the'
          f' {type(module).__name__} at {path!r}, which has no method'
          f' {lacking!r} to tap.{hint}'
      )
    matched.extend(tapped)
  unique = {id(m): (p, m) for p, m in matched}
  return list(unique.values())


def _lacking(spec: TapSpec, module: tp.Any) -> str | None:
  """The first method of ``spec`` that ``module`` has not, or ``None``."""
  for method in sorted(spec.method_names(type(module))):
    attr = class_hooks.unhooked(type(module), method)
    if attr is None or not _method_like(attr):
      return method
  return None


def watch_for(frame, modules) -> list[class_hooks.Key]:
  """Watches ``modules`` for the taps ``frame`` starts with
  (``nnx.capture``'s ``method_outputs``)."""
  pairs = []
  for spec in frame.taps:
    for path, module in modules:
      if spec.matches(path):
        pairs.append((module, spec.method_names(type(module))))
  return watch(pairs)


# ---------------------------------------------------------------------------
# Watching subclasses
# ---------------------------------------------------------------------------


def _method_like(attr: tp.Any) -> bool:
  """Whether ``attr`` (a class attribute) is called with the module first:
  a function, also a decorated one, or an object that binds like a method
  (``nnx.jit``'s); not a generator, class, static or class method."""
  if isinstance(attr, types.FunctionType):
    code, module_arg = attr.__code__, 0
  elif (
      not isinstance(attr, type)
      and hasattr(type(attr), '__get__')
      and isinstance(getattr(type(attr), '__call__', None),
                     types.FunctionType)
  ):
    code, module_arg = type(attr).__call__.__code__, 1
  else:
    return False
  takes_module = code.co_argcount > module_arg or bool(
      code.co_flags & inspect.CO_VARARGS
  )
  return not code.co_flags & _NOT_PLAIN and takes_module


def own_public_methods(cls: type) -> dict[str, tp.Any]:
  """The public callables and ``__call__`` defined in ``cls`` itself (not
  inherited ones), by name: the methods Flax 0.12.8's ``method_outputs``
  wraps."""
  return {
      name: attr
      for name, attr in vars(cls).items()
      if (not name.startswith('_') or name == '__call__')
      and _method_like(attr)
  }


def _dispatching(cls: type, name: str, attr: tp.Any
                 ) -> tp.Callable[..., tp.Any]:
  """The hook of ``cls.<name>``, whose unhooked attribute is ``attr``:
  ``attr`` called as the class calls it, sowing what the taps of this
  thread's frames ask for of an instance of ``cls`` itself (an instance of
  a subclass that inherits it, or a ``super()`` call into it, is not
  tapped here: its own class is hooked if a tap matches it)."""

  def method(self, *args, **kwargs):
    if type(self) is not cls or not module_paths.FRAMES.stack:
      return attr(self, *args, **kwargs)
    found = _active(self, name)
    if found is None:
      specs = _unplaced(self, name)
      if not specs:
        # Called as the class calls it: the class attribute, module first.
        return attr(self, *args, **kwargs)
      # A copy made inside the call (nnx.vmap, nnx.scan, nnx.jit...): what
      # each tap sows of it is decided once its path is found (`_Tapping`).
      path = '(a copy made inside the call)'
      naming = _deferred_naming(self, name, tuple(specs))
    else:
      path, specs = found
      base = module_paths.sow_name(path, name)
      naming = lambda what, key: (*base, *what)  # pylint: disable=cell-var-from-loop
    for tag, inputs, mode in _sows(specs, 'inputs'):
      key = (tag, inputs, mode)
      if inputs is True:
        args, kwargs = _sow_arrays(
            (args, kwargs), name=naming(('inputs',), key), tag=tag,
            mode=mode,
        )
      else:
        args, kwargs = _sow_argument(
            attr, self, args, kwargs, inputs, path=path, method=name,
            name=naming(('inputs', inputs), key), tag=tag, mode=mode,
        )
    result = attr(self, *args, **kwargs)
    for spec in specs:
      if spec.on_output is not None:
        spec.on_output(self, name, result)
    for tag, outputs, mode in _sows(specs, 'outputs'):
      output_name = naming(('output',), (tag, outputs, mode))
      if outputs is True:
        result = _sow_arrays(result, name=output_name, tag=tag, mode=mode)
      else:
        result = _sow_output_item(
            result, outputs, where=f'tap: {type(self).__name__}.{name} at'
            f' {path!r}', name=output_name, tag=tag, mode=mode)
    return result

  if isinstance(attr, types.FunctionType):
    functools.update_wrapper(method, attr)
  return method


def _sows(
    specs: tp.Sequence[TapSpec], what: str
) -> list[tuple[tp.Hashable, tp.Any, str]]:
  """The distinct (tag, what is sown, mode) of the sows ``specs`` ask for
  ``what``: nested taps of the same module sow it once per tag."""
  sows: list[tuple[tp.Hashable, tp.Any, str]] = []
  seen = set()
  for spec in specs:
    chosen = getattr(spec, what)
    key = (spec.tag, chosen, spec.mode)
    # Typed: the item 1 and the whole output (True) are two sows.
    typed = (spec.tag, _typed(chosen), spec.mode)
    if spec.on_output is None and chosen is not False and typed not in seen:
      seen.add(typed)
      sows.append(key)
  return sows


def _sow_argument(attr, module, args, kwargs, which: int | str, *, path,
                  method: str, name, tag, mode):
  """Sows the argument ``which`` (a position or a parameter name) of a call
  ``attr(module, *args, **kwargs)`` and puts the sown value in its place."""
  where = f'tap: {type(module).__name__}.{method} at {path!r}'

  def sown(value):
    if not any(map(primitive.is_array, jax.tree_util.tree_leaves(value))):
      raise TypeError(
          f'{where}: its argument {which!r} holds no array ({value!r}), so'
          ' there is nothing to sow; tap an argument that is an array.'
      )
    return _sow_arrays(value, name=name, tag=tag, mode=mode)
  if isinstance(which, int):
    if which < len(args):
      args = list(args)
      args[which] = sown(args[which])
      return tuple(args), kwargs
    parameters = _parameters(attr)
    if which >= len(parameters) or parameters[which] not in kwargs:
      raise TypeError(
          f'{where} was called with {len(args)} positional argument(s) and'
          f' no keyword for position {which}: there is no input {which} to'
          ' sow.'
      )
    which = parameters[which]
  if which in kwargs:
    kwargs = dict(kwargs)
    kwargs[which] = sown(kwargs[which])
    return args, kwargs
  parameters = _parameters(attr)
  if which in parameters and parameters.index(which) < len(args):
    at = parameters.index(which)
    args = list(args)
    args[at] = sown(args[at])
    return tuple(args), kwargs
  raise TypeError(
      f'{where}: this call passes no argument {which!r} (its parameters:'
      f' {", ".join(parameters) or "none"}); tap inputs=True sows every'
      ' input.'
  )


def _sow_output_item(result, which: int | str, *, where: str, name, tag,
                     mode):
  """Sows the item ``which`` of a call's ``result`` (a tuple or list by
  position, a mapping by key) and puts the sown value in its place."""
  if isinstance(which, int):
    if not isinstance(result, (tuple, list)):
      raise TypeError(
          f'{where} returned a {type(result).__name__}, not a tuple or list:'
          f' tap outputs={which} selects an item of one; outputs=True sows'
          ' the whole output.'
      )
    if not -len(result) <= which < len(result):
      raise TypeError(
          f'{where} returned {len(result)} items: there is no item {which}'
          ' to sow.'
      )
  elif not isinstance(result, tp.Mapping) or which not in result:
    raise TypeError(
        f'{where} returned'
        + (f' a mapping with the keys {sorted(map(str, result))}'
           if isinstance(result, tp.Mapping)
           else f' a {type(result).__name__}')
        + f': tap outputs={which!r} selects the item of a mapping with that'
        ' key.'
    )
  item = result[which]
  if not any(map(primitive.is_array, jax.tree_util.tree_leaves(item))):
    raise TypeError(
        f'{where}: its output item {which!r} holds no array, so there is'
        ' nothing to sow.'
    )
  sown = _sow_arrays(item, name=name, tag=tag, mode=mode)
  if isinstance(result, tp.Mapping):
    new = dict(result)
    new[which] = sown
    # A Mapping subclass built from a dict, as its type builds one.
    return (new if type(result) is dict
            else tp.cast(tp.Any, type(result))(new))
  items = list(result)
  items[tp.cast(int, which)] = sown  # not a Mapping: an int, checked
  if isinstance(result, list):
    return items
  # A named tuple is rebuilt with its fields.
  return type(result)(*items) if hasattr(result, '_fields') else tuple(items)


def _parameters(attr: tp.Any) -> list[str]:
  """The names of ``attr``'s parameters after the module, in order."""
  try:
    signature = inspect.signature(attr)
  except (TypeError, ValueError):
    return []
  names = [
      p.name for p in signature.parameters.values()
      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
                    p.KEYWORD_ONLY)
  ]
  return names[1:] if isinstance(attr, types.FunctionType) else names


def _active(module, method: str) -> tuple[PathParts, list[TapSpec]] | None:
  """The path and taps of the innermost frame that taps this call."""
  cls = type(module)
  for frame in reversed(module_paths.FRAMES.stack):
    if not frame.taps:
      continue
    path = frame.path_of(module)
    if path is None:
      continue
    specs = [s for s in frame.taps if s.applies(path, cls, method)]
    if specs:
      return path, specs
  return None


def _unplaced(module, method: str) -> list[TapSpec]:
  """The taps that may apply to a call of ``module``, a copy no frame holds
  (made inside the call), by its class and method: which do is known once
  its path is."""
  if any(frame.path_of(module) is not None
         for frame in module_paths.FRAMES.stack):
    return []  # a module of the call that no tap matches
  if not module_paths.may_be_a_copy(module):
    return []  # closed over, or made eagerly inside the call: no path
  cls = type(module)
  return [spec for frame in module_paths.FRAMES.stack for spec in frame.taps
          if method in spec.method_names(cls)]


@dataclasses.dataclass(frozen=True)
class _Tapping:
  """A tap's sow on a copy made inside the call, until its path is found:
  the ``detail`` of its :class:`~flax.nnx.sow.transform.deferred.Deferred`.

  ``specs`` are the taps that may apply (kept here: a staged call's taps
  have ended when its program is resolved). Resolved in the innermost frame
  that holds the module: named as on the module itself if one of ``specs``
  applies there and sows this (``key``: tag, inputs, mode), else dropped;
  dropped too where no frame holds it and nothing says it is an NNX
  transform's copy (see the module docstring).
  """

  cls: type
  method: str
  what: tuple[tp.Hashable, ...]  # ('inputs',), ('inputs', i), ('output',)
  key: tuple[tp.Hashable, tp.Any, str]
  specs: tuple[TapSpec, ...]

  def resolve(self, pending, origins, frames, once):
    path_in = module_paths.path_in(pending, origins, once)
    for frame in reversed(frames):
      path = path_in(frame)
      if path is None:
        continue
      specs = [s for s in self.specs
               if s.applies(path, self.cls, self.method)]
      kind = 'outputs' if self.what == ('output',) else 'inputs'
      tag, chosen, mode = self.key
      if (tag, _typed(chosen), mode) not in {
          (t, _typed(c), m) for t, c, m in _sows(specs, kind)}:
        return deferred.DROP
      return (*module_paths.sow_name(path, self.method), *self.what), None
    if pending.chain:
      return None  # an NNX transform's copy that cannot be named: refused
    # Nothing tells that it is a copy of one of the call's modules: a
    # module of the class made inside the call, which no pattern selects.
    return deferred.DROP


class _DeferredName:
  """The name of a tap's sow on a copy made inside the call (see
  :class:`_Tapping`): resolved from the copy's Variables where the program
  is bound."""

  def __init__(self, module, method: str, what, key, specs):
    self.module = module
    self.method = method
    self.what = what
    self.key = key
    self.specs = specs

  def sow(self, view, tag, mode):
    done = module_paths.deferred_sow(
        self.module, view, rest=(self.method, *self.what), tag=tag,
        mode=mode,
        detail=_Tapping(type(self.module), self.method, self.what,
                        self.key, self.specs),
    )
    if done is None:
      # Nothing tells that it is a copy of one of the call's modules (no
      # Variable, no NNX transform's record): a module of the class that
      # the call made or closes over, which no path names, so no pattern
      # selects it.
      return view
    return done[0]


def _deferred_naming(module, method: str, specs: tuple[TapSpec, ...]):
  return lambda what, key: _DeferredName(module, method, what, key, specs)


def _sow_arrays(tree: tp.Any, *, name, tag, mode: str = 'append') -> tp.Any:
  """Sows the array leaves of ``tree`` (others ``None``) and puts the sown
  arrays back in their places."""
  leaves, treedef = jax.tree_util.tree_flatten(
      tree, is_leaf=graphlib.is_graph_node
  )
  arrays = [primitive.is_array(leaf) for leaf in leaves]
  if not any(arrays):
    return tree
  view = jax.tree_util.tree_unflatten(
      treedef, [leaf if a else None for leaf, a in zip(leaves, arrays)]
  )
  if isinstance(name, _DeferredName):
    sown = jax.tree_util.tree_leaves(name.sow(view, tag, mode))
  else:
    sown = jax.tree_util.tree_leaves(
        primitive.sow(view, name=name, tag=tag, mode=mode))
  at = [i for i, a in enumerate(arrays) if a]
  for i, value in zip(at, sown, strict=True):
    leaves[i] = value
  return jax.tree_util.tree_unflatten(treedef, leaves)


def watch(
    pairs: tp.Iterable[tuple[tp.Any, frozenset[str]]],
) -> list[class_hooks.Key]:
  """Holds, for a call, the hook of each listed method on each module's class
  (see :mod:`.class_hooks`); returns what ``class_hooks.release`` needs."""
  return class_hooks.hold(
      ((type(module), name) for module, names in pairs for name in names),
      _dispatching,
  )


def run_in_frame(
    frame: module_paths.Frame,
    found: list[tuple[module_paths.PathParts, tp.Any]],
    call: tp.Callable[[], tp.Any],
) -> tp.Any:
  """Runs ``call()`` in ``frame``, whose roots are ``found``.

  The frame's taps' class hooks are released when the call ends, also on
  error. In a functional frame, while ``Module.sow`` is Flax 0.12.8's own,
  a ``Module.sow`` in this thread raises an error naming
  ``capture_compat.install()`` (see ``module_paths._CapturesHook``).
  """
  frame.start(found)
  module_paths.note_started(frame)
  staged = not eager.can_run()
  if staged:
    # Staged: the Variables of the copies hold the trace's inputs now, which
    # the deferred sows of the call are resolved from once it is traced.
    frame.variable_paths(None)
  # A staged call over modules traces its jits anew (see
  # `module_paths.staging`); one over arrays alone has no module to copy,
  # and keeps JAX's traces of its jits (`jax.numpy`'s own among them).
  own_traces = staged and any(
      graph_nodes.holds_graph_nodes(root) for _, root in found)
  refused = []
  if frame.functional and module_paths.legacy_sow_methods():
    refused = module_paths.refuse_legacy_sows()
  module_paths.FRAMES.stack.append(frame)
  watched: list[class_hooks.Key] = []
  try:
    with module_paths.staging() if own_traces else contextlib.nullcontext():
      if not frame.taps:
        return call()
      watched = watch_for(frame, frame.modules)
      with tapping(module_paths.FRAMES.stack):
        return call()
  finally:
    class_hooks.release(watched)
    popped = module_paths.FRAMES.stack.pop()
    assert popped is frame
    if refused:
      module_paths.allow_legacy_sows(refused)
