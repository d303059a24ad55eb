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
"""Checks of values known only when a program runs.

How many steps a ``while_loop`` ran is known when its program runs: whether
it ran more than a capture keeps (``max_steps``), or than a plant holds
values for, is checked then. Eagerly the count is concrete and the check
runs at once. Under a trace it runs from the program, as a host callback. A
callback that raises fails its program, and the runtime reports that as a
``jax.errors.JaxRuntimeError`` (``INTERNAL: CpuCallback error ...``) holding
only the text of the exception. So that the caller gets the check's own
exception instead, each failure is kept under a number that the text
carries, and a ``jax.jit`` call whose program holds a check (its effects
say so, at any depth) hands the runtime's error here: the kept exception is
raised in its place (``_jax.set_jit_errors``). JAX records no compiled fast
path for a program with effects, so every call of it is seen.

What runs a program otherwise (a function compiled ahead of time,
``jax.pmap``) raises the runtime's error as it is; its text ends with the
check's message. JAX logs a failed callback (``jax.debug.callback failed``)
before the error is raised.
"""

from __future__ import annotations

import collections
import itertools
import re
import threading
import typing as tp

import jax
import jax.extend.core as jex_core
import numpy as np

from flax.nnx.sow.transform import _jax


class RuntimeCheckEffect(jex_core.Effect):
  """Marks a program that checks values when it runs (see the module)."""

  def __repr__(self):
    return 'RuntimeCheckEffect'


runtime_check_effect = RuntimeCheckEffect()

# A check sits in loops, under custom derivatives and remat, as a sow does.
for _allow_list in (
    _jax.lowerable_effects,
    _jax.control_flow_allowed_effects,
    _jax.custom_derivatives_allowed_effects,
    _jax.remat_allowed_effects,
    _jax.partial_eval_kept_effects,
):
  _allow_list.add_type(RuntimeCheckEffect)

_MARK = 'flax.nnx.sow runtime check #'
_MARKED = re.compile(re.escape(_MARK) + r'(\d+)')
# The failures not yet raised to a caller, by number. A failure whose
# runtime error never reaches `_translate` (a program run otherwise) stays
# until newer ones push it out.
_KEPT = 64
_failures: collections.OrderedDict[int, Exception] = (
    collections.OrderedDict())
_lock = threading.Lock()
_numbers = itertools.count(1)


class _HostCheck:
  """Runs a check on the values the program hands it; a failure is kept,
  and raised again with its number (what the runtime's error will carry)."""

  def __init__(self, check: tp.Callable[..., None]):
    self._check = check

  def __call__(self, *values) -> tuple[()]:
    try:
      self._check(*values)
    except Exception as error:  # pylint: disable=broad-exception-caught
      number = next(_numbers)
      with _lock:
        _failures[number] = error
        while len(_failures) > _KEPT:
          _failures.popitem(last=False)
      raise type(error)(f'{error}\n({_MARK}{number})') from None
    return ()


def when_known(check: tp.Callable[..., None], *values: tp.Any) -> None:
  """Runs ``check`` on ``values`` now if they are concrete, else when the
  program runs.

  Args:
    check: called with the values as NumPy arrays; raises (a ``ValueError``
      naming what failed) if they are wrong, under ``jax.jit`` too.
    *values: arrays, concrete or traced.

  >>> import jax, jax.numpy as jnp
  >>> def positive(x):
  ...   if (x <= 0).any():
  ...     raise ValueError(f'not positive: {x}')
  >>> @jax.jit
  ... def f(x):
  ...   when_known(positive, x)
  ...   return x
  >>> f(jnp.ones(2)).tolist()
  [1.0, 1.0]
  >>> try:
  ...   f(-jnp.ones(2))
  ... except ValueError as e:
  ...   print(e)
  not positive: [-1. -1.]
  """
  try:
    concrete = [np.asarray(v) for v in values]
  except jax.errors.TracerArrayConversionError:
    _jax.debug_callback_p.bind(
        *values, callback=_HostCheck(check), effect=runtime_check_effect,
        partitioned=False,
    )
  else:
    check(*concrete)


def _translate(error: Exception) -> Exception | None:
  """The kept failure whose number the text of ``error`` carries."""
  numbers = _MARKED.findall(str(error))
  if len(numbers) != 1:
    return None
  with _lock:
    return _failures.pop(int(numbers[0]), None)


_jax.set_jit_errors(RuntimeCheckEffect, _translate)
