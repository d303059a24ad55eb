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
"""``discover``: the sites a call would sow, listed without running it."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import types
import typing as tp

import jax
import numpy as np

from flax.nnx.transforms import transforms as nnx_transforms
from flax.nnx.sow import render
from flax.nnx.sow.capture import Collected, collect, staged_records
from flax.nnx.sow.lift import graph_nodes
from flax.nnx.sow.lift import taps
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import sites
from flax.nnx.sow.transform import steps
from flax.nnx.sow.transform.selection import NameFilter, Selection


@dataclasses.dataclass(frozen=True)
class SiteInfo:
  """One name a call would sow, as ``capture`` would return it.

  Attributes:
    name: the sown name.
    tags: the distinct tags of its sows, in program order.
    entries: one per entry ``capture`` would return under ``name``, the value
      with every array leaf a ``jax.ShapeDtypeStruct`` (a sow inside
      ``lax.scan`` stacked along the scan axis, one in a ``while_loop`` a
      :class:`~flax.nnx.sow.Steps` of ``max_steps``).
    where: the distinct user source lines of its sows, in program order.
  """

  name: primitive.Name
  tags: tuple[tp.Hashable, ...]
  entries: tuple[tp.Any, ...]
  where: tuple[str, ...]

  @property
  def occurrences(self) -> int:
    """How many entries ``capture`` would return under ``name``."""
    return len(self.entries)

  @property
  def tag(self) -> tp.Hashable:
    """The tag of the sows of ``name``; an error if they have several."""
    if len(self.tags) != 1:
      raise ValueError(
          f'discover: {self.name!r} is sown with {len(self.tags)} tags,'
          f' {self.tags!r}; read .tags.'
      )
    return self.tags[0]

  @property
  def nbytes(self) -> int:
    """The bytes of all its entries: what capturing it would hold."""
    return render.nbytes(self.entries)

  @property
  def step_nbytes(self) -> int | None:
    """The bytes each step of a ``while_loop`` adds to what capturing it
    holds (its entries that are :class:`~flax.nnx.sow.Steps`, one step of
    each), or ``None`` if no entry is: what a decode step keeps of it."""
    per_step = [_step_nbytes(e) for e in self.entries
                if isinstance(e, steps.Steps)]
    return sum(per_step) if per_step else None

  @property
  def values(self) -> tuple[str, ...]:
    """The distinct ``render.aval`` summaries of its entries."""
    return tuple(dict.fromkeys(_summary(e) for e in self.entries))


def _one_step(entry: steps.Steps) -> tp.Any:
  """The values of one step of ``entry``: each leaf without its step axis
  (abstract: a ``jax.ShapeDtypeStruct``)."""
  axis = len(np.shape(entry.count))

  def drop(leaf):
    shape = tuple(leaf.shape)
    return jax.ShapeDtypeStruct(shape[:axis] + shape[axis + 1:], leaf.dtype)

  return jax.tree_util.tree_map(drop, entry.values)


def _step_nbytes(entry: steps.Steps) -> int:
  return render.nbytes(_one_step(entry))


def _summary(entry: tp.Any) -> str:
  if isinstance(entry, steps.Steps):
    # A loop's values by what one step keeps: its count is not a value.
    return f'{entry.max_steps} steps of {_summary(_one_step(entry))}'
  parts = [(path, render.aval(leaf)) for path, leaf in render.leaves(entry)
           if hasattr(leaf, 'dtype')]
  if len(parts) == 1 and not parts[0][0]:
    return parts[0][1]
  # Each leaf by its path, written as a name's parts are: `x: f32[2]`.
  return ', '.join(f'{path}: {aval}' for path, aval in parts)


def _short_where(where: str) -> str:
  """``file.py:12 (fn)`` for ``/long/path/file.py:12 (fn)``."""
  location, _, function = where.partition(' (')
  path, colon, line = location.rpartition(':')
  if not colon:
    return where
  short = f'{os.path.basename(path)}:{line}'
  return f'{short} ({function}' if function else short


class Sites(tuple):
  """What ``discover(f)(...)`` returns: a :class:`SiteInfo` per name.

  A tuple in first-sow order, also indexed by name (``sites['h']``).
  Printed, it is a table; in a notebook, an HTML table (and a foldable one
  in treescope).
  """

  of: str

  def __new__(cls, rows: tp.Iterable[SiteInfo], of: str = 'f') -> Sites:
    self = super().__new__(cls, rows)
    self.of = of
    return self

  @property
  def names(self) -> tuple[primitive.Name, ...]:
    return tuple(row.name for row in self)

  def __getitem__(self, key):
    if isinstance(key, (int, slice)):
      return super().__getitem__(key)
    for row in self:
      if row.name == key:
        return row
    raise KeyError(
        f'discover: {self.of} sows no {key!r}; it sows'
        f' {sites.describe_names(self.names)}.'
    )

  def __contains__(self, key) -> bool:
    return super().__contains__(key) or key in self.names

  def abstract(self) -> Collected:
    """What ``jax.eval_shape(capture(f))`` would give: ``{name: entries}``."""
    return Collected((row.name, row.entries) for row in self)

  @property
  def nbytes(self) -> int:
    return sum(row.nbytes for row in self)

  @property
  def _looped(self) -> bool:
    """Whether a site is in a ``while_loop``: the table then has a column
    of the bytes each step keeps."""
    return any(row.step_nbytes is not None for row in self)

  @property
  def _header(self) -> tuple[str, ...]:
    if self._looped:
      return ('name', 'tag', 'entries', 'value', 'bytes', 'per step',
              'where')
    return ('name', 'tag', 'entries', 'value', 'bytes', 'where')

  def _rows(self) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for row in self:
      where = _short_where(row.where[0]) if row.where else '?'
      if len(row.where) > 1:
        where += f' (+{len(row.where) - 1} more)'
      per_step: tuple[str, ...] = ()
      if self._looped:
        per_step = ('-' if row.step_nbytes is None
                    else render.format_bytes(row.step_nbytes),)
      rows.append((
          render.spell(row.name),
          ', '.join(render.spell_tag(t) for t in row.tags),
          str(row.occurrences),
          ' | '.join(row.values),
          render.format_bytes(row.nbytes),
          *per_step,
          where,
      ))
    return rows

  def _summary(self) -> str:
    if not self:
      return f'Sites: {self.of} sows no sites'
    entries = sum(row.occurrences for row in self)
    return (f'Sites of {self.of}: {len(self)} names, {entries} entries,'
            f' {render.format_bytes(self.nbytes)}')

  def __repr__(self) -> str:
    return self.text(render.terminal_width())

  __str__ = __repr__

  def text(self, width: int | None = None) -> str:
    """The table, at most ``width`` columns wide, long cells folded onto
    more lines (``None``: a line per row); printed, it is laid out at the
    terminal's width."""
    if not self:
      return self._summary()
    lines = render.table(self._header, self._rows(), indent='  ',
                         width=width)
    return '\n'.join((self._summary(), *lines))

  def _repr_html_(self) -> str:
    return render.html_table(self._summary(), self._header, self._rows())

  def __treescope_repr__(self, path, subtree_renderer):
    del subtree_renderer  # the rows are text
    lines = repr(self).splitlines()
    return render.treescope_lines(lines[0], lines[1:], path)


