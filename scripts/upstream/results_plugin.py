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
"""Pytest plugin: writes one JSON line per test phase report.

Used by ``run_flax_nnx_tests.py`` to compare runs by test id::

  PYTHONPATH=scripts/upstream pytest -p results_plugin \\
      --upstream-results=out.jsonl FLAX/tests/nnx

Each line is ``{"nodeid", "when", "outcome", "wasxfail", "message"}``, where
``when`` is ``setup``, ``call``, ``teardown`` or ``collect`` and ``message``
is the first line of the failure (``ExceptionType: text``) or the reason of
a skip. Under pytest-xdist only the controller writes (workers forward their
reports).
"""

import json
import os

_OPTION = '--upstream-results'


def pytest_addoption(parser):
  parser.addoption(
      _OPTION,
      default=None,
      help='write one JSON line per test phase report to this file',
  )


def pytest_configure(config):
  path = config.getoption(_OPTION)
  if path and not hasattr(config, 'workerinput'):  # not an xdist worker
    config.pluginmanager.register(_Recorder(path), 'upstream_results')


def pytest_report_header(config):
  import flax  # pylint: disable=g-import-not-at-top

  return f'flax {flax.__version__} from {os.path.dirname(flax.__file__)}'


def _message(report) -> str:
  """The first line of a failure (``ExceptionType: text``) or the reason of a
  skip."""
  if report.skipped and isinstance(report.longrepr, tuple):
    return str(report.longrepr[2]).removeprefix('Skipped: ')
  if not report.failed:
    return ''
  crash = getattr(report.longrepr, 'reprcrash', None)
  text = crash.message if crash is not None else str(report.longrepr)
  lines = [line for line in text.splitlines() if line.strip()]
  return lines[0] if lines else ''


class _Recorder:
  """Appends every report it sees to a JSON-lines file."""

  def __init__(self, path: str):
    self.path = path
    with open(path, 'w'):
      pass

  def _write(self, report, when: str):
    record = {
        'nodeid': report.nodeid,
        'when': when,
        'outcome': report.outcome,
        'wasxfail': hasattr(report, 'wasxfail'),
        'message': _message(report),
    }
    with open(self.path, 'a') as f:
      f.write(json.dumps(record) + '\n')

  def pytest_runtest_logreport(self, report):
    self._write(report, report.when)

  def pytest_collectreport(self, report):
    if report.failed:
      self._write(report, 'collect')
