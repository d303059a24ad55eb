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
"""The package's layers: imports run down only, and no module imports itself
back through another.

Read from the source (``ast``), every import, at any depth of a module
(a function-level import counts too):

* ``flax/nnx/sow/transform/`` imports nothing from ``flax`` at all;
* ``flax/nnx/sow/lift/`` imports ``transform`` and Flax NNX, never the API
  modules of ``flax/nnx/sow/`` or ``capture_compat``;
* ``flax/nnx/sow/*.py`` (the API) never imports ``capture_compat``;
* no module of any of them is part of an import cycle.
"""

from __future__ import annotations

import ast
import os

from absl.testing import absltest

import sow_layout

PACKAGES = ('flax.nnx.sow', 'flax.nnx.capture_compat')
TRANSFORM = 'flax.nnx.sow.transform'
LIFT = 'flax.nnx.sow.lift'
COMPAT = 'flax.nnx.capture_compat'


def _modules() -> dict[str, str]:
  """Module name -> file, for every module of ``PACKAGES``."""
  found = {}
  for package in PACKAGES:
    top = os.path.join(sow_layout.ROOT, *package.split('.'))
    for folder, _, files in os.walk(top):
      for file in files:
        if not file.endswith('.py'):
          continue
        rel = os.path.relpath(os.path.join(folder, file), sow_layout.ROOT)
        name = rel[:-3].replace(os.sep, '.')
        if name.endswith('.__init__'):
          name = name[: -len('.__init__')]
        found[name] = os.path.join(folder, file)
  return found


def imports_of(name: str, path: str, known: set[str]) -> set[str]:
  """The modules of ``known`` (or other ``flax`` modules) ``path`` imports.

  ``from package import module`` imports the module; ``from module import
  name`` imports the module. A package's ``__init__`` importing its own
  modules is how the package exports them, not an edge back up.
  """
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  package = name if path.endswith('__init__.py') else name.rpartition('.')[0]
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = package.split('.')
        base = base[: len(base) - node.level + 1]
        module = '.'.join(base + ([node.module] if node.module else []))
      else:
        module = node.module or ''
      for alias in node.names:
        full = f'{module}.{alias.name}'
        out.add(full if full in known else module)
  return {m for m in out if m.startswith('flax')}


def _graph() -> dict[str, set[str]]:
  modules = _modules()
  known = set(modules)
  return {
      name: imports_of(name, path, known) for name, path in modules.items()
  }


def _layer(name: str) -> str:
  if name.startswith(COMPAT):
    return 'compat'
  if name == TRANSFORM or name.startswith(TRANSFORM + '.'):
    return 'transform'
  if name == LIFT or name.startswith(LIFT + '.'):
    return 'lift'
  return 'api'


_RANK = {'transform': 0, 'lift': 1, 'api': 2, 'compat': 3}


def violations(graph: dict[str, set[str]]) -> list[str]:
  """Every import that runs up a layer, or out of plain JAX."""
  found = []
  for name, imported in sorted(graph.items()):
    layer = _layer(name)
    for target in sorted(imported):
      if layer == 'transform' and not target.startswith(TRANSFORM):
        found.append(f'{name} imports {target}: transform/ is plain JAX')
        continue
      if not target.startswith(PACKAGES):
        continue  # Flax NNX itself, below every layer but transform/
      if _RANK[_layer(target)] > _RANK[layer]:
        found.append(f'{name} imports {target}, a layer up')
  return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The import cycles among the modules of ``graph`` (one per cycle found
  by a depth-first walk), ignoring a package importing its own modules."""

  def edges(name):
    for target in graph.get(name, ()):
      if target in graph and not target.startswith(name + '.'):
        yield target

  found, state, stack = [], {}, []

  def visit(name):
    state[name] = 'open'
    stack.append(name)
    for target in edges(name):
      if state.get(target) == 'open':
        found.append(stack[stack.index(target):] + [target])
      elif target not in state:
        visit(target)
    stack.pop()
    state[name] = 'done'

  for name in sorted(graph):
    if name not in state:
      visit(name)
  return found


class LayersTest(absltest.TestCase):

  def test_the_layers_exist(self):
    layers = {_layer(name) for name in _graph()}
    self.assertEqual(layers, {'transform', 'lift', 'api', 'compat'})

  def test_imports_run_down_only(self):
    self.assertEqual(violations(_graph()), [])

  def test_no_import_cycle(self):
    self.assertEqual(cycles(_graph()), [])

  def test_the_checks_can_fail(self):
    graph = _graph()
    graph[f'{TRANSFORM}.interpreter'] = graph[f'{TRANSFORM}.interpreter'] | {
        f'{LIFT}.taps', 'flax.nnx.graphlib',
    }
    graph[f'{LIFT}.taps'] = graph[f'{LIFT}.taps'] | {'flax.nnx.sow.capture'}
    self.assertLen(violations(graph), 3)
    graph = _graph()
    graph[f'{TRANSFORM}.primitive'] = graph[f'{TRANSFORM}.primitive'] | {
        f'{TRANSFORM}.interpreter'
    }
    self.assertNotEmpty(cycles(graph))


if __name__ == '__main__':
  absltest.main()