def _describe(f: tp.Any) -> str:
  name = getattr(f, '__qualname__', None) or getattr(f, '__name__', None)
  if not isinstance(name, str):
    return type(f).__name__
  return name.rpartition('<locals>.')[2]  # where it was defined is no help


def _node_of(f: tp.Any) -> tuple[tp.Any, tp.Callable[[tp.Any], tp.Any]]:
  """``f``'s graph node (a Module, the module of a bound method, that of a
  tapped one), or ``None``, and how to make ``f`` on a copy of it."""
  if isinstance(f, taps.Tapped):
    node, rebuild = _node_of(f.fn)
    return node, lambda copy: taps.Tapped(rebuild(copy), f.spec)
  if graph_nodes.is_graph_node(f):
    return f, lambda copy: copy
  if inspect.ismethod(f) and graph_nodes.is_graph_node(f.__self__):
    return f.__self__, lambda copy: types.MethodType(f.__func__, copy)
  return None, lambda _: f


def _is_abstract(leaf: tp.Any) -> bool:
  return primitive.is_array(leaf) or isinstance(leaf, jax.ShapeDtypeStruct)


def discover(
    f: tp.Callable[..., tp.Any],
    *,
    tag: tp.Hashable = None,
    names: NameFilter = None,
    max_steps: int | tp.Mapping[primitive.Name, int] | None = None,
) -> tp.Callable[..., Sites]:
  """Returns a function listing what ``capture(f)`` would return, unrun.

  ``discover(f)(*args, **kwargs)`` traces the call as
  ``jax.eval_shape(capture(f, ...))`` would: nothing is computed, compiled or
  dispatched, host callbacks in ``f`` never fire and no graph node of the
  arguments is updated, so it costs a trace of ``f`` even on a large model.
  Arguments may be arrays, ``jax.ShapeDtypeStruct``\\ s or NNX modules
  (abstract ones, from ``nnx.eval_shape``, too); other arguments reach ``f``
  as they are, as in ``capture``. It lists the same sites ``capture`` would
  collect: ``sow`` calls, ``Module.sow`` of modules among the arguments
  (named by module path) and :func:`~flax.nnx.sow.tap` sites, with the same
  names, entries, shapes and dtypes (:meth:`Sites.abstract` is
  ``jax.eval_shape(capture(f))``'s collected), the tags and the user's
  source lines. An appending sow in a ``while_loop`` needs ``max_steps``, as
  in ``capture``; its value is then listed as what one step keeps (``10
  steps of f32[1,6,16]``), and the table gets a ``per step`` column: the
  bytes each step of the loop (each decode step) adds
  (:attr:`SiteInfo.step_nbytes`), the measure of what a tap keeps (a
  block's ``x`` with ``tap(outputs=...)`` against its whole ``(cache,
  x)``). A function that sows nothing gives an empty ``Sites``, printed as
  ``f sows no sites``.

  Example::

    >>> import jax, jax.numpy as jnp
    >>> from flax.nnx.sow import discover, sow
    >>> def f(x):
    ...   h = sow(jnp.tanh(x), name=('layer', 0, 'h'))
    ...   def body(c, _):
    ...     return sow(c * 2, name='c', tag='loop'), None
    ...   return jax.lax.scan(body, h, None, length=3)[0]
    >>> found = discover(f)(jax.ShapeDtypeStruct((4, 8), jnp.float32))
    >>> found.names
    (('layer', 0, 'h'), 'c')
    >>> found['c'].entries[0].shape, found['c'].tag
    ((3, 4, 8), 'loop')
    >>> print(found)
    Sites of f: 2 names, 2 entries, 512 B
      name       tag     entries  value       bytes  where
      layer.0.h  -       1        f32[4,8]    128 B  <doctest ...>:2 (f)
      c          'loop'  1        f32[3,4,8]  384 B  <doctest ...>:4 (...body)

  Args:
    f: the function whose call to list, as given to ``capture``.
    tag: only list sows with this tag, as in ``capture``.
    names: only list these names, as in ``capture``.
    max_steps: the ``max_steps`` of ``capture``, for appending sows in a
      ``while_loop``.

  Returns:
    A function with ``f``'s arguments returning :class:`Sites`.
  """
  if not callable(f):
    raise TypeError(
        f'discover: expected a callable, got {f!r} of type'
        f' {type(f).__name__}.'
    )
  selection = Selection.make(tag=tag, names=names, where='discover')
  bounds = steps.LoopBounds.make(max_steps, 'error', where='discover')
  node, rebuild = _node_of(f)
  of = _describe(f)

  @functools.wraps(f)
  def discovered(*args, **kwargs) -> Sites:
    leaves, treedef = jax.tree_util.tree_flatten(
        (args, kwargs), is_leaf=graph_nodes.is_graph_node
    )
    # Graph nodes and array (or abstract) leaves go through `nnx.eval_shape`,
    # which traces them on copies: nothing runs and nothing of the caller's
    # is updated. Other leaves stay static, as `capture` keeps them.
    dynamic = [i for i, leaf in enumerate(leaves)
               if graph_nodes.is_graph_node(leaf) or _is_abstract(leaf)]
    found: dict[str, tp.Any] = {}

    def abstract_call(node_copy, *values):
      full = list(leaves)
      for i, value in zip(dynamic, values):
        full[i] = value
      call_args, call_kwargs = jax.tree_util.tree_unflatten(treedef, full)
      fun = rebuild(node_copy) if node is not None else f
      _, records, jaxpr = staged_records(
          fun, selection, bounds, call_args, call_kwargs,
          keep_equations=True,
      )
      found['tags'] = _by_name(((s.name, s.tag) for s, _ in records))
      found['where'] = _by_name(
          (eqn.params['sow_name'], sites.where(eqn))
          for eqn in primitive.sow_equations(jaxpr.jaxpr)
      )
      return collect(records, bounds)

    collected = nnx_transforms.eval_shape(
        abstract_call, node, *(leaves[i] for i in dynamic)
    )
    return Sites(
        (
            SiteInfo(
                name=name,
                tags=found['tags'].get(name, ()),
                entries=tuple(entries),
                where=found['where'].get(name, ()),
            )
            for name, entries in collected.items()
        ),
        of=of,
    )

  return discovered


def _by_name(pairs: tp.Iterable[tuple[primitive.Name, tp.Any]],
             ) -> dict[primitive.Name, tuple[tp.Any, ...]]:
  """The distinct values paired with each name, in order."""
  grouped: dict[primitive.Name, dict[tp.Any, None]] = {}
  for name, value in pairs:
    grouped.setdefault(name, {})[value] = None
  return {name: tuple(values) for name, values in grouped.items()}
