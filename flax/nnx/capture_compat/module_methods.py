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
"""``Module.sow`` and ``Module.perturb`` on the sow transform.

Inside a compat :func:`~flax.nnx.capture_compat.capture`, they are functional
sows named by the module's path (see :mod:`.frames`); outside any capture,
they behave exactly as in Flax 0.12.8 (a deprecated Variable attribute).
"""

from __future__ import annotations

import contextlib
import inspect
import typing as tp
import warnings

import jax
import jax.numpy as jnp

import flax.errors
from flax.nnx import module as module_lib
from flax.nnx import variablelib
from flax.nnx.capture_compat import frames
from flax.nnx.capture_compat import replaced
from flax.nnx.sow.lift import module_paths as paths_lib
from flax.nnx.sow.transform import deferred as deferred_lib
from flax.nnx.sow.transform import primitive

Module = module_lib.Module
Variable = variablelib.Variable
tuple_reduce = module_lib.tuple_reduce
tuple_init = module_lib.tuple_init


# ---------------------------------------------------------------------------
# Module.sow and Module.perturb
# ---------------------------------------------------------------------------


def _as_variable_type(variable_type) -> type[Variable]:
  if isinstance(variable_type, str):
    return variablelib.variable_type_from_name(
        variable_type, allow_register=True
    )
  return variable_type


def _replaced_method(module: Module, name: str) -> tp.Callable | None:
  """Flax 0.12.8's ``Module.<name>`` if its own ``nnx.capture`` runs on
  ``module``.

  Only with the overlay on a released Flax: a reference to Flax's own
  ``nnx.capture`` taken before :func:`install` still installs
  ``__captures__`` on every module and expects its own ``Module.sow``.
  """
  if '__captures__' not in vars(module):
    return None
  return replaced.original(name)


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
  in call order. Inside a functional ``flax.nnx.sow`` ``capture``, ``plant``
  or ``perturb`` staging, sows ``value`` under ``(*path, name)`` with
  ``path`` from the staged call's root (see
  :mod:`flax.nnx.sow.lift.module_paths`) and returns ``True``; ``reduce_fn`` and
  ``init_fn`` do not apply there: every value is returned, in call order.
  Outside any capture, behaves exactly as in Flax 0.12.8: stores the reduced
  value in a ``variable_type`` attribute named ``name`` and warns that this
  is deprecated.

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
  flax_sow = _replaced_method(self, 'sow')
  if flax_sow is not None:
    return flax_sow(self, variable_type, name, value, reduce_fn, init_fn)
  target = frames.resolve(self, variable_type)
  if target is None:
    if frames.FRAMES.stack and primitive.is_sowable(value):
      # A copy made inside the call (by nnx.jit, jax.vmap...): named where
      # the program is bound, from its Variables (`paths_lib.deferred_sow`).
      done = paths_lib.deferred_sow(
          self, value, rest=(name,), tag=variable_type,
          mode=sow_mode(reduce_fn),
          detail=paths_lib.SowDetail(
              variable_type, _deferred_site,
              (name, variable_type, 'sow', reduce_fn, init_fn)),
      )
      if done is not None:
        return _accepting(variable_type)
      paths_lib.refuse_unnamed_copy(self, 'sow', value)
    paths_lib.refuse_unreachable(self, 'sow')
    with _explain_unreachable(self, 'sow'):
      return _deprecated_sow(self, variable_type, name, value, reduce_fn,
                             init_fn)
  frame, path, accepted = target
  if not accepted:
    # Legacy drops it; the sow still reaches an enclosing transform capture.
    if primitive.is_sowable(value):
      primitive.sow(
          value, name=frames.sow_name(path, name), tag=variable_type
      )
    return False
  primitive.sow_with_meta(
      value, name=frames.sow_name(path, name), tag=variable_type,
      mode=sow_mode(reduce_fn),
      meta=_site_info(frame, path, name, variable_type, 'sow', reduce_fn,
                      init_fn),
  )
  return True


def _deferred_site(frame, path, accepted, name, variable_type, kind,
                   reduce_fn, init_fn):
  """The resolution of a deferred ``Module.sow``/``Module.perturb`` whose
  module is at ``path`` in ``frame``: as the direct call makes it there."""
  if not accepted:
    if kind == 'perturb':
      return deferred_lib.DROP  # the value plus nothing
    return frames.sow_name(path, name), None
  return frames.sow_name(path, name), _site_info(
      frame, path, name, variable_type, kind, reduce_fn, init_fn)


