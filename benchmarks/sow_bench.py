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
"""Benchmarks of flax.nnx.sow, written to benchmarks/RESULTS.md.

Every figure is a ratio of things measured side by side in one run: the
sides alternate repeat by repeat (so a change in machine load hits all of
them), and each side's figure is the median of its repeats after a warm-up.

Run from the repository root:
python benchmarks/sow_bench.py [--quick] [--only ITEMS] [--publish]
    [--models_from PATH]
(``--publish`` also puts the table into the main guide; the README quotes
no figure, it links to the results file).

Item 7 runs Flax's examples/gemma from a checkout of google/flax at
``PATH/flax`` (the layout of ``tests/nnx/sow/sow_external_models.py``), given by
``--models_from PATH`` or the environment variable ``FLAX_SOW_MODELS_FROM``;
without it, it is skipped. ``--only`` runs some items and replaces only
their rows in the results file, keeping the others. Item 8 (cache
behaviour) counts compilations and cache entries rather than timing them.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import typing as tp
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import _worktree  # noqa: E402,F401  (import flax.nnx.sow from this tree)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
import numpy as np  # noqa: E402

from flax.nnx.sow import capture, plant, sow  # noqa: E402
from flax.nnx.sow import tap as sow_tap  # noqa: E402
from measure import count_compiles, paired  # noqa: E402  (beside this script)


@dataclasses.dataclass
class Row:
  """One line of the results table."""

  item: str
  what: str
  ratio: float
  target: str
  ok: tp.Optional[bool]
  detail: str = ''


# 1. Eager capture of a jitted 24-layer MLP --------------------------------


def mlp(params, x):
  for i, w in enumerate(params):
    x = sow(jnp.tanh(x @ w), name=('layer', i))
  return x


def mlp_by_hand(params, x):
  """The same MLP returning its intermediates itself: the physical limit."""
  hidden = []
  for w in params:
    x = jnp.tanh(x @ w)
    hidden.append(x)
  return x, hidden


def bench_eager_jit(quick: bool) -> list[Row]:
  rows = []
  for batch, width in ((8, 64), (128, 512)):
    keys = jax.random.split(jax.random.key(0), 24)
    params = [jax.random.normal(k, (width, width)) / np.sqrt(width)
              for k in keys]
    x = jnp.ones((batch, width))
    plain, by_hand = jax.jit(mlp), jax.jit(mlp_by_hand)
    captured = capture(plain)
    # About 0.1 s per repeat; many repeats, since this machine is noisy.
    number = max(1, int(0.1 / (batch * width * width * 24 * 2.5e-11 + 1e-4)))
    repeats = 5 if quick else 21
    # The three side by side, so that capture / hand is measured as such.
    t_plain, t_hand, t_capture = paired(
        lambda: plain(params, x), lambda: by_hand(params, x),
        lambda: captured(params, x), repeats=repeats, number=number)
    ratio = t_capture / t_plain
    limit = t_hand / t_plain
    rows.append(Row(
        '1', f'eager capture(jax.jit(f)) / jax.jit(f), 24-layer MLP '
        f'{batch}x{width}', ratio, '<= 1.15', ratio <= 1.15,
        f'jit(f) {t_plain * 1e6:.0f} us; returning the 24 intermediates by '
        f'hand costs {limit:.2f}x jit(f), capture {ratio / limit:.2f}x that',
    ))
  return rows


# 2. Trace + lower of big programs ------------------------------------------


def make_program(n_layers: int):
  """A fresh function (no JAX cache can hit) of ~3 equations per layer."""
  def f(x):
    for i in range(n_layers):
      x = jnp.sin(x) * 1.01 + 0.5
      if i % 10 == 0:
        x = sow(x, name=('layer', i))
    return x
  return f


def bench_trace_lower(quick: bool) -> list[Row]:
  rows, per_eqn = [], []
  x = jnp.ones(16)
  sizes = (330, 3300) if quick else (330, 3300, 33000)
  for n_layers in sizes:
    n_eqns = len(jax.make_jaxpr(make_program(n_layers))(x).eqns)
    repeats = 11 if n_layers < 30000 else 5  # small ones are noisier
    t_plain, t_capture = paired(
        lambda: jax.jit(make_program(n_layers)).lower(x),
        lambda: jax.jit(capture(make_program(n_layers))).lower(x),
        repeats=repeats, warmup=1 if n_layers < 30000 else 0,
    )
    ratio = t_capture / t_plain
    per_eqn.append(t_capture / n_eqns)
    rows.append(Row(
        '2', f'jax.jit(capture(f)).lower / jax.jit(f).lower, {n_eqns} eqns',
        ratio, '<= 1.1', ratio <= 1.1,
        f'plain {t_plain:.3f} s, capture {t_capture:.3f} s; '
        f'{t_capture / n_eqns * 1e6:.1f} us per equation',
    ))
  growth = per_eqn[-1] / per_eqn[0]
  rows.append(Row(
      '2', 'time per equation, largest / smallest program (linear = 1)',
      growth, 'flat (<= 1.5)', growth <= 1.5,
      ', '.join(f'{t * 1e6:.1f}' for t in per_eqn) + ' us per equation',
  ))
  return rows


def many_sows_child(n_layers: int, repeats: int, collector: int) -> None:
  """Prints, for ``bench_many_sows``, the staging times of the three sides,
  then the garbage collections each ran per call: young ones (generation 0),
  then full ones (generation 2).

  With ``collector`` 0, the garbage collector is off: the staging work alone.
  """
  if not collector:
    gc.disable()
  width = 16
  keys = jax.random.split(jax.random.key(2), n_layers)
  params = [jax.random.normal(k, (width, width)) / 4 for k in keys]
  x = jnp.ones((4, width))
  sides = (
      lambda: jax.jit(lambda p, x: mlp(p, x)).lower(params, x),
      lambda: jax.jit(lambda p, x: mlp_by_hand(p, x)).lower(params, x),
      lambda: jax.jit(capture(lambda p, x: mlp(p, x))).lower(params, x),
  )
  counts = [[0, 0] for _ in sides]  # per side: young, full
  current = [None]

  def count(phase, info):
    side = current[0]
    if phase == 'stop' and side is not None and info['generation'] != 1:
      counts[side][info['generation'] // 2] += 1

  def counted(i, side):
    def run():
      current[0] = i
      try:
        return side()
      finally:
        current[0] = None
    return run

  for side in sides:  # the warm-up, not counted
    side()
  gc.callbacks.append(count)
  times = paired(*(counted(i, side) for i, side in enumerate(sides)),
                 repeats=repeats, warmup=0)
  gc.callbacks.remove(count)
  print(*times, *(young / repeats for young, _ in counts),
        *(full / repeats for _, full in counts))


@dataclasses.dataclass(frozen=True)
class ManySows:
  """One process of ``bench_many_sows``: per side (``jax.jit(f)``, the
  hand-written ``f``, capture), the median staging time, and the young and
  full garbage collections per call."""

  times: tuple[float, float, float]
  young: tuple[float, float, float]
  full: tuple[float, float, float]


def _many_sows_in_processes(
    n_layers: int, processes: int, repeats: int, collector: bool
) -> list[ManySows]:
  runs = []
  for _ in range(processes):
    words = _child_output('--many_sows_child', str(n_layers), str(repeats),
                          str(int(collector)))
    values = tuple(map(float, words[-9:]))
    runs.append(ManySows(values[:3], values[3:6], values[6:]))
  return runs


def _child_output(*flags: str) -> list[str]:
  """The words this script prints when run in a fresh process with flags."""
  result = subprocess.run(
      [sys.executable, os.path.abspath(__file__), *flags],
      check=True, capture_output=True, text=True,
  )
  return result.stdout.split()


def bench_many_sows(quick: bool) -> list[Row]:
  """Staging cost with a sow on every layer, against ``f`` and by hand.

  Fresh function objects, so that no JAX cache can hit; the weights are
  arguments, as in a training step. The garbage collector runs as it would
  (not between repeats): its full collections, which come at a rate set by
  how many objects a side allocates, are part of each side's cost.

  Each process measures the sides alternating, and the figure is the median
  over fresh processes of their ratios: the speed of staging in one process
  depends on its hash seed and memory layout (on 2 shared cores, medians of
  ``jax.jit(f).lower`` of one program ranged from 0.11 s to 0.19 s between
  processes), which no number of repeats inside one process averages out.
  """
  rows = []
  processes = 2 if quick else 7
  repeats = 3 if quick else 7
  for n_layers in (500,) if quick else (50, 500, 2000):
    runs = _many_sows_in_processes(n_layers, processes, repeats, True)
    ratios = sorted(captured / plain
                    for plain, _, captured in (run.times for run in runs))
    by_hand = [captured / hand
               for _, hand, captured in (run.times for run in runs)]
    ratio = statistics.median(ratios)
    plain = statistics.median(run.times[0] for run in runs)
    hand = statistics.median(run.times[1] for run in runs)
    rows.append(Row(
        '2', f'jax.jit(capture(f)).lower / jax.jit(f).lower, MLP with a sow '
        f'on each of {n_layers} layers, median over {processes} processes',
        ratio, '<= 1.1', ratio <= 1.1,
        f'per process {ratios[0]:.2f} to {ratios[-1]:.2f}; '
        f'jit(f) {plain:.3f} s (median)',
    ))
    rows.append(Row(
        '2', f'jax.jit(capture(f)).lower / hand-written f returning the '
        f'{n_layers} values, same MLP', statistics.median(by_hand),
        'reported', None,
        f'hand {hand:.3f} s, {hand / plain:.2f}x jit(f) (medians)',
    ))
    # What the collector does to each side: a full collection walks every
    # object of the process (~0.07 s here), and comes after a fixed number
    # of young ones, which come with the objects a side keeps alive. Capture
    # stages the hand-written program (its sows leave no equation, see
    # flax/nnx/sow/transform/staged_sows.py) after a trace of its own, so it keeps about
    # what `jax.jit(f)` keeps; before it did, it kept more, and these rows
    # showed where its extra time went.
    young = [statistics.mean(run.young[i] for run in runs) for i in range(3)]
    full = [statistics.mean(run.full[i] for run in runs) for i in range(3)]
    rows.append(Row(
        '2', f'young garbage collections per staging, capture / jax.jit(f), '
        f'{n_layers} layers', young[2] / young[0], 'reported', None,
        'per call, jit(f) / hand / capture: young '
        + ' / '.join(f'{v:.1f}' for v in young) + '; full '
        + ' / '.join(f'{v:.2f}' for v in full) + ' (means over processes)',
    ))
    quiet = _many_sows_in_processes(n_layers, processes, repeats, False)
    rows.append(Row(
        '2', f'the same, {n_layers} layers, garbage collector off (the '
        'staging work alone)',
        statistics.median(run.times[2] / run.times[0] for run in quiet),
        'reported', None,
        f'jit(f) {statistics.median(run.times[0] for run in quiet):.3f} s '
        '(median)',
    ))
  return rows


# 3. Compiled runtime against the hand-written limit ------------------------


def count_hlo_ops(compiled) -> int:
  text = compiled.as_text()
  return len(re.findall(r'^\s+\S+ = ', text, re.MULTILINE))


def bench_compiled(quick: bool) -> list[Row]:
  keys = jax.random.split(jax.random.key(1), 24)
  params = [jax.random.normal(k, (256, 256)) / 16 for k in keys]
  x = jnp.ones((64, 256))
  captured = jax.jit(capture(mlp))
  by_hand = jax.jit(mlp_by_hand)
  plain = jax.jit(mlp)
  number = 20 if quick else 100
  t_hand, t_capture = paired(lambda: by_hand(params, x),
                             lambda: captured(params, x),
                             repeats=9, number=number)
  t_plain, t_hand2 = paired(lambda: plain(params, x),
                            lambda: by_hand(params, x),
                            repeats=9, number=number)
  ops_capture = count_hlo_ops(captured.lower(params, x).compile())
  ops_hand = count_hlo_ops(by_hand.lower(params, x).compile())
  ratio = t_capture / t_hand
  return [
      Row('3', 'jax.jit(capture(f)) / hand-written f returning the same '
          'intermediates, runtime', ratio, '1.00 +- 0.05',
          abs(ratio - 1) <= 0.05,
          f'hand {t_hand * 1e6:.0f} us, capture {t_capture * 1e6:.0f} us'),
      Row('3', 'optimized HLO ops, capture / hand-written',
          ops_capture / ops_hand, '1.00 (no extra computation)',
          ops_capture == ops_hand, f'{ops_capture} vs {ops_hand} ops'),
      Row('3', 'hand-written with intermediates / jax.jit(f) alone, runtime '
          '(the cost of materializing the values)', t_hand2 / t_plain,
          'reported', None,
          f'jit(f) {t_plain * 1e6:.0f} us'),
      bench_fn_plant(params, x, number),
  ]


def mlp_steered_by_hand(params, x, vec):
  """``mlp`` edited by hand: ``vec`` added to every layer's output."""
  for w in params:
    x = jnp.tanh(x @ w) + vec
  return x


