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
"""Tests that benchmarks/device_suite.py runs right the first time on a GPU.

Its ``--tiny`` mode runs every row at toy sizes on this CPU in a child
process, as a first run on an accelerator would: every planned row must be
produced and pass its oracle (captured values against the hand-written
returns, the exported store against a direct forward), and the files must
hold the header an accelerator's run needs. A budget that runs out must
leave a partial table and exit 0. The oracle itself must fail on values
that differ. No timing is asserted: the ratios are the suite's figures.
"""

import ast
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from unittest import mock

from absl.testing import absltest
import numpy as np
import sow_layout

ROOT = sow_layout.ROOT
SCRIPT = os.path.join(ROOT, 'benchmarks', 'device_suite.py')
sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
import device_suite  # noqa: E402  pylint: disable=g-import-not-at-top

TINY_SIZES = (device_suite.TINY_SMALL, device_suite.TINY_LARGE)


def _run(*flags: str, timeout: float = 300):
  """The suite in a child process: its completed process and ``--out``."""
  out = tempfile.mkdtemp()
  env = dict(os.environ)
  env.pop(device_suite.MODELS_FROM_ENV, None)  # the suite's own loop
  done = subprocess.run([sys.executable, SCRIPT, '--out', out, *flags],
                        cwd=ROOT, capture_output=True, text=True,
                        timeout=timeout, check=False, env=env)
  return done, out


def _load(out: str) -> dict:
  with open(os.path.join(out, device_suite.JSON)) as f:
    return json.load(f)


