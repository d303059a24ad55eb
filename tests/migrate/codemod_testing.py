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
"""What the codemod's tests share: a skip without libcst, the codemod's
modules (``scripts/migrate/sow_migrate``) imported by name, and a stand-in
for its collector for the unit tests of the modules it serves."""

import importlib
import importlib.util
import os
import sys
import textwrap
import types
import typing as tp

from absl.testing import absltest

import sow_layout

SCRIPTS = os.path.join(sow_layout.ROOT, 'scripts', 'migrate')


def require_libcst() -> None:
  """Skips the test module being imported where libcst is missing: it is
  not a Flax dependency, and the codemod's tests run where it is
  installed."""
  if importlib.util.find_spec('libcst') is None:
    raise absltest.SkipTest('the codemod needs libcst (pip install libcst)')


def codemod_module(name: str) -> types.ModuleType:
  """The codemod's module ``sow_migrate.<name>`` (skipping without
  libcst)."""
  require_libcst()
  if SCRIPTS not in sys.path:
    sys.path.append(SCRIPTS)
  return importlib.import_module(f'sow_migrate.{name}')


class Probe:
  """What the codemod's modules ask of a collector: parents, scopes,
  qualified names (as if the source were ``pkg/mod.py``), and the nodes
  they have handled. The real collector (``facts.Collector``) comes with a
  later module; these tests give its metadata by hand."""

  def __init__(self, wrapper):
    # Imported here: a test module imports this one before it can skip.
    from libcst import metadata  # pylint: disable=g-import-not-at-top
    self._metadata = metadata
    self.metadata = wrapper.resolve_many(
        [metadata.ParentNodeProvider, metadata.ScopeProvider])
    self.handled = set()

  def get_metadata(self, provider, node, default=None):
    return self.metadata[provider].get(node, default)

  def parent(self, node):
    return self.get_metadata(self._metadata.ParentNodeProvider, node)

  def qnames(self, node):
    return codemod_module('names').qualified_names(
        self.get_metadata(self._metadata.ScopeProvider, node), node,
        'pkg.mod', 'pkg')


def probe(source: str) -> tuple[Probe, tp.Any]:
  """(probe, module): ``source`` (dedented) parsed, its metadata
  resolved."""
  require_libcst()
  # pylint: disable-next=g-import-not-at-top
  import libcst as cst
  from libcst import metadata  # pylint: disable=g-import-not-at-top
  module = cst.parse_module(textwrap.dedent(source))
  wrapper = metadata.MetadataWrapper(module, unsafe_skip_copy=True)
  return Probe(wrapper), module


def find(module, kind, predicate=lambda node: True) -> list[tp.Any]:
  """The nodes of ``module`` of type ``kind`` that ``predicate`` takes, in
  the order of the source."""
  import libcst as cst  # pylint: disable=g-import-not-at-top
  found = []

  class Finder(cst.CSTVisitor):

    def on_visit(self, node):
      if isinstance(node, kind) and predicate(node):
        found.append(node)
      return True

  module.visit(Finder())
  return found


def named(module, name: str) -> list[tp.Any]:
  """The ``Name`` nodes of ``module`` spelled ``name``."""
  import libcst as cst  # pylint: disable=g-import-not-at-top
  return find(module, cst.Name, lambda n: n.value == name)
