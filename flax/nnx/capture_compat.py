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
"""``nnx.capture``, ``Module.sow`` and ``Module.perturb`` on the sow transform.

Flax 0.12.8's ``nnx.capture`` collects ``Module.sow`` values by installing a
``__captures__`` attribute on every module and, for ``method_outputs``, by
wrapping the methods of their classes. This module keeps its exact signature
and conventions but builds it on :mod:`flax.nnx.sow`:

* ``capture`` stages the call on copies of its graph nodes
  (:func:`flax.nnx.sow.tracing.stage`), so modules are never mutated, not even
  structurally or transiently, and threads never see each other's values;
* inside it, ``Module.sow(T, 'n', v)`` is the functional
  ``sow(v, name=(*path, 'n'), tag=T)``, where ``path`` is the module's path
  from the captured module as :func:`nnx.iter_modules` gives it, and
  ``Module.perturb`` likewise;
* ``reduce_fn``/``init_fn`` are applied after the call, in call order, to the
  collected values.

After :func:`install`, ``nnx.capture``, ``flax.nnx.module.capture``,
``Module.sow`` and ``Module.perturb`` are these implementations; code written
for Flax 0.12.8 runs unchanged. :func:`legacy` is Flax 0.12.8's own
``nnx.capture``, kept for comparison.

Example::

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> from flax.nnx import capture_compat
  >>> class Block(nnx.Module):
  ...   def __init__(self, rngs):
  ...     self.linear = nnx.Linear(2, 2, rngs=rngs)
  ...   def __call__(self, x):
  ...     y = self.linear(x)
  ...     self.sow(nnx.Intermediate, 'y', y)
  ...     return y
  >>> class Model(nnx.Module):
  ...   def __init__(self, rngs):
  ...     self.blocks = nnx.List([Block(rngs), Block(rngs)])
  ...   def __call__(self, x):
  ...     for block in self.blocks:
  ...       x = block(x)
  ...     return x
  >>> model = Model(nnx.Rngs(0))
  >>> with capture_compat.install():
  ...   out, intermediates = nnx.capture(model, nnx.Intermediate)(jnp.ones(2))
  >>> [path for path, _ in nnx.to_flat_state(intermediates)]
  [('blocks', 0, 'y'), ('blocks', 1, 'y')]
"""

from __future__ import annotations

import contextlib
import dataclasses
import dis
import functools
import inspect
import itertools
import sys
import threading
import types
import typing as tp
import warnings
import weakref

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import config as jax_config
from jax._src import core as jax_core

import flax.errors
import flax.nnx
from flax.nnx import graphlib
from flax.nnx import module as module_lib
from flax.nnx import statelib
from flax.nnx import variablelib
from flax.nnx.sow.capture import group as group_records
from flax.nnx.sow import interpreter
from flax.nnx.sow import primitive
from flax.nnx.sow import rules  # noqa: F401  (fills the rule table)
from flax.nnx.sow import tracing
from flax.nnx.sow.selection import Selection

Module = module_lib.Module
Variable = variablelib.Variable
State = statelib.State
PathParts = tuple[tp.Hashable, ...]

# Flax 0.12.8's implementations, saved before anything is installed.
_LEGACY_CAPTURE = module_lib.capture
_LEGACY_SOW = Module.sow
_LEGACY_PERTURB = Module.perturb
tuple_reduce = module_lib.tuple_reduce
tuple_init = module_lib.tuple_init

# Names of ``flax.nnx.module``'s capture attribute in the Python namespaces
# that export it.
_CAPTURE_NAMESPACES = (flax.nnx, module_lib)


# ---------------------------------------------------------------------------
# Trace-context scope: keeps JAX caches from reusing a trace across modules
# ---------------------------------------------------------------------------

# A sow's name holds its module's path, which JAX's tracing caches do not see:
# an `nnx.jit` function traced for `blocks[0]` would be reused, with
# `blocks[0]`'s names, for `blocks[1]`, whose graph definition is equal. So
# while a capture traces, this trace-context value is fresh, and it changes
# again after every sow that names a module path: a cached trace is reused
# only if no such sow was traced since it was cached.
_scope = jax_config.string_or_object_state(
    name='flax_nnx_capture_compat_scope',
    default=None,
    help=(
        'Internal to flax.nnx.capture_compat: fresh while a capture traces'
        ' and after every path-named sow, so that JAX never reuses a trace'
        ' whose sow names depend on which module was passed.'
    ),
    include_in_trace_context=True,
)
_scope_ids = itertools.count(1)


def _renew_scope() -> None:
  _scope.set_local(next(_scope_ids))


# ---------------------------------------------------------------------------
# Frames: one per active capture, on a thread-local stack
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class _SiteInfo:
  """What one sow site of a frame needs to become a State entry."""

  path: PathParts
  name: str
  var_type: type[Variable]
  kind: str  # 'sow' or 'perturb'
  reduce_fn: tp.Callable[[tp.Any, tp.Any], tp.Any]
  init_fn: tp.Callable[[], tp.Any]


class _Frame:
  """One active compat ``capture``: its module paths and its sow sites.

  ``objects`` maps ``id(module)`` to ``(module, path)`` for the *copies* the
  traced function works on; it only lives while the function is traced.
  Everything else is static and outlives the trace.
  """

  def __init__(
      self,
      var_types: tuple[type[Variable], ...],
      init_types: dict[PathParts, set[type[Variable]]],
      method_outputs: type[Variable] | None,
  ):
    self.var_types = var_types
    self.init_types = init_types
    self.method_outputs = method_outputs
    self.objects: dict[int, tuple[tp.Any, PathParts]] = {}
    self.tokens: dict[int, tuple[tp.Any, PathParts]] = {}
    self.module_paths: list[PathParts] = []
    self.sites: dict[tuple[primitive.Name, type], _SiteInfo] = {}

  def accepts(self, path: PathParts, var_type: type[Variable]) -> bool:
    """Whether legacy ``__captures__`` of the module at ``path`` has a slot
    for ``var_type``: the captured types, plus the types ``init`` has there.
    """
    return var_type in self.var_types or var_type in self.init_types.get(
        path, ()
    )

  def path_of(self, obj: tp.Any) -> PathParts | None:
    """``obj``'s path from this frame's root, through NNX transforms."""
    seen = set()
    todo = [obj]
    while todo:
      current = todo.pop()
      if id(current) in seen:
        continue
      seen.add(id(current))
      entry = self.objects.get(id(current))
      if entry is not None and entry[0] is current:
        return entry[1]
      token = _token_of(current)
      entry = self.tokens.get(id(token))
      if entry is not None and entry[0] is token:
        return entry[1]
      todo.extend(_outer_objects(current))
    return None

  def register(self, name, info: _SiteInfo) -> None:
    key = (name, info.var_type)
    if key not in self.sites:
      self.sites[key] = info


