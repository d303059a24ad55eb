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
"""Small projects of several files, migrated and run in fresh processes.

A project is ``{relative path: source}`` with a ``main.py`` defining
``build()`` (a model and an input) and ``run()`` (what its readers return,
a pytree of arrays). ``execute`` runs it in a fresh Python process (each
version imports its own modules, nothing is cached between them) and
returns what it observed, flattened to ``{key: array}``:

* ``run...``: the leaves of ``run()``, with Flax's own ``nnx.capture``
  (0.12.8) or, with ``compat=True``, ``capture_compat``'s (with
  ``compat='both'``, Flax's as ``run...`` and ``capture_compat``'s as
  ``compat...``);
* ``names...``: every value the model sows, by the name the functional
  ``capture`` of ``flax.nnx.sow`` gives it (``capture_compat`` installed, so
  that ``Module.sow`` sites are named by module path), over one call of
  ``build()``'s model: the independent observation of what a rewrite of a
  sow changed.

What raised is observed too (``KEY/raised``: its type and message).
"""

import os
import pickle
import subprocess
import sys
import textwrap
import typing as tp

import numpy as np
import sow_layout

_DRIVER = textwrap.dedent('''\
    import pickle, sys, warnings
    root, project, compat, out, *libraries = sys.argv[1:]
    sys.path.insert(0, root)
    try:
      import _worktree  # this repository: its working tree's flax.nnx
    except ImportError:
      pass  # Flax's tree: its own flax.nnx
    sys.path[:0] = [project, *libraries]
    warnings.simplefilter('ignore', DeprecationWarning)
    import jax
    import numpy as np
    from flax.nnx import capture_compat
    from flax.nnx.sow import capture

    def flat(prefix, tree):
      leaves = jax.tree_util.tree_leaves_with_path(tree)
      return {prefix + jax.tree_util.keystr(path): np.asarray(leaf)
              for path, leaf in leaves}

    def observe(result, key, function):
      try:
        result.update(flat(key, function()))
      except Exception as e:  # the observation: what raised, and its message
        result[key + '/raised'] = f'{type(e).__name__}: {e}'

    def names():
      model, x = main.build()
      with capture_compat.install():
        _, collected = capture(model)(x)
      return {'/'.join(map(str, n if isinstance(n, tuple) else (n,))):
              list(values) for n, values in collected.items()}

    def run_compat():
      with capture_compat.install():
        return main.run()

    result = {}
    import main
    # Flax 0.12.8's nnx.capture (or capture_compat's), then what the model
    # sows by name.
    observe(result, 'run', run_compat if compat == '1' else main.run)
    if compat == 'both':
      observe(result, 'compat', run_compat)
    observe(result, 'names', names)
    with open(out, 'wb') as f:
      pickle.dump(result, f)
    ''')


def write(directory: str, project: dict[str, str]) -> None:
  for relative, source in project.items():
    path = os.path.join(directory, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
      f.write(source)


def read(directory: str) -> dict[str, str]:
  found = {}
  for folder, _, files in os.walk(directory):
    for name in files:
      if name.endswith('.py'):
        path = os.path.join(folder, name)
        with open(path, encoding='utf-8') as f:
          found[os.path.relpath(path, directory)] = f.read()
  return found


def execute(directory: str, *, compat: bool | str = False,
            libraries: tp.Sequence[str] = (),
            python: str = sys.executable) -> dict[str, object]:
  """What the project in ``directory`` observes, in a fresh process
  (``libraries``: folders it imports packages from, as installed)."""
  out = os.path.join(directory, '.observed.pkl')
  process = subprocess.run(
      [python, '-c', _DRIVER, sow_layout.ROOT, directory,
       compat if isinstance(compat, str) else '1' if compat else '0', out,
       *libraries],
      capture_output=True, text=True, check=False,
      # No bytecode left behind: the migrated version must not reuse it.
      env={**os.environ, 'JAX_PLATFORMS': 'cpu',
           'PYTHONDONTWRITEBYTECODE': '1'})
  if process.returncode:
    raise AssertionError(f'the driver failed:\n{process.stderr[-3000:]}')
  with open(out, 'rb') as f:
    result = pickle.load(f)
  os.unlink(out)
  return result


def differences(before: dict, after: dict) -> list[str]:
  """What differs between two observations (bitwise for arrays)."""
  found = []
  for key in sorted(set(before) | set(after)):
    if key not in after:
      found.append(f'{key}: missing after')
    elif key not in before:
      found.append(f'{key}: new after')
    elif isinstance(before[key], str) or isinstance(after[key], str):
      if before[key] != after[key]:
        found.append(f'{key}: {before[key]!r} != {after[key]!r}')
    elif (np.shape(before[key]) != np.shape(after[key])
          or not np.array_equal(before[key], after[key])):
      found.append(f'{key}: values differ')
  return found
