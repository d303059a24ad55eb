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
"""Readable text for what ``capture`` returns and what ``discover`` lists.

Both print a table: a name per row, and each array summarised by its dtype
and shape (``f32[2,6,6]``), with, for a concrete float array, its mean,
standard deviation, minimum and maximum; never its elements, which for an
activation can be millions. A traced or abstract value (under ``jit``, from
``discover``) has only its dtype and shape. A leaf inside a sown pytree is
written as a name's parts are (``x``, ``1``, ``cache.k``). Printed to a
terminal, the table is laid out by ``rich`` at the terminal's width, long
cells folded; elsewhere (a log, a file, a test) each row keeps one line.

Example::

  >>> import jax.numpy as jnp
  >>> from flax.nnx.sow import render
  >>> render.spell(('blocks', 0, 'attn', 'pattern'))
  'blocks.0.attn.pattern'
  >>> render.describe(jnp.arange(4.0))
  'f32[4] mean=1.5 std=1.118 min=0 max=3'
"""

from __future__ import annotations

import html
import io
import shutil
import sys
import typing as tp

import jax
import numpy as np
from rich import console as rich_console
from rich import padding as rich_padding
from rich import table as rich_table

from flax.nnx.sow.transform import names as names_lib


# How a sow name is written in a table: its dotted spelling, which reads
# back as the name wherever a name is taken.
spell = names_lib.spell


def spell_tag(tag: tp.Hashable) -> str:
  """A tag in a table: ``-`` for none, a class (``nnx.Intermediate``) by
  its name, anything else by its ``repr``."""
  if tag is None:
    return '-'
  if isinstance(tag, type):
    return tag.__name__
  return repr(tag)


def _short_dtype(dtype: tp.Any) -> str:
  # JAX's own short spelling in printed jaxprs (f32, i32, bf16, bool): the
  # form JAX users read shapes in.
  text = str(dtype)
  for long, short in (('bfloat', 'bf'), ('float', 'f'), ('uint', 'u'),
                      ('complex', 'c'), ('int', 'i')):
    if text.startswith(long):
      return short + text[len(long):]
  return text


def aval(leaf: tp.Any) -> str:
  """``leaf``'s dtype and shape, as ``f32[2,3]``."""
  shape = ','.join(str(d) for d in leaf.shape)
  return f'{_short_dtype(leaf.dtype)}[{shape}]'


def _is_concrete(leaf: tp.Any) -> bool:
  """Whether ``leaf``'s elements can be read here, without a transfer of
  shards from other processes."""
  if isinstance(leaf, (np.ndarray, np.generic)):
    return True
  if isinstance(leaf, jax.core.Tracer) or not isinstance(leaf, jax.Array):
    return False  # traced, or abstract (a ShapeDtypeStruct)
  return leaf.is_fully_addressable and not leaf.is_deleted()


def _number(x: float) -> str:
  return f'{x:.4g}'


def statistics(leaf: tp.Any) -> str:
  """``mean= std= min= max=`` of a concrete float array, the value of a
  concrete scalar; ``''`` for any other value."""
  if not _is_concrete(leaf):
    return ''
  if np.ndim(leaf) == 0 and (
      jax.numpy.issubdtype(leaf.dtype, jax.numpy.number)
      or leaf.dtype == np.bool_
  ):
    value = np.asarray(leaf).item()
    return _number(value) if isinstance(value, float) else str(value)
  if not jax.numpy.issubdtype(leaf.dtype, jax.numpy.floating):
    return ''
  values = np.asarray(leaf).astype(np.float64)
  if values.size == 0:
    return ''
  return ' '.join((
      f'mean={_number(values.mean())}',
      f'std={_number(values.std())}',
      f'min={_number(values.min())}',
      f'max={_number(values.max())}',
  ))


def describe(leaf: tp.Any) -> str:
  """One array leaf in a line: its ``aval`` and its ``statistics``."""
  if not hasattr(leaf, 'dtype'):
    return repr(leaf)  # a Python number or string a pytree carries
  return ' '.join(part for part in (aval(leaf), statistics(leaf)) if part)


def leaves(value: tp.Any) -> list[tuple[str, tp.Any]]:
  """``(key path, leaf)`` of each leaf of ``value``, the path written as a
  name's parts are: ``''`` for an array sown alone, ``'a'``, ``'1'`` or
  ``'cache.k'`` inside a pytree."""
  flat, _ = jax.tree_util.tree_flatten_with_path(value)
  return [(jax.tree_util.keystr(path, simple=True, separator='.'), leaf)
          for path, leaf in flat]


