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
"""Executes notebooks as Flax's documentation build does (myst-nb).

When it executes notebooks (``NB_EXECUTION_MODE`` set; by default it
renders their stored outputs), ``docs_nnx/conf.py`` executes each one with
a per-cell timeout of 100 seconds, from the notebook's folder, and fails on
the first error (``nb_execution_allow_errors = False``). This does the
same with nbclient, which myst-nb uses, in the Python that runs it (its
``python3`` kernel)::

  python run_notebooks.py OUT.jsonl NOTEBOOK.ipynb...

and writes one JSON line per notebook: its path, the number of code cells,
how many ran, the error (``Type: first line``, with the failing cell's
index) or ``""``, and the seconds it took. Exits 1 if any notebook failed.
"""

from __future__ import annotations

import json
import os
import sys
import time

import nbclient
import nbformat

TIMEOUT = 100  # seconds per cell, as docs_nnx/conf.py's nb_execution_timeout


def execute(path: str) -> dict[str, object]:
  notebook = nbformat.read(path, as_version=4)
  code = [c for c in notebook.cells if c.cell_type == 'code']
  client = nbclient.NotebookClient(
      notebook, timeout=TIMEOUT, kernel_name='python3', allow_errors=False,
      resources={'metadata': {'path': os.path.dirname(os.path.abspath(path))}},
  )
  start = time.monotonic()
  error = ''
  try:
    client.execute()
  except nbclient.exceptions.CellExecutionError as e:
    error = f'{e.ename}: {str(e.evalue).splitlines()[0] if e.evalue else ""}'
  except Exception as e:  # pylint: disable=broad-except
    error = f'{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ""}'
  ran = sum(1 for c in code if c.get('execution_count') is not None)
  if error:
    error += f' (code cell {ran})'
  return {
      'path': path, 'cells': len(code), 'ran': ran, 'error': error,
      'seconds': round(time.monotonic() - start, 1),
  }


def main(argv: list[str]) -> int:
  out, paths = argv[0], argv[1:]
  failed = 0
  with open(out, 'w', encoding='utf-8') as f:
    for path in paths:
      record = execute(path)
      failed += bool(record['error'])
      f.write(json.dumps(record) + '\n')
      f.flush()
      print(f"{path}: {record['ran']}/{record['cells']} cells"
            f" {record['error'] or 'ok'} ({record['seconds']}s)", flush=True)
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