class _Frames(threading.local):

  def __init__(self):
    self.stack: list[_Frame] = []


_FRAMES = _Frames()

# The body of an `nnx.fori_loop`/`nnx.while_loop` merges its carry in its own
# update context, whose indexes are those of the loop's outer split.
_LOOP_BODY_CONTEXTS = {
    'fori_loop_body': 'fori_loop',
    'while_loop_body': 'while_loop',
}


def _token_of(module: tp.Any) -> tp.Any:
  """A module's identity token: its ``_pytree__nodes`` mapping object."""
  if not hasattr(module, '__dict__'):
    return None
  return vars(module).get('_pytree__nodes')


def _mark(module: Module) -> tp.Any:
  """Gives ``module`` (a private copy) a token of its own and returns it.

  The token is the module's ``_pytree__nodes`` mapping (which attributes are
  data), replaced by an equal but distinct object. Graph definitions and
  pytree structures hold it as a static value, compared by value (so
  ``nnx.graphdef`` and every cache key are unchanged) but handed, as the
  same object, to every copy a transform makes: ``nnx.jit``, ``nnx.vmap``,
  ... in graph or tree mode, and ``jax.jit``, ``jax.vmap``... of modules as
  pytrees. So the token identifies the module across transforms.
  """
  nodes = vars(module).get('_pytree__nodes')
  if nodes is None:
    return None
  for frame in _FRAMES.stack:
    entry = frame.tokens.get(id(nodes))
    if entry is not None and entry[0] is nodes:
      return nodes  # a copy of a module an enclosing capture marked
  token = type(nodes)(nodes, copy=True)
  object.__setattr__(module, '_pytree__nodes', token)
  return token


def _outer_objects(obj: tp.Any) -> list[tp.Any]:
  """The objects ``obj`` is a copy of, in the active NNX transforms.

  NNX transforms in graph mode (the default) merge their inputs into copies
  inside an ``nnx.update_context``; while their function runs, the context
  maps each copy to the index of the object it copies.
  """
  stacks = graphlib.GRAPH_CONTEXT.update_context_stacks
  outers = []
  for tag, stack in list(stacks.items()):
    for ctx in reversed(stack):
      inner = getattr(ctx, 'inner_ref_outer_index', None)
      if not inner or obj not in inner:
        continue
      index = inner[obj]
      outer_map = getattr(ctx, 'outer_index_outer_ref', None)
      if outer_map is None and tag in _LOOP_BODY_CONTEXTS:
        loop_stack = stacks.get(_LOOP_BODY_CONTEXTS[tag])
        if loop_stack:
          outer_map = getattr(loop_stack[-1], 'outer_index_outer_ref', None)
      if outer_map is not None and index in outer_map:
        outers.append(outer_map[index])
  return outers


def _resolve(
    obj: tp.Any, var_type: type[Variable]
) -> tuple[_Frame, PathParts, bool] | None:
  """The frame a sow on ``obj`` goes to, its path there, and whether the
  frame collects ``var_type``.

  The innermost frame that holds ``obj`` and collects ``var_type`` wins;
  failing that, the innermost frame that holds ``obj`` (the sow then only
  reaches an enclosing ``flax.nnx.sow.capture``); ``None`` if no frame holds
  ``obj``.
  """
  fallback = None
  for frame in reversed(_FRAMES.stack):
    path = frame.path_of(obj)
    if path is None:
      continue
    if frame.accepts(path, var_type):
      return frame, path, True
    if fallback is None:
      fallback = (frame, path, False)
  return fallback


def _sow_name(path: PathParts, name: str) -> primitive.Name:
  parts = []
  for part in (*path, name):
    if isinstance(part, str) or (
        isinstance(part, int) and not isinstance(part, bool)
    ):
      parts.append(part)
    else:
      parts.append(repr(part))
  return tuple(parts)


def _is_sowable(value: tp.Any) -> bool:
  """Whether ``value`` can be sown: a pytree of arrays and numbers."""
  return all(
      isinstance(leaf, (jax.Array, np.ndarray, np.generic, bool, int, float,
                        complex))
      for leaf in jax.tree_util.tree_leaves(value)
  )


# ---------------------------------------------------------------------------
# Module.sow and Module.perturb
# ---------------------------------------------------------------------------


def _as_variable_type(variable_type) -> type[Variable]:
  if isinstance(variable_type, str):
    return variablelib.variable_type_from_name(
        variable_type, allow_register=True
    )
  return variable_type


def _has_legacy_captures(module: Module) -> bool:
  # A legacy capture (`legacy(...)`) is running on this module.
  return '__captures__' in vars(module)