def _accepting(variable_type) -> bool:
  """What a deferred ``Module.sow`` returns: whether a running capture
  collects ``variable_type`` (its module's path is not known yet)."""
  return any(frame.accepts_type(variable_type)
             for frame in frames.FRAMES.stack)


def _site_info(frame, *fields) -> frames.SiteInfo | None:
  """What the marker of a sow collected by ``frame`` carries: what
  ``nnx.capture`` needs to make its State entry; nothing for the functional
  transform, which returns every value as it is."""
  if frame.functional:
    return None
  return frames.SiteInfo(frame.id, *fields)


@contextlib.contextmanager
def _explain_unreachable(module: Module, method: str):
  """Explains a failed deprecated-path write inside a capture."""
  try:
    yield
  except flax.errors.TraceContextError as e:
    if frames.FRAMES.stack:
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


def sow_mode(reduce_fn) -> str:
  """The sow mode of a ``reduce_fn``: ``'clobber'`` for :func:`keep_last`.

  Only a keep-last reducer has a meaning inside ``while_loop``, where the
  number of sows is only known at run time. Any other reducer, including a
  lambda that returns its second argument, appends: the reducer is never
  called while tracing, and its code is not inspected, so the mode is asked
  for explicitly by passing :func:`keep_last`.
  """
  return 'clobber' if reduce_fn is keep_last else 'append'


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


# The modules between a caller of `Module.sow` and the warning: this one and,
# in Flax itself, `flax.nnx.module`, whose methods delegate here.
_OWN_MODULES = frozenset({__name__, module_lib.__name__})


def _caller_stacklevel() -> int:
  """The ``stacklevel`` at which the warning names the caller of the method.

  As Flax 0.12.8's own warning does. The number of frames in between
  depends on how the method reaches here: directly where :func:`install`
  made this module's function the method, or through ``Module.sow`` in
  Flax itself.
  """
  frame = inspect.currentframe()
  frame = frame.f_back if frame is not None else None  # the warning's caller
  level = 1
  while (
      frame is not None
      and frame.f_back is not None
      and frame.f_globals.get('__name__') in _OWN_MODULES
  ):
    frame = frame.f_back
    level += 1
  return level


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
      stacklevel=_caller_stacklevel(),
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
  flax_perturb = _replaced_method(self, 'perturb')
  if flax_perturb is not None:
    return flax_perturb(self, name, value, variable_type)
  target = frames.resolve(self, variable_type)
  if target is None:
    if frames.FRAMES.stack and primitive.is_sowable(value):
      zeros = jax.tree.map(jnp.zeros_like, value)
      done = paths_lib.deferred_sow(
          self, zeros, rest=(name,), tag=variable_type, mode='append',
          detail=paths_lib.SowDetail(
              variable_type, _deferred_site,
              (name, variable_type, 'perturb', tuple_reduce, tuple_init)),
      )
      if done is not None:
        perturbation, _ = done
        return perturbation + value
      paths_lib.refuse_unnamed_copy(self, 'perturb', value)
    paths_lib.refuse_unreachable(self, 'perturb')
    with _explain_unreachable(self, 'perturb'):
      return _deprecated_perturb(self, name, value, variable_type)
  frame, path, accepted = target
  if not accepted:
    return value
  info = _site_info(
      frame, path, name, variable_type, 'perturb', tuple_reduce, tuple_init
  )
  # A zero perturbation, sown: the capture returns it, and a capture with
  # `init` plants the given perturbation there (see `_InitPlanter`), so it
  # follows the value through every transform as the value does: per member
  # under nnx.vmap, per iteration (stacked) under nnx.scan.
  zeros = jax.tree.map(jnp.zeros_like, value)
  perturbation = primitive.sow_with_meta(
      zeros, name=frames.sow_name(path, name), tag=variable_type,
      mode='append', meta=info,
  )
  return perturbation + value


# Declared for `legacy_sow_methods`, which tells these from Flax 0.12.8's
# own by identity (also through a `functools.wraps` wrapper).
paths_lib.mark_on_transform(sow)
paths_lib.mark_on_transform(perturb)


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
      stacklevel=_caller_stacklevel(),
  )
  return perturbation + value
