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
import typing as tp

import jax

from flax.nnx.sow import interpreter
from flax.nnx.sow import primitive
from flax.nnx.sow import rules  # noqa: F401  (fills the rule table)
from flax.nnx.sow import tracing
from flax.nnx.sow.selection import NameFilter, Selection


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
    f: tp.Callable[..., tp.Any],
    *,
    tag: tp.Hashable = None,
    names: NameFilter = None,
) -> tp.Callable[..., tuple[tp.Any, Collected]]:
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

  @functools.wraps(f)
  def captured(*args, **kwargs):
    return _call(f, selection, args, kwargs)

  return captured


sown = capture


def _call(f, selection, args, kwargs):
  staged = tracing.stage(f, args, kwargs)
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
  collected: dict[tp.Any, list[tp.Any]] = {}
  for site, leaves in records:
    value = jax.tree_util.tree_unflatten(site.tree, leaves)
    if site.mode == 'clobber':
      collected[site.name] = [value]
    else:
      collected.setdefault(site.name, []).append(value)
  return Collected((name, tuple(values)) for name, values in collected.items())