def sow(
    self: Module,
    variable_type: type[Variable[tp.Any]] | str,
    name: str,
    value: tp.Any,
    reduce_fn: tp.Callable[[tp.Any, tp.Any], tp.Any] = tuple_reduce,
    init_fn: tp.Callable[[], tp.Any] = tuple_init,
) -> bool:
  """``Module.sow`` on the sow transform; installed by :func:`install`.

  Inside :func:`capture`, sows ``value`` as
  ``flax.nnx.sow.sow(value, name=(*path, name), tag=variable_type)``, where
  ``path`` is this module's path from the captured module, and returns
  whether the capture collects ``variable_type``. ``reduce_fn`` and
  ``init_fn`` are applied by ``capture`` to the values sown under ``name``,
  in call order. Outside any capture, behaves exactly as in Flax 0.12.8:
  stores the reduced value in a ``variable_type`` attribute named ``name``
  and warns that this is deprecated.

  Example::

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from flax.nnx import capture_compat
    >>> class Model(nnx.Module):
    ...   def __call__(self, x):
    ...     self.sow(nnx.Intermediate, 'double', 2 * x)
    ...     self.sow(nnx.Intermediate, 'total', x, init_fn=lambda: 0,
    ...              reduce_fn=lambda total, x: total + x)
    ...     return x
    >>> model = Model()
    >>> def forward(model, x):
    ...   return model(model(x))
    >>> with capture_compat.install():
    ...   _, state = nnx.capture(forward, nnx.Intermediate)(
    ...       model, jnp.ones(()))
    >>> state['double'].get_value()
    (Array(2., dtype=float32), Array(2., dtype=float32))
    >>> state['total'].get_value()
    Array(2., dtype=float32)

  Args:
    variable_type: the :class:`Variable` type (or its Linen-style name) the
      value is collected as.
    name: the name of the value in this module.
    value: a pytree of arrays.
    reduce_fn: combines the accumulated value with a new one; by default
      appends to a tuple.
    init_fn: the initial accumulated value; by default an empty tuple.

  Returns:
    Whether the value is collected (always ``True`` outside a capture).
  """
  variable_type = _as_variable_type(variable_type)
  if _has_legacy_captures(self):
    return _LEGACY_SOW(self, variable_type, name, value, reduce_fn, init_fn)
  target = _resolve(self, variable_type)
  if target is None:
    with _explain_unreachable(self, 'sow'):
      return _deprecated_sow(self, variable_type, name, value, reduce_fn,
                             init_fn)
  frame, path, accepted = target
  if not accepted:
    # Legacy drops it; the sow still reaches an enclosing transform capture.
    if _is_sowable(value):
      primitive.sow(value, name=_sow_name(path, name), tag=variable_type)
      _renew_scope()
    return False
  sow_name = _sow_name(path, name)
  frame.register(
      sow_name,
      _SiteInfo(path, name, variable_type, 'sow', reduce_fn, init_fn),
  )
  primitive.sow(value, name=sow_name, tag=variable_type, mode=_mode(reduce_fn))
  _renew_scope()
  return True


@contextlib.contextmanager
def _explain_unreachable(module: Module, method: str):
  """Explains a failed deprecated-path write inside a capture."""
  try:
    yield
  except flax.errors.TraceContextError as e:
    if _FRAMES.stack:
      e.add_note(
          f'nnx.capture: Module.{method} was called on a'
          f' {type(module).__name__} that is not reachable from the captured'
          ' module, so it took the deprecated path (a Variable attribute),'
          ' which cannot be written from inside the traced function. Make'
          ' the module a submodule of the captured one or pass it as an'
          ' argument.'
      )
    raise


def keep_last(previous: tp.Any, value: tp.Any) -> tp.Any:
  """A ``reduce_fn`` for ``Module.sow`` that keeps the last value sown.

  Sown with ``mode='clobber'``, so it can be used inside ``nnx.while_loop``.
  """
  del previous
  return value


# The bytecode of `lambda previous, value: value`.
_KEEP_LAST_CODE = (lambda previous, value: value).__code__.co_code


def _mode(reduce_fn) -> str:
  """``'clobber'`` for a reducer that keeps the last value, else append.

  Only a keep-last reducer has a meaning inside ``while_loop``, where the
  number of sows is only known at run time. Besides :func:`keep_last`, any
  plain function of two arguments that returns its second is recognized from
  its bytecode (it is never called).
  """
  if reduce_fn is keep_last:
    return 'clobber'
  code = getattr(reduce_fn, '__code__', None)
  if (
      isinstance(reduce_fn, types.FunctionType)
      and code.co_argcount == 2
      and not code.co_kwonlyargcount
      and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
      and code.co_code == _KEEP_LAST_CODE
  ):
    return 'clobber'
  return 'append'


_EXTRACTING_INTERMEDIATES = (
    'https://flax.readthedocs.io/en/latest/guides/extracting_intermediates.html'
)
# Flax 0.12.8's warning texts, whitespace included.
_SOW_DEPRECATED = (
    "Using 'Module.sow()' outside of 'nnx.capture()' is deprecated; see\n"
    f'        {_EXTRACTING_INTERMEDIATES} for more information.\n        '
)
_PERTURB_DEPRECATED = (
    "\n      Using 'Module.perturb()' outside of 'nnx.capture()' is"
    ' deprecated; see\n'
    f'      {_EXTRACTING_INTERMEDIATES} for more information.\n      '
)


def _deprecated_sow(self, variable_type, name, value, reduce_fn, init_fn):
  """Flax 0.12.8's ``Module.sow`` outside of any capture."""
  if hasattr(self, name):
    variable = getattr(self, name)
    if not isinstance(variable, Variable):
      raise ValueError(
          f"Expected '{name}' to be a Variable, got {type(variable).__name__}"
      )
    if type(variable) != variable_type:  # pylint: disable=unidiomatic-typecheck
      raise ValueError(
          f"Expected '{name}' to be of type '{variable_type.__name__}', "
          f"got '{type(variable).__name__}'"
      )
    variable.set_value(reduce_fn(variable.get_value(), value))
  else:
    setattr(self, name, variable_type(reduce_fn(init_fn(), value)))
  warnings.warn(
      _SOW_DEPRECATED,
      DeprecationWarning,
      stacklevel=3,
  )
  return True