def bench_fn_plant(params, x, number: int) -> Row:
  """Steering every layer with ``plant(f, {name: fn})`` under ``jax.jit``,
  the vector an argument, against the function edited by hand."""
  names = [('layer', i) for i in range(len(params))]
  steered = jax.jit(lambda params, x, vec: plant(
      mlp, {name: (lambda v, _: v + vec) for name in names})(params, x))
  edited = jax.jit(mlp_steered_by_hand)
  vec = jnp.full((x.shape[-1],), 0.01)
  # The same values, to float32 rounding: the two are different programs.
  np.testing.assert_allclose(steered(params, x, vec), edited(params, x, vec),
                             rtol=1e-5, atol=1e-5)
  t_edit, t_steer = paired(lambda: edited(params, x, vec),
                           lambda: steered(params, x, vec),
                           repeats=9, number=number)
  ratio = t_steer / t_edit
  ops_steer = count_hlo_ops(steered.lower(params, x, vec).compile())
  ops_edit = count_hlo_ops(edited.lower(params, x, vec).compile())
  return Row('3', 'jax.jit(plant(f, {name: fn})) / f edited by hand, runtime'
             ' (a closed-over steering vector added at 24 layers)', ratio,
             '1.00 +- 0.05', abs(ratio - 1) <= 0.05,
             f'hand {t_edit * 1e6:.0f} us, plant {t_steer * 1e6:.0f} us;'
             f' optimized HLO ops {ops_steer} vs {ops_edit}')


