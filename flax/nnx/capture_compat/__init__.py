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
  (:func:`flax.nnx.sow.tracing.staged`), so modules are never mutated, not even
  structurally or transiently, and threads never see each other's values;
* inside it, ``Module.sow(T, 'n', v)`` is the functional
  ``sow(v, name=(*path, 'n'), tag=T)``, where ``path`` is the module's path
  from the captured module as :func:`nnx.iter_modules` gives it, and
  ``Module.perturb`` likewise;
* ``reduce_fn``/``init_fn`` are applied after the call, in call order, to the
  collected values.

In Flax itself, ``nnx.capture``, ``Module.sow`` and ``Module.perturb`` are
these implementations. On a released Flax (the overlay), :func:`install`
points ``nnx.capture``, ``flax.nnx.module.capture``, ``Module.sow`` and
``Module.perturb`` at them, and :func:`uninstall` points them back; code
written for Flax 0.12.8 runs unchanged.

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

import functools
import inspect
import sys
import threading
import types
import typing as tp

from flax.nnx import module as module_lib
from flax.nnx import statelib
from flax.nnx import variablelib
from flax.nnx.capture_compat import call as call_lib
from flax.nnx.capture_compat import replaced
from flax.nnx.capture_compat.module_methods import keep_last
from flax.nnx.capture_compat.module_methods import perturb
from flax.nnx.capture_compat.module_methods import sow

Module = module_lib.Module
Variable = variablelib.Variable
State = statelib.State

__all__ = [
    'capture', 'delegates', 'install', 'is_installed', 'keep_last',
    'perturb', 'sow', 'uninstall',
]


P = tp.ParamSpec('P')
R = tp.TypeVar('R')


@tp.overload
def capture(
    fn: tp.Callable[P, R],
    *var_types: type[Variable],
    init: State | None = None,
    method_outputs: type[Variable] | None = None,
) -> tp.Callable[P, tuple[R, State]]:
  ...


@tp.overload
def capture(
    fn: type[Variable],
    *var_types: type[Variable],
    init: State | None = None,
    method_outputs: type[Variable] | None = None,
) -> tp.Callable[[tp.Callable[P, R]], tp.Callable[P, tuple[R, State]]]:
  ...


def capture(
    fn: tp.Callable[P, R] | type[Variable],
    *var_types: type[Variable],
    init: State | None = None,
    method_outputs: type[Variable] | None = None,
) -> (
    tp.Callable[P, tuple[R, State]]
    | tp.Callable[[tp.Callable[P, R]], tp.Callable[P, tuple[R, State]]]
):
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

  bound_module: Module | None
  call: tp.Callable[..., tp.Any]
  if inspect.ismethod(fn) and isinstance(fn.__self__, Module):
    bound_module, func = fn.__self__, fn.__func__
    call = lambda root, *args, **kwargs: func(root, *args, **kwargs)
  elif isinstance(fn, Module):
    bound_module = fn
    call = lambda root, *args, **kwargs: root(*args, **kwargs)
  else:
    bound_module = None
    # Not a Variable type: the decorator form returned above.
    function = tp.cast(tp.Callable[..., tp.Any], fn)
    call = lambda root, *args, **kwargs: function(root, *args, **kwargs)
  run = call_lib.Call(tuple(var_types), init, method_outputs, call)

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
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


# ---------------------------------------------------------------------------
# install / uninstall: the overlay on a released Flax
# ---------------------------------------------------------------------------

_INSTALL_LOCK = threading.Lock()
_METHODS = {'sow': sow, 'perturb': perturb}


def is_installed() -> bool:
  """Whether Flax's ``nnx.capture`` is this package's :func:`capture`."""
  return module_lib.capture is capture


def delegates(fn: tp.Callable[..., tp.Any]) -> bool:
  """Whether ``fn``, an ``nnx.capture``, runs on the sow transform.

  True for this package's :func:`capture`, and for a function that hands its
  calls to it: Flax's own ``nnx.capture`` where Flax carries this package
  (its ``module.py`` then calls ``capture_compat``). False for the
  ``nnx.capture`` of a Flax release without it, such as 0.12.8's.

  >>> from flax.nnx import capture_compat
  >>> capture_compat.delegates(capture_compat.capture)
  True
  """
  if fn is capture:
    return True
  # A function that refers to this package by name calls into it: Flax's
  # `capture` has no other reason to name it.
  code = getattr(fn, '__code__', None)
  return code is not None and 'capture_compat' in code.co_names


def _namespaces() -> tuple[types.ModuleType, ...]:
  """The modules that export ``capture``: looked up when (un)installing, as
  this package is imported while ``flax.nnx`` itself is."""
  return (module_lib, sys.modules['flax.nnx'])


def _set(installed: bool) -> None:
  with _INSTALL_LOCK:
    if installed == is_installed():
      return
    if installed:
      replaced.ORIGINALS.update(
          capture=module_lib.capture,
          sow=Module.sow,
          perturb=Module.perturb,
      )
      targets = {'capture': capture, **_METHODS}
    else:
      targets = dict(replaced.ORIGINALS)
    for namespace in _namespaces():
      namespace.capture = targets['capture']
    # The overlay's whole purpose: Flax's methods, pointed here (setattr:
    # type checkers rightly refuse assigning to a method).
    setattr(Module, 'sow', targets['sow'])
    setattr(Module, 'perturb', targets['perturb'])


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
  """Points Flax's ``nnx.capture``, ``Module.sow`` and ``Module.perturb``
  here (the overlay on a released Flax).

  Idempotent. Used as a context manager (``with install(): ...``), restores
  the previous state on exit.
  """
  previous = is_installed()
  _set(True)
  return _Restore(previous)


def uninstall() -> _Restore:
  """Points them back at what :func:`install` replaced.

  Idempotent. Used as a context manager, restores the previous state on exit.
  """
  previous = is_installed()
  _set(False)
  return _Restore(previous)