def perturb(
    self: Module,
    name: str,
    value: tp.Any,
    variable_type: str | type[Variable[tp.Any]] = variablelib.Perturbation,
) -> tp.Any:
  """``Module.perturb`` on the sow transform; installed by :func:`install`.

  Inside a :func:`capture` that collects ``variable_type`` (in its types or
  in its ``init``), returns ``value`` plus the perturbation stored under
  ``name``: the one in ``init``, or zeros, which the capture returns as the
  ``variable_type`` State. Differentiating with respect to that State gives
  the gradient of the output with respect to ``value``. Outside any capture,
  behaves exactly as in Flax 0.12.8 (a deprecated Variable attribute).

  Example::

    >>> import jax
    >>> from flax import nnx
    >>> from flax.nnx import capture_compat
    >>> class Model(nnx.Module):
    ...   def __call__(self, x):
    ...     return 3 * self.perturb('x', x) ** 2
    >>> model = Model()
    >>> with capture_compat.install():
    ...   _, perturbations = nnx.capture(model, nnx.Perturbation)(2.0)
    ...   def loss(perturbations, x):
    ...     return nnx.capture(model, init=perturbations)(x)
    ...   grads = jax.grad(loss)(perturbations, 2.0)
    >>> grads['x'].get_value()  # d(3 x^2)/dx at x = 2
    Array(12., dtype=float32, weak_type=True)

  Args:
    name: the name of the perturbation in this module.
    value: a pytree of floating-point arrays; use the returned value.
    variable_type: the :class:`Variable` type of the perturbation.

  Returns:
    ``value`` plus its perturbation.
  """
  variable_type = _as_variable_type(variable_type)
  if _has_legacy_captures(self):
    return _LEGACY_PERTURB(self, name, value, variable_type)
  target = _resolve(self, variable_type)
  if target is None:
    with _explain_unreachable(self, 'perturb'):
      return _deprecated_perturb(self, name, value, variable_type)
  frame, path, accepted = target
  if not accepted:
    return value
  sow_name = _sow_name(path, name)
  frame.register(
      sow_name,
      _SiteInfo(path, name, variable_type, 'perturb', tuple_reduce,
                tuple_init),
  )
  # A zero perturbation, sown: the capture returns it, and a capture with
  # `init` plants the given perturbation there (see `_InitPlanter`), so it
  # follows the value through every transform as the value does: per member
  # under nnx.vmap, per iteration (stacked) under nnx.scan.
  zeros = jax.tree.map(jnp.zeros_like, value)
  perturbation = primitive.sow(zeros, name=sow_name, tag=variable_type)
  _renew_scope()
  return perturbation + value


def _deprecated_perturb(self, name, value, variable_type):
  """Flax 0.12.8's ``Module.perturb`` outside of any capture."""
  if hasattr(self, name):
    variable = getattr(self, name)
    if not isinstance(variable, variable_type):
      raise ValueError(
          f"Expected '{name}' to be of type '{variable_type.__name__}', "
          f"got '{type(variable).__name__}'"
      )
    perturbation = variable.get_value()
  else:
    perturbation = jax.tree.map(jnp.zeros_like, value)
    setattr(self, name, variable_type(perturbation))
  warnings.warn(
      _PERTURB_DEPRECATED,
      DeprecationWarning,
      stacklevel=3,
  )
  return perturbation + value


# ---------------------------------------------------------------------------
# method_outputs without touching any class
# ---------------------------------------------------------------------------

_RETURN_OPCODES = frozenset(
    dis.opmap[op] for op in ('RETURN_VALUE', 'RETURN_CONST') if op in dis.opmap
)
_NOT_PLAIN = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
)


_NO_VALUE = object()


@dataclasses.dataclass(frozen=True)
class _Method:
  """A callable class attribute legacy ``method_outputs`` wraps.

  Attributes:
    name: its name in the class.
    attr: the attribute: a function (which a decorator may have returned), or
      a callable object that binds like a method (``nnx.jit``'s), whose
      ``__call__`` receives the module after the object itself.
    module_arg: the position, in the frame of the code that runs first, of
      the module the method is called on.
  """

  name: str
  attr: tp.Any
  module_arg: int

  def runs_in(self, code: types.CodeType, local: dict[str, tp.Any]) -> bool:
    """Whether a frame of ``code`` with locals ``local`` is a call of it.

    Functions wrapped by one decorator (with ``functools.wraps``, or
    ``nnx.remat``) share its wrapper's code: each has its own closure. A
    callable object shares its type's ``__call__``: it is that call's first
    argument.
    """
    if self.module_arg:
      return _positional(code, local, 0) is self.attr
    for name, cell in zip(code.co_freevars, self.attr.__closure__ or ()):
      try:
        if local.get(name, _NO_VALUE) is not cell.cell_contents:
          return False
      except ValueError:  # an empty cell
        return False
    return True


def _positional(code: types.CodeType, local, index: int) -> tp.Any:
  """The ``index``-th positional argument of a frame, also from ``*args``."""
  if index < code.co_argcount:
    return local.get(code.co_varnames[index], _NO_VALUE)
  if code.co_flags & inspect.CO_VARARGS:
    rest = local.get(
        code.co_varnames[code.co_argcount + code.co_kwonlyargcount], ()
    )
    index -= code.co_argcount
    if isinstance(rest, tuple) and index < len(rest):
      return rest[index]
  return _NO_VALUE


def _takes_positional(code: types.CodeType, index: int) -> bool:
  return code.co_argcount > index or bool(code.co_flags & inspect.CO_VARARGS)


def _method_entries(
    modules: tp.Iterable[Module],
) -> dict[types.CodeType, list[_Method]]:
  """The methods legacy ``method_outputs`` wraps, by the code they run first.

  Those are the public callables and ``__call__`` defined in the class of a
  captured module itself (not inherited ones): functions, also decorated
  ones (a decorator's wrapper, ``nnx.remat``), and objects that bind like
  methods (``nnx.jit``). Legacy wraps them in the class, so a call through
  the class attribute is sown under its name; here the code that such a
  call runs first is watched instead, and several methods may share it.
  Nested classes, static and class methods and properties are left out
  (legacy wrapping breaks them).
  """
  entries: dict[types.CodeType, list[_Method]] = {}
  for cls in dict.fromkeys(type(m) for m in modules):
    for name, attr in vars(cls).items():
      if name.startswith('_') and name != '__call__':
        continue
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
        continue
      if code.co_flags & _NOT_PLAIN or not _takes_positional(code,
                                                             module_arg):
        continue
      methods = entries.setdefault(code, [])
      if all(m.attr is not attr for m in methods):  # an alias: first name
        methods.append(_Method(name, attr, module_arg))
  return entries