def entry(index: int, path: str) -> str:
  """Entry ``index`` of a name, and its leaf ``path`` (see :func:`leaves`)
  if the entry is a pytree: ``[0]``, ``[1].x``, ``[0].cache.k``."""
  return f'[{index}]' + (f'.{path}' if path else '')


def nbytes(value: tp.Any) -> int:
  """The bytes of the array leaves of ``value`` (concrete or abstract)."""
  total = 0
  for leaf in jax.tree_util.tree_leaves(value):
    if hasattr(leaf, 'dtype') and hasattr(leaf, 'shape'):
      total += int(np.prod(leaf.shape, dtype=np.int64)) * leaf.dtype.itemsize
  return total


def format_bytes(n: float) -> str:
  for unit in ('B', 'KiB', 'MiB', 'GiB'):
    if n < 1024 or unit == 'GiB':
      return f'{n} {unit}' if unit == 'B' else f'{n:.1f} {unit}'
    n /= 1024
  raise AssertionError('unreachable')


def terminal_width() -> int | None:
  """The width of the terminal being printed to; ``None`` when standard
  output is not a terminal (a log, a file, a test), where a table keeps a
  line per row."""
  stream = sys.stdout
  isatty = getattr(stream, 'isatty', None)
  if isatty is None or not isatty():
    return None
  return shutil.get_terminal_size().columns


# A column whose cells are all this short is never folded (a tag, a count,
# a size): the long ones (names, values, locations) give way.
_UNFOLDED = 12


def table(header: tp.Sequence[str], rows: tp.Sequence[tp.Sequence[str]],
          indent: str = '', width: int | None = None) -> list[str]:
  """``rows`` under ``header``, laid out by ``rich``: each column as wide
  as its widest cell, two spaces apart, and at most ``width`` columns in
  all (``None``: unbounded), long cells folded onto more lines."""
  grid = rich_table.Table(box=None, show_edge=False, pad_edge=False,
                          padding=(0, 2, 0, 0), header_style=None)
  for i, name in enumerate(header):
    longest = max(len(r[i]) for r in (header, *rows))
    grid.add_column(name, overflow='fold', no_wrap=longest <= _UNFOLDED)
  for row in rows:
    grid.add_row(*row)
  out = io.StringIO()
  rich_console.Console(
      file=out, width=width or 1 << 20, color_system=None, markup=False,
      highlight=False, emoji=False, force_terminal=False,
  ).print(rich_padding.Padding(grid, (0, 0, 0, len(indent))))
  return [line.rstrip() for line in out.getvalue().rstrip('\n').split('\n')]


def html_table(caption: str, header: tp.Sequence[str],
               rows: tp.Sequence[tp.Sequence[str]]) -> str:
  """The same table in HTML, for a notebook's rich display."""
  escape = html.escape
  head = ''.join(f'<th style="text-align:left">{escape(h)}</th>'
                 for h in header)
  body = ''.join(
      '<tr>' + ''.join(
          f'<td style="text-align:left"><code>{escape(c)}</code></td>'
          for c in row) + '</tr>'
      for row in rows
  )
  return (f'<table><caption style="text-align:left">{escape(caption)}'
          f'</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
          '</table>')


def treescope_lines(summary: str, lines: tp.Sequence[str], path: str | None):
  """A treescope rendering folded to ``summary``, unfolding to ``lines``.

  Imported here, not at the top: treescope is only asked for this by
  treescope itself (``__treescope_repr__``), so it is installed then.
  """
  from treescope import rendering_parts  # type: ignore[import-untyped]  # pylint: disable=g-import-not-at-top

  return rendering_parts.build_custom_foldable_tree_node(
      label=rendering_parts.text(summary),
      contents=rendering_parts.fold_condition(
          expanded=rendering_parts.indented_children(
              [rendering_parts.text(line) for line in lines]
          )
      ),
      path=path,
  )


def collected_lines(collected: tp.Mapping[tp.Any, tp.Sequence[tp.Any]],
                    width: int | None = None) -> tuple[str, list[str]]:
  """The summary line and the table of a ``Collected``: a row per leaf of
  each entry (``[0]``, or ``[0].x`` for its leaf ``x``), the name on its
  first row only; at most ``width`` columns."""
  entries = sum(len(values) for values in collected.values())
  summary = (f'Collected({len(collected)} names, {entries} entries,'
             f' {format_bytes(nbytes(collected))})')
  if not collected:
    return 'Collected(no names)', []
  rows = []
  for name, values in collected.items():
    first = spell(name)
    for i, value in enumerate(values):
      for path, leaf in leaves(value) or [('', None)]:
        rows.append((first, entry(i, path), describe(leaf)))
        first = ''
  return summary, table(('name', 'entry', 'value'), rows, indent='  ',
                        width=width)
