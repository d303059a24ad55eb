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
"""Source documents: ``.py`` files, notebooks and Markdown as code units.

libcst parses Python modules; notebooks (code cells) and Markdown (Python
fences) are split here into units that libcst parses one by one, and put back
together byte for byte where nothing changed: encoding, byte-order mark,
CRLF line ends and the trailing newline are kept.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import tokenize
import typing as tp

_FENCE_RE = re.compile(
    r'^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*'
    r'(?:python|py|python3|ipython3?|\{code-cell\}[ \t]*(?:python3?|ipython3?)'
    # Pandoc's attribute form, ```{.python .input} (the first class names
    # the language).
    r'|\{[ \t]*\.(?:python3?|py|ipython3?)(?:[ \t]+[^}\n]*)?\})'
    r'[ \t]*\n'
    r'(?P<body>.*?)'
    r'^(?P=indent)(?P=fence)[ \t]*$',
    re.MULTILINE | re.DOTALL,
)
# IPython magics and shell escapes are not Python: they are commented out
# with a marker while the unit is parsed, and restored afterwards.
_MAGIC_RE = re.compile(r'^([ \t]*)([%!].*)$', re.MULTILINE)
_MAGIC_MARK = '#<migrate_sow magic>'


@dataclasses.dataclass
class Unit:
  """One piece of Python code inside a document.

  Attributes:
    code: the Python code (magics masked).
    first_line: the document line where the code starts (1-based).
    label: how a person finds the unit ('' for a .py file, 'cell 3').
  """

  code: str
  first_line: int
  label: str = ''


@dataclasses.dataclass
class Document:
  """A source file split into code units that can be put back together."""

  path: str
  kind: str  # 'py', 'ipynb' or 'md'
  text: str  # decoded, with '\n' line ends for notebooks and Markdown
  units: list[Unit]
  encoding: str = 'utf-8'
  newline: str = '\n'  # the line end to restore (notebooks and Markdown)
  _notebook: dict[str, tp.Any] | None = None
  _cells: list[int] = dataclasses.field(default_factory=list)
  _spans: list[tuple[int, int, str]] = dataclasses.field(default_factory=list)

  def render(self, codes: list[str]) -> bytes:
    """Returns the file's bytes with its units replaced by ``codes``."""
    if all(code == unit.code for code, unit in zip(codes, self.units)):
      text = self.text
    elif self.kind == 'py':
      text = codes[0]
    elif self.kind == 'md':
      text = _render_markdown(self, codes)
    else:
      text = _render_notebook(self, codes)
    if self.kind != 'py' and self.newline != '\n':
      text = text.replace('\n', self.newline)
    return text.encode(self.encoding)


def decode(path: str, data: bytes) -> tuple[str, str]:
  """Returns the text of ``data`` and the encoding to write it back with."""
  if path.endswith('.py'):
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
  else:
    encoding = 'utf-8-sig' if data.startswith(b'\xef\xbb\xbf') else 'utf-8'
  return data.decode(encoding), encoding


def read_document(path: str, data: bytes | str) -> Document:
  """Splits a file's contents into code units.

  Args:
    path: the file's path; its suffix picks the format.
    data: the file's bytes (or its text).

  Returns:
    The document.

  Raises:
    UnicodeDecodeError, SyntaxError (bad encoding cookie), ValueError (a
    notebook that is not JSON).
  """
  if isinstance(data, bytes):
    text, encoding = decode(path, data)
  else:
    text, encoding = data, 'utf-8'
  if path.endswith('.py'):
    return Document(path, 'py', text, [Unit(text, 1)], encoding=encoding)
  newline = '\n'
  if '\r\n' in text and '\n' not in text.replace('\r\n', ''):
    newline, text = '\r\n', text.replace('\r\n', '\n')
  if path.endswith('.ipynb'):
    doc = _read_notebook(path, text)
  else:
    doc = _read_markdown(path, text)
  doc.encoding, doc.newline = encoding, newline
  return doc


def mask_magics(code: str) -> str:
  return _MAGIC_RE.sub(lambda m: m.group(1) + _MAGIC_MARK + m.group(2), code)


def unmask_magics(code: str) -> str:
  return code.replace(_MAGIC_MARK, '')


def _read_markdown(path: str, text: str) -> Document:
  units, spans = [], []
  for match in _FENCE_RE.finditer(text):
    indent = match.group('indent')
    lines = match.group('body').splitlines(keepends=True)
    if indent and not all(
        line.startswith(indent) or not line.strip() for line in lines):
      continue
    code = ''.join(line[len(indent):] for line in lines)
    first_line = text.count('\n', 0, match.start('body')) + 1
    units.append(
        Unit(mask_magics(code), first_line, f'fence at line {first_line}'))
    spans.append((match.start('body'), match.end('body'), indent))
  return Document(path, 'md', text, units, _spans=spans)


def _render_markdown(doc: Document, codes: list[str]) -> str:
  pieces, last = [], 0
  for (start, end, indent), code in zip(doc._spans, codes):
    lines = unmask_magics(code).splitlines(keepends=True)
    pieces.append(doc.text[last:start])
    pieces.append(''.join(indent + line if line.strip() else line
                          for line in lines))
    last = end
  pieces.append(doc.text[last:])
  return ''.join(pieces)


def _read_notebook(path: str, text: str) -> Document:
  notebook = json.loads(text)
  units, cells = [], []
  for index, cell in enumerate(notebook.get('cells', [])):
    if cell.get('cell_type') != 'code':
      continue
    source = cell.get('source', '')
    code = ''.join(source) if isinstance(source, list) else source
    units.append(Unit(mask_magics(code), 1, f'cell {index + 1}'))
    cells.append(index)
  return Document(path, 'ipynb', text, units, _notebook=notebook, _cells=cells)


def _render_notebook(doc: Document, codes: list[str]) -> str:
  notebook = doc._notebook
  assert notebook is not None
  for index, unit, code in zip(doc._cells, doc.units, codes):
    if code == unit.code:
      continue
    cell = notebook['cells'][index]
    code = unmask_magics(code)
    if isinstance(cell.get('source'), list):
      cell['source'] = code.splitlines(keepends=True)
    else:
      cell['source'] = code
  match = re.search(r'\n( +)"', doc.text)
  indent = len(match.group(1)) if match else None
  ascii_only = '\\u' in doc.text and all(ord(c) < 128 for c in doc.text)
  out = json.dumps(notebook, indent=indent, ensure_ascii=ascii_only)
  return out + '\n' if doc.text.endswith('\n') else out