@dataclasses.dataclass
class _MethodOutputs:
  """A per-thread profile hook that sows the result of captured methods."""

  frame: _Frame
  entries: dict[types.CodeType, list[_Method]]

  def __call__(self, py_frame, event, arg):
    if event != 'return':
      return
    code = py_frame.f_code
    methods = self.entries.get(code)
    if methods is None:
      return
    if code.co_code[py_frame.f_lasti] not in _RETURN_OPCODES:
      return  # the method raised
    local = py_frame.f_locals
    for method in methods:
      if method.runs_in(code, local):
        break
    else:
      return  # the shared code, run for something else
    module = _positional(code, local, method.module_arg)
    if not isinstance(module, Module) or not _is_sowable(arg):
      return
    if self.frame.path_of(module) is None:
      return
    sow(module, self.frame.method_outputs, method.name, arg)


# ---------------------------------------------------------------------------
# capture
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _FrameSelection(Selection):
  """Selects exactly the (name, tag) sites a frame registered."""

  sites: frozenset = frozenset()

  def matches(self, params: dict[str, tp.Any]) -> bool:
    return (params['name'], params['tag']) in self.sites


def _flat_init(init) -> list[tuple[PathParts, str, type, tp.Any]]:
  """``init``'s entries as ``(module path, name, type, value)``."""
  if init is None:
    return []
  entries = []
  for path, variable in statelib.to_flat_state(init):
    if not isinstance(variable, (Variable, variablelib.HijaxVariable)):
      continue
    entries.append(
        (tuple(path[:-1]), path[-1], variable.var_type, variable.get_value())
    )
  return entries


def _module_paths(root: tp.Any) -> list[tuple[PathParts, tp.Any]]:
  """``(path, module)`` for every module of ``root``, first path of each."""
  seen = set()
  out = []
  try:
    modules = list(module_lib.iter_modules(root))
  except Exception:  # pylint: disable=broad-except
    # Not a graph node: like legacy, nothing is captured by path.
    return []
  for path, module in modules:
    if id(module) not in seen:
      seen.add(id(module))
      out.append((tuple(path), module))
  return out


# ---------------------------------------------------------------------------
# NumPy scalars read from outside the arguments
# ---------------------------------------------------------------------------

# JAX inlines a NumPy scalar or 0-d array that a traced function reads as a
# literal of the jaxpr, not as one of its constants, so `_Call._store` cannot
# see that the function read it from a global or a closure; a reused trace
# would keep the value it had when traced. So before tracing, the closure
# cells and globals the code of the call can read are scanned for such
# values, and the trace is reused only while each still holds the same value.

# Top-level packages whose functions read no user value from their globals
# (and Python's own): they are only followed to the functions they wrap.
_LIBRARY_PACKAGES = frozenset({
    'chex', 'flax', 'jax', 'jaxlib', 'ml_dtypes', 'numpy', 'optax', 'orbax',
    'scipy', *sys.stdlib_module_names,
})
# Enough for any real model; bounds the scan of a pathological namespace.
_MAX_SCANNED = 4096


def _is_numpy_scalar(value: tp.Any) -> bool:
  return isinstance(value, np.generic) or (
      isinstance(value, np.ndarray) and value.ndim == 0
  )


def _fingerprint(value: tp.Any) -> tp.Hashable:
  """What a guard compares: the type and the exact bits of the value."""
  if not _is_numpy_scalar(value):
    return None
  array = np.asarray(value)
  return (type(value), array.dtype, array.tobytes())


@dataclasses.dataclass(frozen=True)
class _Guard:
  """A global (``namespace[name]``) or a closure cell (``name`` is None)
  holding a NumPy scalar when the call was traced."""

  namespace: tp.Any  # a dict or a cell
  name: str | None
  fingerprint: tp.Hashable

  def holds(self) -> bool:
    if self.name is None:
      try:
        value = self.namespace.cell_contents
      except ValueError:  # the cell was emptied
        return False
    else:
      value = self.namespace.get(self.name, _NO_VALUE)
    return _fingerprint(value) == self.fingerprint


def _is_library(obj: tp.Any) -> bool:
  if isinstance(obj, types.ModuleType):
    module = obj.__name__
  else:
    module = getattr(obj, '__module__', None)
  if not isinstance(module, str):
    return False
  return module.partition('.')[0] in _LIBRARY_PACKAGES


def _code_names(code: types.CodeType) -> set[str]:
  """The names ``code`` (and the functions defined in it) may load."""
  names = set(code.co_names)
  for const in code.co_consts:
    if isinstance(const, types.CodeType):
      names |= _code_names(const)
  return names


def _numpy_guards(roots: tp.Iterable[tp.Any]) -> tuple[_Guard, ...]:
  """Guards for the NumPy scalars the code of ``roots`` reads from outside.

  Follows, from ``roots`` (functions, methods, classes), the closure cells
  and the globals their code names (also a global module's attributes, for
  ``config.SCALE``), into the functions and classes found there and the
  functions decorators wrap. Values reached through other objects'
  attributes or containers are not followed.
  """
  guards: dict[tuple[int, tp.Any], _Guard] = {}
  seen: set[int] = set()
  todo = list(roots)

  def watch(namespace, name, value):
    if _is_numpy_scalar(value):
      key = (id(namespace), name)
      if key not in guards:
        guards[key] = _Guard(namespace, name, _fingerprint(value))
    elif callable(value) and not isinstance(value, Module):
      todo.append(value)

  while todo and len(seen) < _MAX_SCANNED:
    obj = todo.pop()
    if id(obj) in seen:
      continue
    seen.add(id(obj))
    if isinstance(obj, types.MethodType):
      todo.append(obj.__func__)
    elif isinstance(obj, functools.partial):
      todo.append(obj.func)
    elif isinstance(obj, type):
      for klass in obj.__mro__:
        if _is_library(klass):
          continue
        for attr in vars(klass).values():
          if isinstance(attr, (staticmethod, classmethod)):
            attr = attr.__func__
          elif isinstance(attr, property):
            todo.extend(f for f in (attr.fget, attr.fset) if f is not None)
            continue
          if callable(attr):
            todo.append(attr)
    elif isinstance(obj, types.FunctionType):
      library = _is_library(obj)
      for cell in obj.__closure__ or ():
        try:
          value = cell.cell_contents
        except ValueError:  # not yet bound
          continue
        if not library:
          watch(cell, None, value)
        elif callable(value):
          todo.append(value)  # the function a library decorator wraps
      if not library:
        namespace = obj.__globals__
        names = _code_names(obj.__code__)
        for name in names:
          value = namespace.get(name, _NO_VALUE)
          if isinstance(value, types.ModuleType):
            if not _is_library(value):
              attributes = vars(value)
              for attribute in names:
                if attribute in attributes:
                  watch(attributes, attribute, attributes[attribute])
          elif value is not _NO_VALUE:
            watch(namespace, name, value)
    if not isinstance(obj, type):
      try:
        wrapped = getattr(obj, '__wrapped__', None)
      except Exception:  # pylint: disable=broad-except
        wrapped = None
      if wrapped is not None:
        todo.append(wrapped)
  return tuple(guards.values())