# 4. nnx: transform-backed nnx.capture vs legacy vs plain -------------------


def bench_nnx(quick: bool) -> list[Row]:
  try:
    from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top
  except ImportError:
    return [Row('4', 'nnx.capture: new / legacy', float('nan'),
                '<= 1.25 eager, equal under nnx.jit', None,
                'flax.nnx.capture_compat is not available')]
  from flax import nnx  # pylint: disable=g-import-not-at-top

  # Flax's own capture, kept from before the install, stays usable while
  # installed; one context for the whole item keeps install/uninstall out of
  # the timings. A plain call of a sowing
  # model takes Flax's deprecated path, which warns: not measured here.
  warnings.filterwarnings('ignore', category=DeprecationWarning)
  flax_capture = nnx.capture
  with capture_compat.install():
    return _bench_nnx_installed(quick, capture_compat, nnx, flax_capture)


def _bench_nnx_installed(quick, capture_compat, nnx,
                         flax_capture) -> list[Row]:
  """Item 4, with capture_compat installed."""

  class Block(nnx.Module):

    def __init__(self, din, dout, rngs):
      self.linear = nnx.Linear(din, dout, rngs=rngs)

    def __call__(self, x):
      y = nnx.relu(self.linear(x))
      self.sow(nnx.Intermediate, 'act', y)
      return y

  class Model(nnx.Module):

    def __init__(self, rngs):
      self.blocks = nnx.List([Block(64, 64, rngs) for _ in range(8)])

    def __call__(self, x):
      for block in self.blocks:
        x = block(x)
      return x

  model = Model(nnx.Rngs(0))
  x = jnp.ones((16, 64))
  new = capture_compat.capture(model, nnx.Intermediate)
  old = flax_capture(model, nnx.Intermediate)
  number = 5 if quick else 20
  t_old, t_new = paired(lambda: old(x), lambda: new(x), repeats=7,
                        number=number)
  t_plain, _ = paired(lambda: model(x), lambda: model(x), repeats=3,
                      number=number)
  rows = [Row('4', 'eager: new nnx.capture / legacy, 8-block MLP',
              t_new / t_old, '<= 0.9', t_new / t_old <= 0.9,
              f'plain model(x) {t_plain * 1e6:.0f} us, legacy '
              f'{t_old * 1e6:.0f} us, new {t_new * 1e6:.0f} us')]

  @nnx.jit
  def step_new(model, x):
    return capture_compat.capture(model, nnx.Intermediate)(x)

  @nnx.jit
  def step_old(model, x):
    return flax_capture(model, nnx.Intermediate)(x)

  # Both sides run nnx.jit's per-call Python (split, merge) around the same
  # compiled program, so the ratio is mostly noise: more calls per repeat,
  # and legacy against itself (A/A) to show the noise of this machine.
  number = 10 if quick else 50
  t_old, t_new = paired(lambda: step_old(model, x),
                        lambda: step_new(model, x), repeats=9, number=number)
  t_aa, t_aa2 = paired(lambda: step_old(model, x),
                       lambda: step_old(model, x), repeats=9, number=number)
  ops_old = count_hlo_ops(step_old.lower(model, x).compile())
  ops_new = count_hlo_ops(step_new.lower(model, x).compile())
  rows.append(Row('4', 'under nnx.jit: new nnx.capture / legacy',
                  t_new / t_old, 'equal (<= 1.05)', t_new / t_old <= 1.05,
                  f'legacy {t_old * 1e6:.0f} us, new {t_new * 1e6:.0f} us;'
                  f' legacy / legacy (A/A noise) {t_aa2 / t_aa:.2f};'
                  f' optimized HLO ops {ops_new} vs {ops_old}'))
  return rows


# 5. Memory of a sow in a long scan -----------------------------------------


