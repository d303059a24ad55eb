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
"""``tap``: sow the inputs and outputs of submodule calls, by module path."""

from __future__ import annotations

import re
import typing as tp

from flax.nnx.sow.lift import taps
from flax.nnx.sow.transform import primitive


def tap(
    f: tp.Callable[..., tp.Any],
    *patterns: taps.Pattern,
    methods: tp.Sequence[str] = ('__call__',),
    inputs: taps.Inputs = True,
    outputs: bool | int | str = True,
    tag: tp.Hashable = None,
    mode: str = 'append',
) -> tp.Callable[..., tp.Any]:
  """Returns ``f`` with the calls of the modules at ``patterns`` sown.

  Inside a functional :func:`~flax.nnx.sow.capture`, :func:`plant` or
  :func:`perturb` staging, each listed method of each module of ``f``'s
  arguments whose path matches a pattern sows the array leaves of its
  ``(args, kwargs)`` as ``(*path, method, 'inputs')`` and uses the sown
  value as its inputs, and sows the array leaves of its result as ``(*path,
  method, 'output')`` and returns the sown value; other leaves are ``None``
  in the sown value. So ``plant`` can replace a submodule's inputs or
  output. Module paths follow the naming of ``Module.sow`` sites (see
  :mod:`flax.nnx.sow.lift.module_paths`). Neither the model nor its classes are
  changed: only the private copies the staging runs on. Outside any staging,
  ``tap(f)`` just calls ``f``.

  A pattern is a tuple of path components (``str`` or ``int``), or its
  dotted spelling (``'blocks.*.linear'``, digits read as ints): ``'*'``
  matches exactly one component, ``'**'`` any number of them, ``'attn*'``
  any component so beginning, a negative int counts from the last item
  (``('blocks', -1)``), and ``()`` is the root module. A pattern that
  matches no module, or only modules without the methods (a container such
  as an ``nnx.List`` has no ``__call__``), is an error, as is a pattern
  without wildcards matching such a module.

  ``inputs=True`` sows a call's ``(args, kwargs)``; a hook usually wants one
  argument: ``inputs=0`` (the first positional argument) or ``inputs='x'``
  (the argument named ``x``, passed by position or keyword) sows just that
  argument, as ``(*path, method, 'inputs', 0)`` or ``(*path, method,
  'inputs', 'x')``, so a planted function takes and returns it directly.
  ``outputs`` selects in the same way: a block returning ``(cache, x)`` is
  tapped with ``outputs=1`` to keep ``x`` alone (at every decode step, the
  residual stream rather than the whole KV cache), still named ``(*path,
  method, 'output')``; an int selects an item of a tuple or list output, a
  str the item of a mapping output with that key.

  Example::

    >>> import jax.numpy as jnp
    >>> from flax import nnx
    >>> from flax.nnx.sow import capture, plant, tap
    >>> class Block(nnx.Module):
    ...   def __init__(self, rngs):
    ...     self.linear = nnx.Linear(2, 2, rngs=rngs)
    ...   def __call__(self, x):
    ...     return nnx.relu(self.linear(x))
    >>> class Model(nnx.Module):
    ...   def __init__(self, rngs):
    ...     self.blocks = nnx.List([Block(rngs), Block(rngs)])
    ...   def __call__(self, x):
    ...     for block in self.blocks:
    ...       x = block(x)
    ...     return x
    >>> model = Model(nnx.Rngs(0))
    >>> tapped = tap(Model.__call__, ('blocks', '*', 'linear'), inputs=False)
    >>> out, collected = capture(tapped)(model, jnp.ones(2))
    >>> for name in collected:
    ...   print(name)
    ('blocks', 0, 'linear', '__call__', 'output')
    ('blocks', 1, 'linear', '__call__', 'output')
    >>> output = ('blocks', 1, 'linear', '__call__', 'output')
    >>> plant(tapped, {output: (jnp.zeros(2),)})(model, jnp.ones(2))
    Array([0., 0.], dtype=float32)

  Args:
    f: the function to run; a Module or a bound method of one is staged as
      itself (its modules are named from it).
    *patterns: the module paths to tap.
    methods: the method names to watch on the matching modules.
    inputs: sow the inputs of those calls: ``True`` (all), ``False``, or one
      argument by position (int) or by parameter name (str).
    outputs: sow their outputs: ``True`` (all), ``False``, or one item of a
      tuple/list output (int) or of a mapping output (str).
    tag: the tag of the sows.
    mode: the mode of the sows: ``'clobber'`` keeps the last call's values,
      as a tap inside a ``lax.while_loop`` needs (see :func:`sow`).

  Returns:
    A function with ``f``'s signature.
  """
  if not callable(f):
    raise TypeError(
        f'tap: expected a callable, got {f!r} of type {type(f).__name__}.'
    )
  if not patterns:
    raise TypeError('tap: give at least one module path pattern.')
  if isinstance(methods, str):
    methods = (methods,)
  for method in methods:
    if not isinstance(method, str):
      raise TypeError(
          f'tap: methods must be method names, got {method!r}.'
      )
  if isinstance(inputs, bool) or inputs is None:
    inputs = bool(inputs)
  elif isinstance(inputs, int):
    if inputs < 0:
      raise ValueError(
          f'tap: inputs={inputs} must be a position from 0 (or a parameter'
          ' name).'
      )
  elif not isinstance(inputs, str) or not inputs.isidentifier():
    raise TypeError(
        'tap: inputs must be True, False, a position (int) or a parameter'
        f' name (str), got {inputs!r}.'
    )
  if isinstance(outputs, bool) or outputs is None:
    outputs = bool(outputs)
  elif not isinstance(outputs, (int, str)):
    raise TypeError(
        'tap: outputs must be True, False, an item position (int) or a'
        f' mapping key (str), got {outputs!r}.'
    )
  spec = taps.TapSpec(
      patterns=tuple(_check_pattern(p) for p in patterns),
      methods=tuple(methods),
      inputs=inputs,
      outputs=outputs,
      tag=primitive.check_static(tag, what='tag', where='tap'),
      mode=primitive.check_mode(mode, where='tap'),
  )
  return taps.Tapped(f, spec)


def _check_pattern(pattern: tp.Any) -> taps.Pattern:
  if isinstance(pattern, str) and pattern:
    # The dotted spelling of a module path: digits are item indices.
    pattern = tuple(
        int(part) if _INDEX.fullmatch(part) else part
        for part in pattern.split('.')
    )
    if '' in pattern:
      raise ValueError(f'tap: the pattern {pattern!r} has an empty component.')
  primitive.refuse_traced(pattern, where='tap')
  if isinstance(pattern, tuple):
    parts = []
    for part in pattern:
      checked = primitive.name_part(part)
      if checked is None:
        break
      parts.append(checked)
    else:
      return tuple(parts)
  raise TypeError(
      'tap: a pattern is a tuple of module path components (str or int,'
      f" '*' for any one component) or its dotted spelling, got {pattern!r}."
  )


_INDEX = re.compile(r'-?[0-9]+')