@dataclasses.dataclass(frozen=True)
class _Trace:
  """What one trace of a compat capture leaves behind; no tracers.

  Everything :class:`_Call` needs to evaluate the call again on other
  arguments of the same structure: the staged jaxpr, how to rebuild its
  outputs, the sow sites the frame registered while it was traced, and the
  guards that must hold for it to be reused.
  """

  jaxpr: tp.Any  # core.ClosedJaxpr
  outcome: tp.Any  # tracing's outcome of the trace
  module_paths: tuple[PathParts, ...]
  sites: dict[tuple[primitive.Name, type], _SiteInfo]
  guards: tuple[_Guard, ...] = ()


class _ModuleCall:
  """The key of the traces of ``capture(module)``: ``module(*args)``, whose
  code is determined by the module's graph definition."""


# Per function (weakly held): traces by call structure. An eager capture is
# traced like `nnx.jit`: once per structure of its arguments, then only
# evaluated.
_TRACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_TRACES_LOCK = threading.Lock()
_MAX_TRACES_PER_FUNCTION = 64


class _HashedKey:
  """A key hashed once: hashing a graph definition is not cheap, and a key is
  both looked up and, on a miss, stored.

  A key holding unhashable values (a module attribute ``features=[16, 16]``,
  a dict, a dataclass) is frozen by value (:func:`tracing.freeze`), as
  ``nnx.jit`` compares graph definitions: otherwise every call would trace
  again, and re-trace and recompile every ``jit`` inside.
  """

  __slots__ = ('key', 'hash', 'raw')

  def __init__(self, key: tp.Hashable):
    self.raw = None
    try:
      self.hash = hash(key)
    except TypeError:
      self.raw = key
      key = tracing.freeze(key)
      self.hash = hash(key)
    self.key = key

  def stored(self) -> _HashedKey:
    """This key as it is kept: a snapshot, not a view of the call's values.

    Raises:
      tracing.Unkeyable: the key holds a value that cannot be snapshotted.
    """
    if self.raw is None:
      return self
    stored = _HashedKey.__new__(_HashedKey)
    stored.raw = None
    stored.key = tracing.freeze(self.raw, snapshot=True)
    stored.hash = hash(stored.key)
    if stored != self:
      raise tracing.Unkeyable('the snapshot of the key differs from it')
    return stored

  def __hash__(self) -> int:
    return self.hash

  def __eq__(self, other) -> bool:
    return (
        isinstance(other, _HashedKey)
        and self.hash == other.hash
        and self.key == other.key
    )


