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

import collections
import functools
import typing as tp

from flax.nnx.sow import interpreter
from flax.nnx.sow import primitive
from flax.nnx.sow import tracing
from flax.nnx.sow.selection import Selection

Values = tp.Mapping[primitive.Name, tp.Sequence[tp.Any]]
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

  Example::

    >>> import jax.numpy as jnp
    >>> from flax.nnx.sow import capture, plant, sow
    >>> def f(x):
    ...   h = sow(x * 2, name='h')
    ...   return h + 1
    >>> plant(f, {'h': (jnp.zeros(2),)})(jnp.ones(2))
    Array([1., 1.], dtype=float32)
    >>> out, collected = capture(f)(jnp.ones(2))
    >>> bool((plant(f, collected)(jnp.ones(2)) == out).all())
    True

  Args:
    f: the function to run.
    values: ``{name: (value, ...)}``, one value per sow of that name.
    tag: only plant into sows with this tag; ``None`` plants into any.

  Returns:
    A function with ``f``'s signature returning what ``f`` returns.
  """
  if not callable(f):
    raise TypeError(
        f'plant: expected a callable, got {f!r} of type {type(f).__name__}.'
    )
  values = _check_values(values)
  selection = Selection.make(tag=tag, names=None, where='plant')
  request = interpreter.Request(
      selection, collect=False, planted=Selection(names=frozenset(values)),
      refuse_unread=True,
  )

  @functools.wraps(f)
  def planted(*args, **kwargs):
    with tracing.staged(f, args, kwargs) as staged:
      planter = _ValuesPlanter(values)
      scope = interpreter.Scope(request, planter)
      out_flat = interpreter.evaluate(
          staged.jaxpr.jaxpr, staged.jaxpr.consts, staged.inputs, scope
      )
      planter.check_all_used(tag)
      return staged.unflatten_out(out_flat)

  return planted


def _check_values(values: tp.Any) -> dict[primitive.Name, tuple[tp.Any, ...]]:
  if not isinstance(values, tp.Mapping):
    raise TypeError(
        'plant: values must map names to tuples of values (the shape'
        f' capture returns), got {type(values).__name__}.'
    )
  checked = {}
  for name, entries in values.items():
    name = primitive.check_name(name, where='plant')
    if not isinstance(entries, (tuple, list)):
      raise TypeError(
          f'plant: values[{name!r}] must be a tuple with one value per sow,'
          f' got {type(entries).__name__}.'
      )
    checked[name] = tuple(entries)
  return checked


class _ValuesPlanter:
  """Hands out the user's values, one entry per sow, checking each."""

  def __init__(self, values: dict[primitive.Name, tuple[tp.Any, ...]]):
    self.values = values
    self.used: collections.Counter = collections.Counter()

  def take(self, site: interpreter.Site) -> list[tp.Any]:
    entries = self.values[site.name]
    index = self.used[site.name]
    if index >= len(entries):
      raise ValueError(
          f'plant: values[{site.name!r}] has {len(entries)} entries but the'
          f' function sows {site.name!r} more often.'
      )
    self.used[site.name] += 1
    return interpreter.check_entry(
        site, entries[index], where=f'plant: values[{site.name!r}][{index}]'
    )

  def check_all_used(self, tag: tp.Hashable):
    for name, entries in self.values.items():
      used = self.used[name]
      if used == 0:
        with_tag = '' if tag is None else f' with tag={tag!r}'
        raise ValueError(
            f'plant: the function never sows {name!r}{with_tag}.'
        )
      if used != len(entries):
        raise ValueError(
            f'plant: values[{name!r}] has {len(entries)} entries but the'
            f' function sows {name!r} {used} time{"" if used == 1 else "s"}.'
        )