class TinyRunTest(absltest.TestCase):
  """One ``--tiny`` run on this CPU, shared by the tests of its output."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.done, cls.out = _run('--tiny')

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.out, ignore_errors=True)
    super().tearDownClass()

  def test_exits_zero(self):
    self.assertEqual(self.done.returncode, 0,
                     self.done.stdout[-3000:] + self.done.stderr[-3000:])

  def test_every_planned_row_is_produced_and_passes_its_oracle(self):
    rows = _load(self.out)['rows']
    planned = device_suite.planned(TINY_SIZES)
    self.assertEqual([(r['section'], r['key']) for r in rows],
                     [(section, key) for section, key, _ in planned])
    for row in rows:
      with self.subTest(section=row['section'], key=row['key']):
        self.assertIs(row['ok'], True, row['check'])
        self.assertTrue(row['check'].startswith('ok: '), row['check'])
        # What the oracle compared, and how: bitwise, or within a stated
        # tolerance of two different programs.
        self.assertRegex(row['check'], r'bitwise|within [\d.]+ ulps')
        self.assertTrue(math.isfinite(row['ratio']) and row['ratio'] > 0,
                        row)

  def test_captured_values_are_checked_against_the_returns_by_hand(self):
    rows = {(r['section'], r['key']): r for r in _load(self.out)['rows']}
    for size in TINY_SIZES:
      for variant in ('sow', 'tap'):
        check = rows[(f'compiled {size.name}',
                      f'{variant}.runtime_vs_jit')]['check']
        self.assertIn(f'{size.layers} residual streams and logits', check)
    self.assertIn('steps of residual streams', rows[('decode', 'error')]
                  ['check'])
    self.assertIn("on_overflow='error'", rows[('decode', 'error')]['what'])
    self.assertIn("on_overflow='truncate'",
                  rows[('decode', 'truncate')]['what'])
    self.assertIn('against a direct forward',
                  rows[('export', 'examples_per_s')]['check'])
    # The eager sides run the same operations: bitwise, no tolerance.
    for key in ('capture', 'compat'):
      self.assertIn('bitwise', rows[('eager', key)]['check'])
    self.assertIn("Flax 0.12.8's", rows[('eager', 'compat')]['check'])

  def test_sides_and_memory_are_reported(self):
    rows = _load(self.out)['rows']
    for row in rows:
      if row['key'].endswith('peak_memory'):
        peaks = row['numbers']['peak_bytes']
        self.assertGreater(peaks['hand'], 0)
        variant = row['key'].split('.')[0]
        self.assertAlmostEqual(row['ratio'], peaks[variant] / peaks['hand'])
      elif row['section'].startswith('compiled'):
        seconds = row['numbers']['seconds']
        self.assertLen(seconds, 3)  # jit(f), by hand, captured
        # A compiled capture is the program written by hand, op for op
        # (sows and taps alike); returning the streams adds to jit(f)'s.
        ops = row['numbers']['hlo_ops']
        variant = row['key'].split('.')[0]
        self.assertEqual(ops[variant], ops['hand'], row['key'])
        self.assertGreater(ops['hand'], ops['plain'])
    decode = [r for r in rows if r['section'] == 'decode']
    for row in decode:
      rates = row['numbers']['tokens_per_s']
      self.assertEqual(set(rates), {'plain', 'hand', 'truncate', 'error'})
      self.assertAlmostEqual(row['ratio'],
                             rates[row['key']] / rates['plain'])

  def test_header_and_markdown(self):
    data = _load(self.out)
    header = data['header']
    for field in ('device', 'jax', 'jaxlib', 'flax', 'xla_flags', 'sizes',
                  'budget_s', 'elapsed_s', 'section_s'):
      self.assertIn(field, header)
    self.assertTrue(header['tiny'])
    self.assertEqual(list(header['section_s']),  # the order they ran in
                     ['compiled tiny-a', 'decode', 'export', 'eager',
                      'compiled tiny-b'])
    self.assertEqual(header['sizes'][:2],
                     [size.describe() for size in TINY_SIZES])
    with open(os.path.join(self.out, device_suite.MARKDOWN)) as f:
      text = f.read()
    self.assertIn('jax ', text)
    self.assertIn('XLA_FLAGS=', text)
    table = [line for line in text.splitlines()
             if line.startswith('| ') and not line.startswith('| section')]
    self.assertLen(table, len(data['rows']))
    # Nothing left behind but the two files (the stores are removed).
    self.assertCountEqual(os.listdir(self.out),
                          [device_suite.MARKDOWN, device_suite.JSON])


class BudgetTest(absltest.TestCase):

  def test_a_budget_that_runs_out_leaves_a_partial_table_and_exit_zero(self):
    # The budget counts from the process's start: it is spent on imports.
    results = os.path.join(tempfile.mkdtemp(), 'RESULTS.md')
    self.addCleanup(shutil.rmtree, os.path.dirname(results))
    with open(results, 'w') as f:
      f.write('# results\n')
    done, out = _run('--tiny', '--budget-s', '0.5', '--publish', '--results',
                     results, timeout=120)
    self.addCleanup(shutil.rmtree, out, ignore_errors=True)
    self.assertEqual(done.returncode, 0, done.stderr[-3000:])
    self.assertIn('budget ran out', done.stdout)
    # The partial table is published too, between the suite's markers.
    with open(results) as f:
      published = f.read()
    with open(os.path.join(out, device_suite.MARKDOWN)) as f:
      self.assertIn(f.read(), published)
    self.assertTrue(published.startswith(f'# results\n\n{device_suite.START}'))
    rows = _load(out)['rows']
    planned = device_suite.planned(TINY_SIZES)
    self.assertCountEqual([(r['section'], r['key']) for r in rows],
                          [(section, key) for section, key, _ in planned])
    for row in rows:
      self.assertIsNone(row['ok'])
      self.assertRegex(row['check'], r'^not run: the budget \(0 s\) ran out')


class MachineryTest(absltest.TestCase):

  def test_compare_is_bitwise_then_within_tolerance_else_fails(self):
    a = np.linspace(-1, 1, 64, dtype=np.float32)
    check = device_suite.compare([(a, a.copy())], 8.0, 'x')
    self.assertTrue(check.ok)
    self.assertIn('bitwise', check.how)
    eps = float(np.finfo(np.float32).eps)  # the scale of a is 1
    near = a + 2 * eps
    check = device_suite.compare([(near, a)], 8.0, 'x')
    self.assertTrue(check.ok, check.how)
    self.assertIn('within 2.0 ulps', check.how)
    far = a.copy()
    far[3] += 1e-3
    check = device_suite.compare([(a, a), (far, a)], 8.0, 'x')
    self.assertFalse(check.ok)
    self.assertIn('array #1', check.how)
    # A tolerance of 0 asks for the same bits.
    self.assertFalse(device_suite.compare([(near, a)], 0.0, 'x').ok)
    self.assertFalse(device_suite.compare([(a[:3], a[:4])], 8.0, 'x').ok)
    self.assertFalse(device_suite.compare(
        [(a.astype(np.float16), a)], 8.0, 'x').ok)
    # A NaN or an infinity is never within a tolerance, unless both sides
    # have it; integers (tokens) must be equal.
    for bad in (np.nan, np.inf):
      other = a.copy()
      other[5] = bad
      self.assertFalse(device_suite.compare([(other, a)], 8.0, 'x').ok)
      self.assertFalse(device_suite.compare([(a, other)], 8.0, 'x').ok)
      check = device_suite.compare([(other, other.copy())], 8.0, 'x')
      self.assertIn('bitwise', check.how)
      check = device_suite.compare([(other, np.where(np.isfinite(other),
                                                     near, other))], 8.0,
                                   'x')
      self.assertTrue(check.ok, check.how)
    tokens = np.arange(6, dtype=np.int32)
    check = device_suite.compare([(tokens, tokens[::-1].copy())], 8.0, 't')
    self.assertFalse(check.ok)
    self.assertIn('6 of 6 int32 elements differ', check.how)

  def test_a_row_is_one_line_of_six_cells(self):
    row = device_suite.Row('s', 'k', 'what', None, '', 'FAILED: a | b\nc',
                           False)
    line = row.line()
    self.assertNotIn('\n', line)
    self.assertEqual(line, '| s | what | - |  | FAILED: a \\| b c |  |')

  def test_sizes_count_the_parameters_of_the_model(self):
    # The header's parameter counts against the model's own Params (traced
    # abstractly: nothing of the ~2B model is allocated).
    import jax  # pylint: disable=g-import-not-at-top
    from flax import nnx  # pylint: disable=g-import-not-at-top
    for size in (*TINY_SIZES, device_suite.SMALL, device_suite.LARGE):
      with self.subTest(size.name):
        model = nnx.eval_shape(lambda s=size: device_suite.Decoder(s, True))
        params = jax.tree.leaves(nnx.state(model, nnx.Param))
        self.assertEqual(sum(p.size for p in params), size.params())
        self.assertTrue(all(p.dtype == jax.numpy.bfloat16 for p in params))
    self.assertBetween(device_suite.SMALL.params(), 250e6, 350e6)
    self.assertBetween(device_suite.LARGE.params(), 1.8e9, 2.5e9)

  def test_imports_nothing_that_installs_or_fetches(self):
    # What the suite imports: the standard library's modules of files,
    # time and threads, the pinned packages (jax, flax, numpy: what
    # `pip install '.[test]'` brings) and this repository; nothing that runs
    # a process, opens a socket or installs.
    with open(SCRIPT) as f:
      tree = ast.parse(f.read())
    imported = set()
    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        imported |= {alias.name.split('.')[0] for alias in node.names}
      elif isinstance(node, ast.ImportFrom):
        imported.add(node.module.split('.')[0])
    allowed = {'__future__', 'argparse', 'dataclasses', 'json', 'os',
               'platform', 'shutil', 'statistics', 'sys', 'tempfile',
               'threading', 'time', 'typing', 'warnings', 'traceback',
               '_worktree', 'results_file', 'measure', 'sow_external_models',
               'flax', 'jax', 'numpy'}
    self.assertLessEqual(imported, allowed)
    self.assertNotIn('subprocess', imported)

  def test_paired_runs_each_side_alternately(self):
    calls = []
    medians = device_suite.paired(lambda: calls.append('a'),
                                  lambda: calls.append('b'), repeats=3,
                                  number=2, warmup=1)
    self.assertLen(medians, 2)
    self.assertEqual(''.join(calls), 'ab' + 'aabb' * 3)

  def test_a_failed_oracle_fails_the_run_and_publishes_between_markers(self):
    def fake(section_of, failing=()):
      def rows(*args, **kwargs):
        del args, kwargs
        return [device_suite.Row(section, key, what, 1.0, 'x vs y',
                                 'FAILED: made up' if key in failing
                                 else 'ok: made up', key not in failing)
                for section, key, what in device_suite.planned(TINY_SIZES)
                if section_of(section)]
      return rows

    out = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, out, ignore_errors=True)
    results = os.path.join(out, 'RESULTS.md')
    with open(results, 'w') as f:
      f.write(f'before\n{device_suite.START}\nold\n{device_suite.END}\n'
              'after\n')
    compiled = [0]

    def compiled_rows(size, settings):
      compiled[0] += 1
      rows = fake(lambda s: s == f'compiled {size.name}')(size, settings)
      for row in rows:
        row.numbers = {'compile_s': {'plain': 0.0, 'hand': 0.0, 'sow': 0.0,
                                     'tap': 0.0}, 'paired_s': 0.0}
      return rows

    with mock.patch.multiple(
        device_suite, bench_compiled=compiled_rows,
        bench_decode_own=fake(lambda s: s == 'decode'),
        bench_export=fake(lambda s: s == 'export', failing=('bytes_per_s',)),
        bench_eager=fake(lambda s: s == 'eager'),
        # A process that has run for hours (a test worker): the budget of a
        # call counts from the call, or its watchdog would end the process.
        _PROCESS_START=time.perf_counter() - 10_000), \
        mock.patch.dict(os.environ):
      os.environ.pop(device_suite.MODELS_FROM_ENV, None)
      status = device_suite.main(['--tiny', '--out', out, '--publish',
                                  '--results', results])
    self.assertEqual(status, 1)
    self.assertEqual(compiled[0], 2)
    rows = _load(out)['rows']
    self.assertEqual([r['key'] for r in rows if r['ok'] is False],
                     ['bytes_per_s'])
    with open(results) as f:
      content = f.read()
    self.assertTrue(content.startswith(f'before\n{device_suite.START}\n'))
    self.assertTrue(content.endswith(f'{device_suite.END}\nafter\n'))
    self.assertNotIn('\nold\n', content)
    self.assertIn('| export | bytes/s written', content)
    self.assertIn('FAILED: made up', content)


class FlaxSamplerDecodeTest(absltest.TestCase):
  """The decode rows on Flax's own examples/gemma sampler, given its
  checkout (``FLAX_SOW_MODELS_FROM``, as the external parity tests)."""

  def test_rows_pass_their_oracle(self):
    models_from = os.environ.get(device_suite.MODELS_FROM_ENV)
    if not models_from:
      self.skipTest(f'no checkout: set {device_suite.MODELS_FROM_ENV}')
    settings = device_suite.Settings(tiny=True, repeats=1, number=1,
                                     ulps=8.0)
    rows = device_suite.bench_decode_flax(device_suite.TINY_SMALL, settings,
                                          4, models_from)
    self.assertEqual([r.key for r in rows], ['truncate', 'error'])
    for row in rows:
      with self.subTest(row.key):
        self.assertIs(row.ok, True, row.check)
        self.assertIn("logits against the sampler's own, and the tokens "
                      'bitwise', row.check)
        self.assertIn('the logits of the last residual streams', row.check)
        self.assertIn('Flax examples/gemma sampler (google/flax@', row.what)


  def test_a_checkout_that_is_not_there_is_named_and_the_own_loop_runs(self):
    # The own loop itself runs in the --tiny run; here, that it is the one
    # run, and that its rows name the checkout that was not loaded.
    settings = device_suite.Settings(tiny=True, repeats=1, number=1,
                                     ulps=8.0)
    missing = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, missing, ignore_errors=True)
    own = [device_suite.Row('decode', key, 'own', 1.0, '', 'ok: x', True,
                            'by hand')
           for key in ('truncate', 'error')]
    with mock.patch.object(device_suite, 'bench_decode_own',
                           return_value=own) as run_own:
      rows = device_suite.bench_decode(device_suite.TINY_SMALL, settings, 2,
                                       2, missing)
    run_own.assert_called_once_with(device_suite.TINY_SMALL, settings, 2, 2)
    self.assertEqual([r.key for r in rows], ['truncate', 'error'])
    for row in rows:
      self.assertEqual(row.detail, "by hand; Flax's sampler not loaded: no "
                       f'google/flax checkout with examples/gemma/ at '
                       f'{os.path.join(missing, "flax")}')


class ReadmeCommandTest(absltest.TestCase):
  """benchmarks/README.md: the one command for a fresh accelerator machine."""

  def test_the_command_sets_up_as_the_readme_and_runs_the_suite(self):
    with open(os.path.join(ROOT, 'benchmarks', 'README.md')) as f:
      text = f.read()
    blocks = re.findall(r'^```bash\n(.*?)^```$', text,
                        re.MULTILINE | re.DOTALL)
    self.assertLen(blocks, 1)
    (command,) = blocks[0].strip().split('\n')
    # The README's test set-up, then JAX's CUDA plugin at the pinned jax.
    setup = ("python3 -m venv .venv && . .venv/bin/activate && "
             "pip install '.[test]'")
    self.assertTrue(command.startswith(setup + ' '), command)
    with open(os.path.join(ROOT, 'README.md')) as f:
      self.assertIn(setup + ' && python -m pytest -q', f.read())
    install, run = command[len(setup):].split(' && ')
    with open(os.path.join(ROOT, 'pyproject.toml'), 'rb') as f:
      pins = tomllib.load(f)['project']['dependencies']
    (jax_pin,) = [pin for pin in pins if pin.startswith('jax==')]
    self.assertEqual(install.split(),
                     [f"'jax[cuda12]=={jax_pin[len('jax=='):]}'"])
    words = run.split()
    self.assertEqual(words[:2], ['python', 'benchmarks/device_suite.py'])
    args = device_suite.make_parser().parse_args(words[2:])
    self.assertFalse(args.tiny)
    self.assertTrue(args.out.startswith('build/'))  # ignored by git
    # Its links lead somewhere.
    for link in re.findall(r'\]\(([^)#]+)(?:#[^)]*)?\)', text):
      with self.subTest(link=link):
        self.assertTrue(os.path.exists(
            os.path.join(ROOT, 'benchmarks', link)), link)


if __name__ == '__main__':
  absltest.main()