class _Call:
  """One call of a compat ``capture``: stage, interpret, build the States."""

  def __init__(self, var_types, init, method_outputs, call, fn_key, code):
    self.var_types = var_types
    self.init = init
    self.method_outputs = method_outputs
    self.call = call
    self.fn_key = fn_key
    # The function `call` runs; None for a module, whose class is found in
    # the graph definition.
    self.code = code

  def __call__(self, root, args, kwargs):
    init_entries = _flat_init(self.init)
    init_types: dict[PathParts, set] = {}
    for path, _, var_type, _ in init_entries:
      init_types.setdefault(path, set()).add(var_type)
    frame = _Frame(self.var_types, init_types, self.method_outputs)
    # The init values are not traced: perturbations are planted when the
    # staged program is evaluated (see `_InitPlanter`), accumulators are
    # applied to the records after it.
    prepared = tracing.Prepared(self._traced(frame), (root, args, kwargs), {})
    key = self._cache_key(prepared, init_entries)
    trace = self._lookup(key)
    if trace is not None and not all(g.holds() for g in trace.guards):
      trace = None  # a NumPy scalar it read has changed
    if trace is None:
      # Scanned before tracing: a function that changes a global it reads
      # is then traced again on the next call, which reads the new value.
      guards = () if key is None else _numpy_guards(
          self._code_roots(prepared)
      )
      with _scope(next(_scope_ids)):
        jaxpr, outcome = prepared.trace()
      trace = _Trace(
          jaxpr, outcome, tuple(frame.module_paths), dict(frame.sites),
          guards,
      )
      self._store(key, trace)
    selection = _FrameSelection(sites=frozenset(trace.sites))
    try:
      records = _interpret(
          trace.jaxpr, prepared.inputs, selection,
          _init_perturbations(trace, init_entries),
      )
    except NotImplementedError as e:
      e.add_note(_MODES_NOTE)
      raise
    out = prepared.finish(trace.outcome, records.pop('out'))
    states = self._states(trace, init_entries, records['records'])
    if not self.var_types:
      return out
    if len(self.var_types) == 1:
      return out, states[0]
    return (out, *states)

  def _traced(self, frame):
    """The function staged: ``call`` on the copies, inside ``frame``."""

    def traced(root, args, kwargs):
      # Runs on copies, inside the trace.
      modules = _module_paths(root)
      frame.module_paths = [path for path, _ in modules]
      frame.objects = {id(m): (m, path) for path, m in modules}
      for path, m in modules:
        token = _mark(m)
        if token is not None:
          frame.tokens[id(token)] = (token, path)
      hook = None
      if self.method_outputs is not None:
        hook = _MethodOutputs(frame, _method_entries(m for _, m in modules))
      _FRAMES.stack.append(frame)
      previous_profile = sys.getprofile()
      try:
        if hook is not None:
          sys.setprofile(hook)
        return self.call(root, *args, **kwargs)
      finally:
        if hook is not None:
          sys.setprofile(previous_profile)
        popped = _FRAMES.stack.pop()
        assert popped is frame
        # Drop every reference to the copies and their tracers.
        frame.objects = {}
        frame.tokens = {}

    return traced

  def _code_roots(self, prepared) -> list[tp.Any]:
    """The code the call runs: the function and the graph nodes' classes."""
    roots = [] if self.code is None else [self.code]
    for node in prepared.graphdef.nodes:
      if isinstance(node, graphlib.NodeDef) and isinstance(node.type, type):
        roots.append(node.type)
    return roots

  def _cache_key(self, prepared, init_entries) -> _HashedKey | None:
    """The key of this call's trace, or ``None`` if it is traced anew.

    Only a top-level eager call, outside any other capture, reuses a trace:
    under a JAX transform the enclosing trace is what gets cached, and an
    enclosing capture's frames take part in resolving module paths.
    """
    if _FRAMES.stack or not jax_core.trace_ctx.is_top_level():
      return None
    structure = prepared.cache_key()
    if structure is None or self.fn_key is None:
      return None
    key = (
        self.var_types,
        self.method_outputs,
        tuple((path, name, var_type) for path, name, var_type, _
              in init_entries),
        jax_config.trace_context(),
        structure,
    )
    try:
      return _HashedKey(key)
    except TypeError:  # a value whose __hash__ fails even once frozen
      return None

  def _lookup(self, key) -> _Trace | None:
    if key is None:
      return None
    with _TRACES_LOCK:
      return _TRACES.get(self.fn_key, {}).get(key)

  def _store(self, key, trace: _Trace) -> None:
    if key is None or trace.jaxpr.consts:
      # Arrays the function read from outside its arguments (the weights of
      # a module it closes over, a global): a direct call would read their
      # current values, so the trace is not reused.
      return
    try:
      key = key.stored()
    except tracing.Unkeyable:
      return
    with _TRACES_LOCK:
      traces = _TRACES.setdefault(self.fn_key, {})
      if len(traces) >= _MAX_TRACES_PER_FUNCTION:
        traces.clear()
      traces[key] = trace

  def _states(self, trace, init_entries, records) -> list[State]:
    # A name may be sown with several types (a perturbation and a sow).
    values = group_records(records, key=lambda site: (site.name, site.tag))
    # Per module path and type: name -> value, as legacy __captures__.
    slots: dict[tuple[PathParts, type], dict[str, tp.Any]] = {}
    module_paths = set(trace.module_paths)
    for path, name, var_type, value in init_entries:
      if path in module_paths:
        slots.setdefault((path, var_type), {})[name] = value
    for key, info in trace.sites.items():
      if key not in values:
        continue
      slot = slots.setdefault((info.path, info.var_type), {})
      if info.kind == 'perturb':
        slot.setdefault(info.name, values[key][0])
        continue
      accumulated = (
          slot[info.name] if info.name in slot else info.init_fn()
      )
      for value in values[key]:
        accumulated = info.reduce_fn(accumulated, value)
      slot[info.name] = accumulated
    states = []
    with variablelib.var_defaults(hijax=False, ref=False):
      for var_type in self.var_types:
        flat = []
        for path in trace.module_paths:
          for name, value in slots.get((path, var_type), {}).items():
            flat.append(((*path, name), var_type(value)))
        states.append(statelib.from_flat_state(flat))
    return states


_MODES_NOTE = (
    'nnx.capture: Module.sow with an appending reduce_fn (the default) is'
    " sown with mode='append'; with a reduce_fn that keeps the last value"
    ' (capture_compat.keep_last, or lambda previous, value: value) it is sown'
    " with mode='clobber', which a while loop (nnx.while_loop, nnx.fori_loop"
    ' with traced bounds) accepts if the same name was sown before the loop.'
)


def _init_perturbations(trace, init_entries) -> dict[tuple, tp.Any]:
  """``init``'s values for the perturbation sites of ``trace``, by
  ``(sow name, Variable type)``."""
  values = {
      (path, name, var_type): value
      for path, name, var_type, value in init_entries
  }
  planted = {}
  for key, info in trace.sites.items():
    if info.kind != 'perturb':
      continue
    value = values.get((info.path, info.name, info.var_type), _NO_VALUE)
    if value is not _NO_VALUE:
      planted[key] = value
  return planted


class _InitPlanter:
  """Plants ``init``'s perturbations: each at every execution of its site.

  As in Flax 0.12.8, where a perturbation is one Variable of its module: every
  call of ``Module.perturb`` with that name adds the same value. Seen from
  the captured function, the site's value carries the axes of the transforms
  around it (the members of an ``nnx.vmap``, the steps of an ``nnx.scan``),
  as the State the capture returns does.
  """

  def __init__(self, values: dict[tuple, tp.Any]):
    self.values = values

  def take(self, site: interpreter.Site) -> list[tp.Any]:
    return interpreter.check_entry(
        site,
        self.values[(site.name, site.tag)],
        where=f'nnx.capture: the init perturbation {site.name!r}',
        site_has='Module.perturb there (as a capture without init returns'
        ' it) has',
    )


def _interpret(jaxpr, inputs, selection, planted) -> dict[str, tp.Any]:
  request = interpreter.Request(
      selection,
      planted=_FrameSelection(sites=frozenset(planted)) if planted else None,
  )
  scope = interpreter.Scope(request, _InitPlanter(planted) if planted else None)
  out_flat = interpreter.evaluate(jaxpr.jaxpr, jaxpr.consts, inputs, scope)
  return {'out': out_flat, 'records': scope.records}


P = tp.ParamSpec('P')
R = tp.TypeVar('R')