def bench_memory(quick: bool) -> list[Row]:
  length, width = 10_000, 256

  def body(c, _):
    c = jnp.tanh(c * 1.01)
    sow(c, name='c')
    return c, None

  def f(x):
    return lax.scan(body, x, None, length=length)[0]

  x = jnp.ones(width)
  plain = jax.jit(f).lower(x).compile().memory_analysis()
  captured = jax.jit(capture(f)).lower(x).compile().memory_analysis()
  captured_bytes = length * width * x.dtype.itemsize

  def total(m):
    return (m.temp_size_in_bytes + m.output_size_in_bytes
            + m.argument_size_in_bytes)

  ratio = total(captured) / (total(plain) + captured_bytes)
  return [Row(
      '5', f'peak memory of capture / (plain + captured bytes), scan of '
      f'length {length}', ratio, '~1.00 (nothing more)', ratio <= 1.05,
      f'plain {total(plain)} B, captured values {captured_bytes} B, '
      f'capture {total(captured)} B (temp {captured.temp_size_in_bytes} B)',
  )]


def elementwise_chain(x, keep):
  """60 elementwise steps; ``keep`` (a sow, or a list's append) gets 3."""
  for i in range(60):
    x = jnp.sin(x) if i % 2 else x * 1.01
    if i % 20 == 19:
      x = keep(x, ('step', i))
  return x


def eager_sowing(x):
  return elementwise_chain(x, lambda v, name: sow(v, name=name))


def eager_by_hand(x):
  kept = []
  out = elementwise_chain(x, lambda v, name: kept.append(v) or v)
  return out, kept


_EAGER_SHAPE = (1024, 1024)  # 4 MiB of float32
_EAGER_CAPTURED = 3 * 1024 * 1024 * 4  # bytes of the three sown values


def peak_rss_child(which: str) -> None:
  """In a fresh process: prints how far one eager call raises peak RSS.

  From the resident size just before the call (Linux ``/proc``) to the
  process's peak after it; both sides start alike, so a peak reached while
  importing would inflate both.
  """
  import resource  # pylint: disable=g-import-not-at-top
  x = jax.block_until_ready(jnp.ones(_EAGER_SHAPE))
  fn = {'f': eager_sowing, 'capture': capture(eager_sowing)}[which]
  gc.collect()
  with open('/proc/self/statm') as f:
    before = int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')
  jax.block_until_ready(fn(x))
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB
  print(peak - before)


def _peak_rss_increase(which: str) -> int:
  return int(_child_output('--peak_rss_child', which)[-1])


def bench_eager_memory(quick: bool) -> list[Row]:
  """Peak memory of an eager capture, and of a compiled one, by their sides.

  Eagerly, each measurement is one call in a fresh process (the peak only
  grows), the two sides alternating; compiled, XLA's memory analysis.
  """
  rows = []
  if os.path.exists('/proc/self/statm'):
    sizes = {'f': [], 'capture': []}
    for _ in range(3 if quick else 7):
      for which, runs in sizes.items():
        runs.append(_peak_rss_increase(which))
    plain, captured = (statistics.median(runs) for runs in sizes.values())
    ratio = (captured - _EAGER_CAPTURED) / plain

    def mib(size):
      return f'{size / 2**20:.1f} MiB'

    rows.append(Row(
        '5', 'eager capture(f) / eager f, peak RSS increase of one call in a '
        'fresh process, less the captured bytes; 60 elementwise ops on 4 MiB',
        ratio, '<= 1.2', ratio <= 1.2,
        f'f {mib(plain)}, capture {mib(captured)}, captured values '
        f'{mib(_EAGER_CAPTURED)}; medians of {len(sizes["f"])} processes',
    ))
  else:
    print('[5] eager peak memory skipped: no /proc/self/statm')
  rows.append(compiled_peak_memory())
  return rows


def compiled_peak_memory() -> Row:
  x = jnp.ones(_EAGER_SHAPE)
  hand, captured = (
      jax.jit(g).lower(x).compile().memory_analysis().peak_memory_in_bytes
      for g in (eager_by_hand, capture(eager_sowing))
  )
  return Row(
      '5', 'jax.jit(capture(f)) / hand-written f returning the same values, '
      'peak memory (XLA memory analysis)', captured / hand, '1.00 (equal)',
      captured == hand, f'hand {hand} B, capture {captured} B',
  )


# 6. Codemod throughput -----------------------------------------------------

_PLAIN_FILE = '''import numpy as np


def helper_{i}(values):
  """A file that uses none of the sow APIs."""
  total = 0
  for v in values:
    total += np.sum(v) * {i}
  return total
''' + '\n'.join(f'\n\ndef extra_{{i}}_{k}(x):\n  return x * {k} + 1\n'
                for k in range(20))

_SOW_FILE = '''from flax import nnx


class Block{i}(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    if True:
      self.sow(nnx.Intermediate, 'act', y)
    return y
'''


def bench_codemod(quick: bool) -> list[Row]:
  script = os.path.join(ROOT, 'scripts', 'migrate', 'migrate_sow.py')
  n_files = 1000
  rows = []
  with tempfile.TemporaryDirectory() as plain_dir, \
      tempfile.TemporaryDirectory() as mixed_dir:
    for i in range(n_files):
      with open(os.path.join(plain_dir, f'f{i}.py'), 'w') as f:
        f.write(_PLAIN_FILE.format(i=i))
      with open(os.path.join(mixed_dir, f'f{i}.py'), 'w') as f:
        f.write((_SOW_FILE if i % 3 == 0 else _PLAIN_FILE).format(i=i))

    def run(path):
      start = time.perf_counter()
      subprocess.run([sys.executable, script, '--jobs', '2', path],
                     check=False, capture_output=True)
      return time.perf_counter() - start

    t_plain = statistics.median(run(plain_dir) for _ in range(3))
    t_mixed = statistics.median(run(mixed_dir) for _ in range(1 if quick
                                                             else 3))
  rate = n_files / t_plain
  rows.append(Row('6', 'codemod, files using none of the APIs (files/s, '
                  'whole CLI run)', rate, '>= 100 files/s', rate >= 100,
                  f'{n_files} files in {t_plain:.2f} s'))
  rows.append(Row('6', 'codemod, 1,000 files (1 in 3 uses the APIs), '
                  '--jobs 2 (seconds)', t_mixed, '< 30 s', t_mixed < 30,
                  f'{n_files} files in {t_mixed:.1f} s'))
  return rows


# 7. Eager nnx.capture on Flax's examples/gemma -----------------------------

MODELS_FROM_ENV = 'FLAX_SOW_MODELS_FROM'


