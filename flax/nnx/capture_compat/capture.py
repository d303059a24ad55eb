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
"""``capture``: Flax 0.12.8's ``nnx.capture`` on the sow transform.

The function users call; one call is a :class:`~.call.Call`, which stages or
runs it and builds the States.
"""

from __future__ import annotations

import functools
import inspect
import typing as tp

from flax.nnx import module as module_lib
from flax.nnx import statelib
from flax.nnx import variablelib
from flax.nnx.capture_compat import call as call_lib
from flax.nnx.sow.lift import module_paths

Module = module_lib.Module
Variable = variablelib.Variable
State = statelib.State


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

  Outside any JAX trace the call is eager, as in Flax 0.12.8: ``fn`` runs on
  the caller's modules, its Python on every call, and its Variable updates
  (batch statistics, RNG counters...) are made in place; the sows are
  recorded as they are bound (:mod:`flax.nnx.sow.transform.eager`), and jitted
  functions inside keep their compiled programs. Under a JAX or NNX
  transform it is staged on copies, as under ``nnx.jit``, and only their
  Variable updates are written back. Unlike Flax 0.12.8's, it writes
  nothing onto the modules (no ``__captures__``), so it is thread-safe,
  leaves nothing behind on error, nests, and works inside and around every
  NNX transform and with Hijax or reference Variables.

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


# Declared for `capture_compat.delegates` (see there).
module_paths.mark_on_transform(capture)