def capture(
    fn: tp.Callable[P, R] | type[Variable],
    *var_types: type[Variable],
    init: State | None = None,
    method_outputs: type[Variable] | None = None,
) -> tp.Any:
  """Flax 0.12.8's ``nnx.capture``, on the sow transform.

  Wraps ``fn`` to also return the values sown with ``Module.sow`` or
  ``Module.perturb`` by the captured module and its submodules. ``fn`` is a
  function whose first argument is the module, a bound method of a module, or
  a module (its ``__call__``); with a :class:`Variable` type first,
  ``capture`` returns a decorator. The wrapped function returns ``out``
  alone without ``var_types``, ``(out, state)`` for one type and
  ``(out, *states)`` for several: one :class:`State` per type, nested by
  module path, each value wrapped in its Variable type.

  Unlike Flax 0.12.8's, the modules are never modified: the call runs on
  copies, as under ``nnx.jit``, and only their Variable updates (batch
  statistics, RNG counters...) are written back. So it is thread-safe, leaves
  nothing behind on error, nests, and works inside and around every NNX
  transform and with Hijax or reference Variables. Like ``nnx.jit``, an eager
  call is traced once per call structure (function, types, graph definition
  and non-array arguments by value, array shapes and dtypes); later calls
  only evaluate the staged program, op by op, on their own modules and
  inputs. It is traced again if a NumPy scalar it reads from a global or a
  closure has changed (JAX would keep the traced value).

  Example::

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from flax.nnx import capture_compat
    >>> class Model(nnx.Module):
    ...   def __init__(self, rngs):
    ...     self.linear = nnx.Linear(2, 3, rngs=rngs)
    ...   def features(self, x):
    ...     return self.linear(x)
    ...   def __call__(self, x):
    ...     h = self.features(x)
    ...     self.sow(nnx.Intermediate, 'h', h)
    ...     return h.sum()
    >>> model = Model(nnx.Rngs(0))
    >>> with capture_compat.install():
    ...   @nnx.capture(nnx.Intermediate)
    ...   def forward(model, x):
    ...     return model(x)
    ...   out, state = forward(model, jnp.ones(2))
    ...   _, outputs = nnx.capture(
    ...       model, nnx.Intermediate, method_outputs=nnx.Intermediate
    ...   )(jnp.ones(2))
    >>> state['h'].get_value()[0].shape
    (3,)
    >>> sorted(outputs)
    ['__call__', 'features', 'h', 'linear']

  Args:
    fn: the function, bound method or module to wrap; or the first Variable
      type, for the decorator form.
    *var_types: the :class:`Variable` types to return, one State each.
    init: a State of initial values by module path: the perturbations for
      ``Module.perturb`` (and initial accumulators for ``Module.sow``); its
      types are collected too, but only ``var_types`` are returned.
    method_outputs: if given, the output of every public method (and
      ``__call__``) of the captured modules' classes is sown under the
      method's name with this Variable type.

  Returns:
    The wrapped function, or a decorator.
  """
  if isinstance(fn, type) and issubclass(fn, Variable):
    all_types = (fn, *var_types)

    def decorator(actual_fn):
      return capture(
          actual_fn, *all_types, init=init, method_outputs=method_outputs
      )

    return decorator

  if inspect.ismethod(fn) and isinstance(fn.__self__, Module):
    bound_module, func = fn.__self__, fn.__func__
    call = lambda root, *args, **kwargs: func(root, *args, **kwargs)
    fn_key = func
  elif isinstance(fn, Module):
    bound_module = fn
    call = lambda root, *args, **kwargs: root(*args, **kwargs)
    fn_key = _ModuleCall
  else:
    bound_module = None
    call = lambda root, *args, **kwargs: fn(root, *args, **kwargs)
    fn_key = fn
  try:
    weakref.ref(fn_key)
  except TypeError:
    fn_key = None  # traced on every call
  run = _Call(
      tuple(var_types), init, method_outputs, call, fn_key,
      None if fn_key is _ModuleCall else fn,
  )

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    _check_installed()
    if bound_module is not None:
      return run(bound_module, args, kwargs)
    if not args:
      raise TypeError(
          'capture: the wrapped function takes the module as its first'
          ' positional argument, but it was called without positional'
          ' arguments.'
      )
    return run(args[0], args[1:], kwargs)

  return wrapper


def _check_installed():
  if Module.sow is not sow or Module.perturb is not perturb:
    raise RuntimeError(
        'flax.nnx.capture_compat.capture needs Module.sow and Module.perturb'
        ' to be routed through it: call flax.nnx.capture_compat.install()'
        ' first (or use it as a context manager).'
    )


def legacy(
    fn: tp.Callable[P, R] | type[Variable],
    *var_types: type[Variable],
    init: State | None = None,
    method_outputs: type[Variable] | None = None,
) -> tp.Any:
  """Flax 0.12.8's own ``nnx.capture``, reachable after :func:`install`.

  Same signature and behavior as before installation (it mutates modules and
  their classes while it runs); kept to compare with :func:`capture`.
  """
  if isinstance(fn, type) and issubclass(fn, Variable):
    all_types = (fn, *var_types)
    return lambda actual_fn: _LEGACY_CAPTURE(
        actual_fn, *all_types, init=init, method_outputs=method_outputs
    )
  return _LEGACY_CAPTURE(
      fn, *var_types, init=init, method_outputs=method_outputs
  )


# ---------------------------------------------------------------------------
# install / uninstall
# ---------------------------------------------------------------------------

_INSTALL_LOCK = threading.Lock()


def is_installed() -> bool:
  """Whether :func:`install` is in effect."""
  return Module.sow is sow


def _set(installed: bool) -> None:
  with _INSTALL_LOCK:
    new_capture = capture if installed else _LEGACY_CAPTURE
    for namespace in _CAPTURE_NAMESPACES:
      namespace.capture = new_capture
    Module.sow = sow if installed else _LEGACY_SOW
    Module.perturb = perturb if installed else _LEGACY_PERTURB


class _Restore:
  """Returned by :func:`install`/:func:`uninstall`; as a context manager,
  restores the previous state on exit."""

  def __init__(self, previous: bool):
    self._previous = previous

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    _set(self._previous)


def install() -> _Restore:
  """Routes ``nnx.capture``, ``Module.sow`` and ``Module.perturb`` here.

  Idempotent. Used as a context manager (``with install(): ...``), restores
  the previous state on exit.
  """
  previous = is_installed()
  _set(True)
  return _Restore(previous)


def uninstall() -> _Restore:
  """Restores Flax 0.12.8's ``nnx.capture``, ``Module.sow``, ``perturb``.

  Idempotent. Used as a context manager, restores the previous state on exit.
  """
  previous = is_installed()
  _set(False)
  return _Restore(previous)