def _small_gemma(item: str, models_from: tp.Optional[str]):
  """Flax's examples/gemma from a checkout, small, and its inputs.

  Small, so that the per-operation cost (which an eager capture adds to) is
  not hidden behind the arithmetic. Returns ``None`` (saying why) without a
  checkout; else ``(external, src, gemma, config, inputs)``.
  """
  models_from = models_from or os.environ.get(MODELS_FROM_ENV)
  if not models_from:
    print(f'[{item}] skipped: no --models_from PATH or {MODELS_FROM_ENV}')
    return None
  tests = os.path.join(ROOT, 'tests', 'nnx', 'sow')  # the parity suite's loader
  if tests not in sys.path:
    sys.path.insert(0, tests)
  import sow_external_models as external  # pylint: disable=g-import-not-at-top
  try:
    src = external.source('flax', models_from)
  except external.MissingSource as e:
    print(f'[{item}] skipped: {e}')
    return None
  gemma = external.load_gemma(src.root)
  kinds = gemma.modules.AttentionType
  layers = 4
  config = gemma.transformer.TransformerConfig(
      num_layers=layers, num_embed=256, embed_dim=64, hidden_dim=128,
      num_heads=4, head_dim=16, num_kv_heads=2, final_logit_softcap=30.0,
      use_post_attn_norm=True, use_post_ffw_norm=True,
      attention_types=(kinds.LOCAL_SLIDING, kinds.GLOBAL) * (layers // 2),
      attn_logits_soft_cap=50.0, sliding_window_size=8, use_qk_norm=True)
  batch, length = 2, 32
  tokens = jax.random.randint(jax.random.key(0), (batch, length), 0, 256)
  positions = jnp.tile(jnp.arange(length), (batch, 1))
  mask = jnp.tril(jnp.ones((batch, length, length), jnp.bool_))
  return external, src, gemma, config, (tokens, positions, None, mask)


def bench_gemma(quick: bool, models_from: tp.Optional[str]) -> list[Row]:
  """Eager nnx.capture of Flax's Gemma, legacy and new; no rows without it.

  Args:
    quick: fewer calls and repeats.
    models_from: the directory holding ``flax/`` (else the environment's
      ``FLAX_SOW_MODELS_FROM``).

  Returns:
    The ratio of the eager call times, and the new implementation's XLA
    compiles over repeated calls; nothing when the checkout is missing.
  """
  setup = _small_gemma('7', models_from)
  if setup is None:
    return []
  external, src, gemma, config, inputs = setup
  layers, (batch, length) = config.num_layers, inputs[0].shape
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top

  sow_config = external.gemma_sow_config(gemma,
                                         external.GEMMA_SOW_OPTIONS)

  flax_capture = nnx.capture  # Flax's own, kept from before the install
  with external.gemma_mesh(), capture_compat.install():
    # One model for both: the same weights, the same input.
    model = gemma.transformer.Transformer(config, rngs=nnx.Rngs(params=0),
                                          sow_config=sow_config)
    new = capture_compat.capture(model, nnx.Intermediate)
    old = flax_capture(model, nnx.Intermediate)
    sites = len(jax.tree.leaves(new(*inputs)[1]))
    jax.block_until_ready((old(*inputs), new(*inputs)))  # the first calls
    calls = 5 if quick else 20
    compiles_old = count_compiles(lambda: old(*inputs), calls)
    compiles_new = count_compiles(lambda: new(*inputs), calls)
    t_old, t_new = paired(lambda: old(*inputs), lambda: new(*inputs),
                          repeats=5 if quick else 11, number=3)
  ratio = t_new / t_old
  what = (f'Flax examples/gemma, {layers} layers, {sites} sown values, '
          f'batch {batch} x {length} tokens')
  return [
      Row('7', f'eager: new nnx.capture / legacy, {what}', ratio, '<= 0.9',
          ratio <= 0.9,
          f'legacy {t_old * 1e3:.1f} ms, new {t_new * 1e3:.1f} ms; '
          f'{src.repo}@{src.commit[:12]}'),
      Row('7', f'XLA compiles in {calls} eager calls after the first, new '
          f'nnx.capture (legacy: {compiles_old})', compiles_new, '0',
          compiles_new == 0, f'{what}'),
  ]


# D. Decode loops: per-step capture in Flax's Gemma sampler ------------------


def _decode_call(external, gemma, config, model, steps: int):
  """The sampler's jitted-to-be decode function for ``model``, its
  arguments for two prompts decoded ``steps`` steps past the longest, and
  the loop's bound."""
  from flax import nnx  # pylint: disable=g-import-not-at-top

  sampler = gemma.sampler.Sampler(
      vocab=external.CharVocab(config.num_embed), cache_size=steps + 16,
      transformer=model)
  prompts = [sampler.tokenize(p) for p in ('abcdefgh', 'ijklmn')]
  longest = max(len(p) for p in prompts)
  state = sampler.init_sample_state(
      prompts, total_sampling_steps=longest + steps, include_logits=True,
      forbidden_token_ids=None, temperature=0.0, top_p=0.95,
      seed=jax.random.key(0))
  graphdef, params = nnx.split(model)
  decode = sampler._sample_fn  # pylint: disable=protected-access
  return decode, (graphdef, params, state), longest + steps


def bench_decode(quick: bool, models_from: tp.Optional[str]) -> list[Row]:
  """Flax's examples/gemma sampler, its decode loop (a ``while_loop``)
  compiled plain and with every step's residual stream and logits captured
  (``capture(..., max_steps=N)``), side by side; no rows without a checkout.

  The model is the small Gemma of item 7, instrumented as the decode-loop
  tests instrument it (``sow_external_models.instrument_decoder``: a sow of
  each layer's output and of the logits, identities outside a capture), so
  both programs run the same model. Time: the median of paired calls of the
  two jitted decode functions on the same sampling state. Memory: XLA's
  memory analysis of each compiled program (arguments + outputs + temps),
  against the plain program's plus the bytes of the buffers the capture
  returns.
  """
  setup = _small_gemma('D', models_from)
  if setup is None:
    return []
  external, src, gemma, config, _ = setup
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top

  steps = 16 if quick else 48
  with external.gemma_mesh(), capture_compat.install():
    model = external.instrument_decoder(
        gemma.transformer.Transformer(config, rngs=nnx.Rngs(params=0)))
    decode, args, bound = _decode_call(external, gemma, config, model, steps)
    runs = {
        policy: capture(decode, max_steps=bound, on_overflow=policy)
        for policy in ('truncate', 'error')
    }
    _, collected = jax.jit(runs['truncate'])(*args)
    buffer_bytes = sum(
        leaf.nbytes for entries in collected.values() for entry in entries
        for leaf in jax.tree.leaves(entry.values))
    counts = {int(entry.count) for entries in collected.values()
              for entry in entries}
    jitted = [jax.jit(f) for f in (decode, runs['truncate'], runs['error'])]
    times = paired(*(lambda f=f: f(*args) for f in jitted),
                   repeats=5 if quick else 15)
    memory = [f.lower(*args).compile().memory_analysis() for f in jitted]

  def total(m):
    return (m.temp_size_in_bytes + m.output_size_in_bytes
            + m.argument_size_in_bytes)

  t_plain, t_truncate, t_error = times
  what = (f'Flax examples/gemma sampler, {config.num_layers} layers, '
          f'{len(collected)} sites, {sorted(counts)} steps of {bound}')
  rows = [
      Row('D', f'decode loop with every step captured / plain, {what}',
          t_truncate / t_plain, '<= 1.05', t_truncate / t_plain <= 1.05,
          f"on_overflow='truncate': plain {t_plain * 1e3:.2f} ms, captured"
          f' {t_truncate * 1e3:.2f} ms; {src.repo}@{src.commit[:12]}'),
      Row('D', "the same, on_overflow='error' (the default: one host "
          'callback a call checks the count)', t_error / t_plain, 'info',
          None, f'captured {t_error * 1e3:.2f} ms'),
  ]
  for policy, m in zip(('truncate', 'error'), memory[1:]):
    ratio = total(m) / (total(memory[0]) + buffer_bytes)
    rows.append(Row(
        'D', f"peak memory of the captured decode loop ({policy}) / (plain +"
        f' the buffers), {what}', ratio, '~1.00 (nothing more)',
        ratio <= 1.05,
        f'plain {total(memory[0])} B, buffers {buffer_bytes} B, captured '
        f'{total(m)} B (temp {m.temp_size_in_bytes} B)'))
  return rows + _bench_decode_see_through(quick, setup, steps)


def _bench_decode_see_through(quick, setup, steps) -> list[Row]:
  """The sampler of a model built with Gemma's ``SowConfig``, whose own
  ``nnx.capture`` takes the residual streams at every step: captured around
  it with ``see_through=True`` (every step's values, the sampler's capture
  still getting them) against the same decode loop alone."""
  external, src, gemma, config, _ = setup
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top

  sow_config = gemma.sow_lib.SowConfig(rs_after_attention=True,
                                       rs_after_ffw=True)
  with external.gemma_mesh(), capture_compat.install():
    model = gemma.transformer.Transformer(config, rngs=nnx.Rngs(params=0),
                                          sow_config=sow_config)
    decode, args, bound = _decode_call(external, gemma, config, model, steps)
    seen = capture(decode, max_steps=bound, on_overflow='truncate',
                   see_through=True)
    jitted = [jax.jit(decode), jax.jit(seen)]
    _, collected = jitted[1](*args)
    t_plain, t_seen = paired(*(lambda f=f: f(*args) for f in jitted),
                             repeats=5 if quick else 15)
  return [Row(
      'D', 'decode loop whose own nnx.capture (SowConfig) is seen through'
      f' at every step (capture(see_through=True)) / the loop alone,'
      f' {config.num_layers} layers, {len(collected)} sites',
      t_seen / t_plain, '<= 1.05', t_seen / t_plain <= 1.05,
      f'plain {t_plain * 1e3:.2f} ms, seen through {t_seen * 1e3:.2f} ms;'
      f' {src.repo}@{src.commit[:12]}')]


# 8. Cache behaviour ---------------------------------------------------------


def bench_cache(quick: bool) -> list[Row]:
  """Compilations and cache sizes of eager captures of a jitted function.

  With a new Python float on each call, ``capture(jax.jit(f))`` must compile
  as often as ``jax.jit(f)`` itself; with a new name predicate on each call
  (an inline ``lambda``), it must keep one runner and compile once.
  """
  import importlib  # pylint: disable=g-import-not-at-top
  from flax.nnx.sow.transform import interpreter  # pylint: disable=g-import-not-at-top
  capture_lib = importlib.import_module('flax.nnx.sow.capture')

  keys = jax.random.split(jax.random.key(0), 4)
  params = [jax.random.normal(k, (64, 64)) / 8.0 for k in keys]
  x = jnp.ones((8, 64))

  def step(params, x, lr):
    return mlp(params, x) * lr

  calls = 100
  lrs = iter([0.5 + i / calls for i in range(2 * calls)])
  direct, jitted = jax.jit(step), jax.jit(step)
  compiles_direct = count_compiles(lambda: direct(params, x, next(lrs)),
                                   calls)
  compiles = count_compiles(lambda: capture(jitted)(params, x, next(lrs)),
                            calls)
  rows = [Row(
      '8', f'cache behaviour: XLA compiles in {calls} eager calls of '
      'capture(jax.jit(f)), a new Python float on each call', compiles,
      f'= jax.jit(f) ({compiles_direct})', compiles == compiles_direct,
      f'jax.jit(f) itself: {compiles_direct}; 4-layer MLP 8x64',
  )]

  plain = jax.jit(mlp)
  n = 200 if quick else 1000
  entries = interpreter.transform.cache_info().currsize
  compiles = count_compiles(
      lambda: capture(plain, names=lambda name: name[0] == 'layer')(params, x),
      n)
  table = capture_lib._RUNNERS  # pylint: disable=protected-access
  held = len(table[plain].runners)
  grown = interpreter.transform.cache_info().currsize - entries
  t_plain, t_fresh = paired(
      lambda: plain(params, x),
      lambda: capture(plain, names=lambda name: name[0] == 'layer')(params,
                                                                    x),
      repeats=5 if quick else 11, number=20)
  rows.append(Row(
      '8', f'cache behaviour: compiled runners held after {n:,} eager calls '
      'of capture(jax.jit(f), names=<a new lambda on each call>)', held,
      '1 (at most 8)', held == 1,
      f'{compiles} XLA compile(s) in those calls; transformed-body cache '
      f'+{grown} entries; a call costs {t_fresh / t_plain:.2f}x jax.jit(f) '
      f'({t_fresh * 1e6:.0f} vs {t_plain * 1e6:.0f} us)',
  ))
  return rows


# 9. Eager calls at eager speed ----------------------------------------------


def _sowing_mlp(nnx, blocks: int):
  """An NNX MLP whose blocks sow their activations with ``sow``, which costs
  nothing outside a capture: the plain call is the model's own cost."""

  class Block(nnx.Module):

    def __init__(self, rngs):
      self.linear = nnx.Linear(64, 64, rngs=rngs)

    def __call__(self, x):
      return sow(nnx.relu(self.linear(x)), name='act')

  class Model(nnx.Module):

    def __init__(self, rngs):
      self.blocks = nnx.List([Block(rngs) for _ in range(blocks)])

    def __call__(self, x):
      for block in self.blocks:
        x = block(x)
      return x

  return Model(nnx.Rngs(0))


def _small_ops(blocks: int, sows: bool):
  """``blocks`` blocks of 20 small ``jax.numpy`` operations on a 16x64
  array, each ending in a sow (or none): every operation is one of
  ``jax.numpy``'s own jitted functions, so the cost of their dispatch is
  what a capture could add to."""

  def f(x):
    for i in range(blocks):
      for k in range(10):
        x = jnp.tanh(x) * 0.5 + jnp.sin(x)
        x = jnp.maximum(x, 0.1) - x * 0.01 if k % 2 else jnp.where(
            x > 0, x, 0.1 * x)
      if sows:
        x = sow(x, name=('block', i))
    return x

  return f


def bench_eager(quick: bool, models_from: tp.Optional[str]) -> list[Row]:
  """Eager ``capture(f)`` against the eager call of ``f`` itself.

  Outside a JAX trace, ``capture(f)`` runs ``f``'s Python on every call (as
  a direct call does) under a trace that records the sows as they are
  bound; this is what that costs. ``f`` calls a jitted helper too, whose
  compiled program must be reused: the XLA compiles after the first call
  are counted.
  """
  from flax import nnx  # pylint: disable=g-import-not-at-top

  rows = []
  x = jnp.ones((16, 64))
  head = jax.jit(lambda h: jnp.tanh(sow(h @ h.T, name='gram')))
  for blocks in (8, 24):
    model = _sowing_mlp(nnx, blocks)
    f = lambda m, x: head(m(x))
    captured = capture(f)
    t_f, t_c = paired(lambda: f(model, x), lambda: captured(model, x),
                      repeats=5 if quick else 15, number=10)
    x1 = x + 1.0  # computed (and compiled) outside the count
    compiles = count_compiles(lambda: captured(model, x1),
                              5 if quick else 20)
    rows.append(Row(
        '9', f'eager capture(f) / eager f, {blocks}-block NNX MLP 16x64 '
        '(a sow per block, a jitted head)', t_c / t_f, '<= 1.2',
        t_c / t_f <= 1.2,
        f'f {t_f * 1e3:.2f} ms, capture(f) {t_c * 1e3:.2f} ms; {compiles} '
        'XLA compiles after the first call'))
  for sows, target in ((True, 1.2), (False, 1.1)):
    f = _small_ops(10, sows)
    captured = capture(f)
    t_f, t_c = paired(lambda: f(x), lambda: captured(x),
                      repeats=5 if quick else 15, number=5)
    what = 'a sow per block' if sows else 'no sow at all: the fixed cost'
    rows.append(Row(
        '9', f'eager capture(f) / eager f, 10 blocks of 20 small jnp ops '
        f'16x64 ({what})', t_c / t_f, f'<= {target}', t_c / t_f <= target,
        f'f {t_f * 1e3:.2f} ms, capture(f) {t_c * 1e3:.2f} ms'))
  return rows + _bench_eager_gemma(quick, models_from)


def _bench_eager_gemma(quick, models_from) -> list[Row]:
  """Eager ``capture`` of Flax's Gemma against its plain eager call."""
  setup = _small_gemma('9', models_from)
  if setup is None:
    return []
  external, src, gemma, config, inputs = setup
  layers, (batch, length) = config.num_layers, inputs[0].shape
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top

  with external.gemma_mesh(), capture_compat.install():
    model = gemma.transformer.Transformer(config, rngs=nnx.Rngs(params=0))
    # Every attention and MLP call sown, by module path, without the model's
    # own sow options (which a plain call would write into attributes).
    f = sow_tap(lambda m, *a: m(*a), ('layers', '*', 'attn'),
                ('layers', '*', 'mlp'), inputs=False)
    captured = capture(f)
    sites = len(captured(model, *inputs)[1])
    plain = lambda: model(*inputs)
    t_f, t_c = paired(plain, lambda: captured(model, *inputs),
                      repeats=5 if quick else 11, number=3)
    compiles = count_compiles(lambda: captured(model, *inputs),
                              5 if quick else 20)
    # No sow at all: what a capture costs by itself.
    bare = capture(lambda m, *a: m(*a))
    t_p, t_b = paired(plain, lambda: bare(model, *inputs),
                      repeats=5 if quick else 11, number=3)
  what = (f'Flax examples/gemma, {layers} layers, {sites} tapped calls, '
          f'batch {batch} x {length} tokens')
  source = f'{src.repo}@{src.commit[:12]}'
  return [Row('9', f'eager capture(tap(f)) / eager f, {what}', t_c / t_f,
              '<= 1.3', t_c / t_f <= 1.3,
              f'f {t_f * 1e3:.1f} ms, capture {t_c * 1e3:.1f} ms; {compiles}'
              f' XLA compiles after the first call; {source}'),
          Row('9', f'eager capture(f) / eager f with no sow at all (the fixed'
              f' cost), Flax examples/gemma, {layers} layers', t_b / t_p,
              '<= 1.1', t_b / t_p <= 1.1,
              f'f {t_p * 1e3:.1f} ms, capture {t_b * 1e3:.1f} ms; {source}')]


# ---------------------------------------------------------------------------


def machine() -> str:
  return (f'{platform.machine()}, {os.cpu_count()} cores, '
          f'{platform.python_implementation()} {platform.python_version()}, '
          f'jax {jax.__version__}, {jax.devices()[0].platform} backend')


def _table_line(r: Row) -> str:
  met = {True: 'yes', False: '**no**', None: '-'}[r.ok]
  return (f'| {r.item} | {r.what} | {r.ratio:.2f} | {r.target} | '
          f'{met} | {r.detail} |')


def render(rows: list[Row], quick: bool) -> str:
  lines = [
      '# flax.nnx.sow benchmarks',
      '',
      f'Machine: {machine()}. Produced by `python benchmarks/sow_bench.py'
      f'{" --quick" if quick else ""}` on '
      f'{time.strftime("%Y-%m-%d")}. Each ratio compares two things measured '
      'side by side in one run, alternating repeat by repeat; each side is '
      'the median of its repeats after a warm-up.',
      '',
      '| # | measurement | ratio | target | met | detail |',
      '|---|---|---|---|---|---|',
  ]
  lines += [_table_line(r) for r in rows]
  return '\n'.join(lines) + '\n'


_RERUN = 'Rows of item '


def merge(existing: str, rows: list[Row], items: str, quick: bool) -> str:
  """``existing`` results with the rows of ``items`` replaced by ``rows``.

  The other rows and the header stay; a line per re-run item, below the
  machine line, says when and how its rows were produced (on this machine:
  side by side within the item, as always, but not in the same run as the
  rest of the table).
  """
  lines = existing.rstrip('\n').split('\n')
  header = lines.index('| # | measurement | ratio | target | met | detail |')
  table = [line for line in lines[header + 2:] if line.startswith('| ')]
  kept = [line for line in table if line.split('|')[1].strip() not in items]
  new = [_table_line(r) for r in rows]
  order = lambda line: line.split('|')[1].strip()
  # Stable: the rows of an item stay in the order they were produced.
  table = sorted(kept + new, key=order)
  notes = [line for line in lines[:header]
           if line.startswith(_RERUN) and line[len(_RERUN)] not in items]
  command = (f'python benchmarks/sow_bench.py --only {items}'
             f'{" --quick" if quick else ""}')
  notes += [f'{_RERUN}{item}: `{command}` on {time.strftime("%Y-%m-%d")}, '
            f'{machine()}.' for item in items]
  head = [line for line in lines[:header] if not line.startswith(_RERUN)]
  while head and not head[-1]:
    head.pop()
  return '\n'.join([*head, '', *sorted(notes), '', *lines[header:header + 2],
                    *table]) + '\n'


PUBLISHED_IN = ('docs_nnx/guides/sow_transform.md',)
ALL_ITEMS = '123456789D'
_START, _END = '<!-- bench-table:start -->', '<!-- bench-table:end -->'


# Everything after this line of the results file is written by other
# scripts (the mutation run, the codemod's real-code run) and kept as is.
OTHERS_MARKER = '<!-- sections below are written by other scripts -->'


def split_others(content: str) -> tuple[str, str]:
  """``content`` split into this script's part and the part it keeps."""
  at = content.find(OTHERS_MARKER)
  if at < 0:
    return content, ''
  return content[:at].rstrip('\n') + '\n', '\n' + content[at:]


def publish(text: str) -> None:
  """Puts the machine line and the table between the markers of each file
  of ``PUBLISHED_IN``."""
  body = text[text.index('Machine:'):].strip()
  for name in PUBLISHED_IN:
    path = os.path.join(ROOT, name)
    with open(path) as f:
      content = f.read()
    start, end = content.index(_START), content.index(_END)
    content = (content[:start + len(_START)] + '\n' + body + '\n'
               + content[end:])
    with open(path, 'w') as f:
      f.write(content)


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--quick', action='store_true',
                      help='smaller sizes and fewer repeats')
  parser.add_argument('--only', default=ALL_ITEMS,
                      help='which items to run, e.g. 12; their rows replace '
                      'those of the same items in the results file')
  parser.add_argument('--out', default=os.path.join(ROOT, 'benchmarks',
                                                     'RESULTS.md'))
  parser.add_argument('--publish', action='store_true',
                      help='also put the table into ' + ', '.join(PUBLISHED_IN))
  parser.add_argument('--models_from', default=None,
                      help='a directory with a checkout of google/flax in '
                      f'flax/, for item 7 (or ${MODELS_FROM_ENV})')
  parser.add_argument('--peak_rss_child', choices=('f', 'capture'),
                      help=argparse.SUPPRESS)  # one measurement of item 5
  parser.add_argument('--many_sows_child', nargs=3, type=int,
                      help=argparse.SUPPRESS)  # one process of item 2
  args = parser.parse_args()
  if args.peak_rss_child:
    peak_rss_child(args.peak_rss_child)
    return
  if args.many_sows_child:
    many_sows_child(*args.many_sows_child)
    return
  if args.publish and (args.quick or args.only != ALL_ITEMS):
    parser.error('--publish needs a full run: no --quick, no --only')
  benches = {'1': bench_eager_jit,
             '2': lambda quick: (bench_trace_lower(quick)
                                 + bench_many_sows(quick)),
             '3': bench_compiled, '4': bench_nnx,
             '5': lambda quick: bench_memory(quick) + bench_eager_memory(quick),
             '6': bench_codemod,
             '7': lambda quick: bench_gemma(quick, args.models_from),
             '8': bench_cache,
             '9': lambda quick: bench_eager(quick, args.models_from),
             'D': lambda quick: bench_decode(quick, args.models_from)}
  rows = []
  for item in args.only:
    gc.collect()
    new_rows = benches[item](args.quick)
    for r in new_rows:
      print(f'[{r.item}] {r.what}: {r.ratio:.2f} (target {r.target}) '
            f'{r.detail}', flush=True)
    rows.extend(new_rows)
  text = render(rows, args.quick)
  others = ''
  if os.path.exists(args.out):
    with open(args.out) as f:
      existing, others = split_others(f.read())
    if args.only != ALL_ITEMS:
      text = merge(existing, rows, args.only, args.quick)
  with open(args.out, 'w') as f:
    f.write(text + others)
  if args.publish:
    publish(text)
  print(text)


if __name__ == '__main__':
  main()
