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
"""The device suite: what only an accelerator can measure, in one process.

Run from the repository root (``benchmarks/README.md`` has the command for
a fresh accelerator machine):

python benchmarks/device_suite.py --out DIR [--budget-s S] [--tiny]
    [--models_from PATH] [--publish]

It writes ``DIR/device_suite.md`` (a header and a Markdown table) and
``DIR/device_suite.json`` (the same rows, with every number), rewritten
after each row, so that what was measured is on disk whatever happens
next. Sections, in the order they run (cheapest first, so that a budget
running out loses the most expensive):

* compiled, size S: a Gemma-shaped decoder (RMSNorm, rotary multi-query
  attention, gated GELU MLP, tied embedding; random bfloat16 weights made
  on the device), with a ``sow`` of each block's residual stream, and
  the same model without sows under ``tap`` of every block. Per variant:
  ``jax.jit(capture(f))`` against ``jax.jit(f)`` and against ``f`` written
  by hand to return the same residual streams (runtime), and the peak
  device memory of each compiled program (``compiled.memory_analysis()``).
  The smaller size (about 300M parameters) runs first, the larger (about
  2B) last.
* decode: Flax's ``examples/gemma`` sampler loop when ``--models_from``
  holds a checkout of google/flax (``PATH/flax``), else this suite's own
  loop of the same shape (a ``while_loop`` over positions with a KV cache,
  greedy); every step's residual stream captured with ``max_steps``, under
  both ``on_overflow`` policies, against the plain loop: tokens/s.
* export: ``activations.export`` of every block's residual stream against
  the bare jitted forward (examples/s), and its bytes/s against a
  sequential write of the same bytes to the same disk.
* eager: ``capture(f)`` against ``f``, and the compat ``nnx.capture``
  against Flax 0.12.8's own (taken before the layer is installed), on the
  smaller model.

Each figure is a ratio of sides measured side by side: they alternate
repeat by repeat after a warm-up, each side the median of its repeats.
Every value is checked against an oracle: captured values against the
hand-written returns (bitwise, or within the stated tolerance when the two
are different programs), the exported store against a direct forward.

``--budget-s`` (default 270) bounds the whole run: the larger size is
scaled down (fewer layers) when the smaller one's times say it would not
fit, a section that cannot start in time says so in its rows, and at the
budget's end the table is written as it stands and the process exits 0.
``--tiny`` runs every row at toy sizes on any backend (CPU in CI: well
under a minute), with the same checks. Nothing is installed or fetched.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import typing as tp
import warnings

_PROCESS_START = time.perf_counter()  # the budget counts the imports too
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import _worktree  # noqa: E402,F401  (import flax.nnx.sow from this tree)
import results_file  # noqa: E402  (benchmarks/, beside this script)
from measure import count_compiles, paired  # noqa: E402  (beside it too)

import flax  # noqa: E402
from flax import nnx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from flax.nnx import capture_compat  # noqa: E402
from flax.nnx.sow import activations, capture, sow, tap  # noqa: E402

# Flax 0.12.8's own nnx.capture, kept before anything installs the layer
# (install() replaces nnx.capture; this name keeps the original).
FLAX_CAPTURE = nnx.capture
MODELS_FROM_ENV = 'FLAX_SOW_MODELS_FROM'
START = '<!-- device-suite:start -->'
END = '<!-- device-suite:end -->'
MARKDOWN, JSON = 'device_suite.md', 'device_suite.json'


# -- Sizes --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Size:
  """A Gemma-shaped decoder and the inputs it runs on."""

  name: str
  layers: int
  embed: int
  hidden: int
  heads: int
  kv_heads: int
  head_dim: int
  vocab: int
  batch: int
  length: int

  def params(self) -> int:
    attention = self.embed * self.head_dim * (2 * self.heads
                                              + 2 * self.kv_heads)
    block = attention + 3 * self.embed * self.hidden + 2 * self.embed
    return self.vocab * self.embed + self.layers * block + self.embed

  def describe(self) -> str:
    return (f'{self.name}: {_count(self.params())} parameters, '
            f'{self.layers} layers, width {self.embed}, MLP {self.hidden}, '
            f'{self.heads} heads x {self.head_dim} ({self.kv_heads} KV), '
            f'vocabulary {self.vocab}; batch {self.batch} x {self.length} '
            'tokens')

  def with_layers(self, layers: int) -> 'Size':
    return dataclasses.replace(self, layers=layers)


# About 300M: Gemma's block shape at width 1024; about 2B: Gemma 2B's blocks
# (width 2048, MLP 16384, 8 heads of 256, one KV head), 18 layers. Both with
# a vocabulary of 65536 (Gemma's 256000 would put a quarter of the 2B model
# in its embedding).
SMALL = Size('~300M', layers=16, embed=1024, hidden=4096, heads=8,
             kv_heads=1, head_dim=128, vocab=65536, batch=8, length=1024)
LARGE = Size('~2B', layers=18, embed=2048, hidden=16384, heads=8,
             kv_heads=1, head_dim=256, vocab=65536, batch=8, length=1024)
TINY_SMALL = Size('tiny-a', layers=2, embed=32, hidden=64, heads=4,
                  kv_heads=1, head_dim=8, vocab=64, batch=2, length=16)
# The second toy size differs in its layers only: the eager programs that
# make its weights are the first's, already compiled.
TINY_LARGE = dataclasses.replace(TINY_SMALL, name='tiny-b', layers=3)


# -- The model ----------------------------------------------------------------


def _normal(key, shape, scale):
  return nnx.Param(jax.random.normal(key, shape, jnp.bfloat16) * scale)


class RMSNorm(nnx.Module):

  def __init__(self, width: int):
    self.scale = nnx.Param(jnp.zeros((width,), jnp.bfloat16))

  def __call__(self, x):
    y = x.astype(jnp.float32)
    y = y * jax.lax.rsqrt(jnp.mean(y * y, axis=-1, keepdims=True) + 1e-6)
    scale = 1.0 + self.scale[...].astype(jnp.float32)
    return (y * scale.reshape((1,) * (y.ndim - 1) + (-1,))).astype(x.dtype)


def _rope(x, positions):
  """Rotary embedding of ``x`` (..., length, heads, head_dim)."""
  half = x.shape[-1] // 2
  freq = 10_000.0 ** (-jnp.arange(half, dtype=jnp.float32) / half)
  angle = (positions[..., None, None].astype(jnp.float32)
           * freq.reshape(1, 1, 1, half))
  sin, cos = jnp.sin(angle), jnp.cos(angle)
  a, b = jnp.split(x.astype(jnp.float32), 2, axis=-1)
  return jnp.concatenate([a * cos - b * sin, b * cos + a * sin],
                         axis=-1).astype(x.dtype)


class Attention(nnx.Module):

  def __init__(self, size: Size, key):
    k1, k2, k3 = jax.random.split(key, 3)
    d, h, kv, hd = size.embed, size.heads, size.kv_heads, size.head_dim
    self.q = _normal(k1, (d, h, hd), d ** -0.5)
    self.kv = _normal(k2, (2, d, kv, hd), d ** -0.5)
    self.o = _normal(k3, (h, hd, d), (h * hd) ** -0.5)
    self.heads, self.kv_heads = h, kv

  def __call__(self, x, positions, cache=None):
    """``x`` (batch, length, width); ``cache``: ``(k, v, position)`` of a
    decode step (length 1) writing at ``position``, or None (causal)."""
    q = _rope(jnp.einsum('btd,dhk->bthk', x, self.q[...]), positions)
    k, v = jnp.einsum('btd,cdhk->cbthk', x, self.kv[...])
    k = _rope(k, positions)
    if cache is not None:
      keys, values, at = cache
      keys = jax.lax.dynamic_update_slice_in_dim(keys, k, at, axis=1)
      values = jax.lax.dynamic_update_slice_in_dim(values, v, at, axis=1)
      k, v, cache = keys, values, (keys, values)
      mask = (jnp.arange(k.shape[1]) <= at)[None, :]
    else:
      length = x.shape[1]
      mask = jnp.tril(jnp.ones((length, length), jnp.bool_))
    mask = mask[None, None, None]  # (batch, kv heads, group, t, s)
    group = self.heads // self.kv_heads
    b, t = q.shape[:2]
    q = q.reshape(b, t, self.kv_heads, group, q.shape[-1])
    logits = jnp.einsum('btkgd,bskd->bkgts', q, k).astype(jnp.float32)
    logits = logits * q.shape[-1] ** -0.5
    logits = jnp.where(mask, logits, -1e30)
    weights = jax.nn.softmax(logits, axis=-1).astype(x.dtype)
    out = jnp.einsum('bkgts,bskd->btkgd', weights, v)
    out = out.reshape(b, t, self.heads, -1)
    return jnp.einsum('bthk,hkd->btd', out, self.o[...]), cache


class Block(nnx.Module):
  """One Gemma-shaped block; ``sows``: sow its output residual stream."""

  def __init__(self, size: Size, index: int, sows: bool, key):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    d, f = size.embed, size.hidden
    self.index, self.sows = index, sows
    self.attn_norm = RMSNorm(d)
    self.attn = Attention(size, k1)
    self.mlp_norm = RMSNorm(d)
    self.gate = _normal(k2, (d, f), d ** -0.5)
    self.up = _normal(k3, (d, f), d ** -0.5)
    self.down = _normal(k4, (f, d), f ** -0.5)

  def __call__(self, x, positions, cache=None):
    attended, cache = self.attn(self.attn_norm(x), positions, cache)
    x = x + attended
    y = self.mlp_norm(x)
    y = jax.nn.gelu(y @ self.gate[...]) * (y @ self.up[...])
    x = x + y @ self.down[...]
    if self.sows:
      x = sow(x, name=('blocks', self.index, 'residual'))
    return (x, cache) if cache is not None else x


class Decoder(nnx.Module):
  """A Gemma-shaped decoder; ``keep``, a list, gets each block's output."""

  def __init__(self, size: Size, sows: bool, seed: int = 0):
    keys = jax.random.split(jax.random.key(seed), size.layers + 1)
    self.embedding = _normal(keys[0], (size.vocab, size.embed), 1.0)
    self.blocks = nnx.List([Block(size, i, sows, keys[i + 1])
                            for i in range(size.layers)])
    self.final_norm = RMSNorm(size.embed)

  def embed(self, tokens):
    x = self.embedding[...][tokens]
    return x * jnp.asarray(self.embedding.shape[1] ** 0.5, x.dtype)

  def unembed(self, x):
    return self.final_norm(x) @ self.embedding[...].T

  def __call__(self, tokens, keep: list | None = None):
    x = self.embed(tokens)
    positions = jnp.arange(tokens.shape[1], dtype=jnp.int32)[None, :]
    for block in self.blocks:
      x = block(x, positions)
      if keep is not None:
        keep.append(x)
    return self.unembed(x)

  def step(self, token, at, caches, keep: list | None = None):
    """One decode step: ``token`` (batch,) at position ``at``."""
    x = self.embed(token[:, None])
    positions = jnp.full((token.shape[0], 1), at, jnp.int32)
    new = []
    for block, (keys, values) in zip(self.blocks, caches):
      x, cache = block(x, positions, (keys, values, at))
      new.append(cache)
      if keep is not None:
        keep.append(x)
    return self.unembed(x)[:, 0], new


def make_model(size: Size, sows: bool) -> Decoder:
  """The decoder, its weights made on the default device (eagerly: a
  program per distinct shape, compiled once)."""
  return Decoder(size, sows)


def share_weights(donor: Decoder, size: Size, sows: bool) -> Decoder:
  """A decoder of the other ``sows`` flag holding ``donor``'s arrays."""
  model = nnx.eval_shape(lambda: Decoder(size, sows))
  nnx.update(model, nnx.state(donor))
  return model


# -- Measuring ----------------------------------------------------------------


def peak_bytes(compiled) -> int | None:
  """The peak device memory XLA's memory analysis gives a program."""
  try:
    stats = compiled.memory_analysis()
  except Exception:  # pylint: disable=broad-except
    return None
  if stats is None:
    return None
  peak = getattr(stats, 'peak_memory_in_bytes', 0)
  if peak:
    return int(peak)
  return int(stats.temp_size_in_bytes + stats.argument_size_in_bytes
             + stats.output_size_in_bytes - stats.alias_size_in_bytes)


def hlo_ops(compiled) -> int | None:
  """The instructions of a compiled program's optimized HLO."""
  try:
    text = compiled.as_text()
  except Exception:  # pylint: disable=broad-except
    return None
  return sum(1 for line in text.splitlines()
             if ' = ' in line and not line.lstrip().startswith(('//', '#')))


@dataclasses.dataclass
class Check:
  """An oracle's verdict on a row's values."""

  ok: bool
  how: str

  def text(self) -> str:
    return f'ok: {self.how}' if self.ok else f'FAILED: {self.how}'


def compare(pairs: tp.Sequence[tuple[tp.Any, tp.Any]], ulps: float,
            what: str) -> Check:
  """Bitwise if every pair is equal; else, for floating values, within
  ``ulps`` units in the last place of each value's scale (its largest finite
  magnitude) at the values' own precision; else a failure naming the worst
  pair. A NaN or infinity where the other side has another value is never
  within a tolerance; integers must be equal."""
  bitwise, worst, worst_at = True, 0.0, None
  for i, (got, want) in enumerate(pairs):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
      return Check(False, f'{what} #{i}: {got.dtype}{list(got.shape)} vs '
                   f'{want.dtype}{list(want.shape)}')
    if np.array_equal(got, want, equal_nan=True):
      continue
    bitwise = False
    if not jnp.issubdtype(want.dtype, jnp.inexact):
      return Check(False, f'{what} #{i}: {int(np.sum(got != want))} of '
                   f'{want.size} {want.dtype} elements differ')
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    same = (got64 == want64) | (np.isnan(got64) & np.isnan(want64))
    with np.errstate(invalid='ignore'):
      diff = np.where(same, 0.0, np.abs(got64 - want64))
    finite = np.abs(want64[np.isfinite(want64)])
    scale = max(float(finite.max()) if finite.size else 0.0,
                float(np.finfo(np.float32).tiny))
    ulp = scale * float(jnp.finfo(want.dtype).eps)
    error = (float(diff.max()) / ulp if np.all(np.isfinite(diff))
             else float('inf'))
    if error > worst or worst_at is None:
      worst, worst_at = error, i
  if bitwise:
    return Check(True, f'{what} bitwise ({len(pairs)} arrays)')
  ok = worst <= ulps
  return Check(ok, f'{what} within {worst:.1f} ulps of scale (array '
               f'#{worst_at}; tolerance {ulps:g}: different programs)')


@dataclasses.dataclass
class Row:
  """One line of the table, and its numbers for the JSON file."""

  section: str
  key: str  # the row's name within its section, as ``planned`` lists it
  what: str
  ratio: float | None = None
  sides: str = ''
  check: str = ''
  ok: bool | None = None
  detail: str = ''
  numbers: dict[str, tp.Any] = dataclasses.field(default_factory=dict)

  def line(self) -> str:
    ratio = '-' if self.ratio is None else f'{self.ratio:.3f}'
    cells = (self.section, self.what, ratio, self.sides, self.check,
             self.detail)
    # An error message may hold a '|' or a line break: one row, one line.
    cells = (' '.join(c.replace('|', '\\|').split()) for c in cells)
    return '| ' + ' | '.join(cells) + ' |'


class Report:
  """The rows so far, written to ``--out`` after each one."""

  def __init__(self, out: str, header: dict[str, tp.Any], tiny: bool,
               publish_to: str | None = None):
    self.out, self.header, self.tiny = out, header, tiny
    self.publish_to = publish_to  # the results file, with --publish
    self.rows: list[Row] = []
    self.lock = threading.RLock()
    self.finished = False

  def add(self, rows: tp.Iterable[Row]) -> None:
    with self.lock:
      if self.finished:
        return
      for row in rows:
        print(f'[{row.section}] {row.what}: '
              f'{"-" if row.ratio is None else f"{row.ratio:.3f}"} '
              f'({row.sides}) {row.check}', flush=True)
        self.rows.append(row)
      self.write()

  def markdown(self) -> str:
    h = self.header
    lines = [
        '## The device suite',
        '',
        'From `python benchmarks/device_suite.py'
        f'{" --tiny" if self.tiny else ""}`'
        f' on {h["date"]}: {h["device"]} ({h["devices"]} device(s), '
        f'{h["memory"]}; host {h["machine"]}), jax {h["jax"]}, jaxlib '
        f'{h["jaxlib"]}, flax '
        f'{h["flax"]}, Python {h["python"]}, XLA_FLAGS={h["xla_flags"]!r}; '
        f'budget {h["budget_s"]:.0f} s, {h["elapsed_s"]:.0f} s used.'
        + (' Toy sizes: these figures check the suite, they measure'
           ' nothing of an accelerator.' if self.tiny else ''),
        '',
        'Sizes: ' + '; '.join(h['sizes']) + '.',
        '',
        'Each ratio compares sides measured side by side in one process,'
        ' alternating repeat by repeat after a warm-up, each side the median'
        ' of its repeats; "check" is the oracle of the row\'s values.',
        '',
        '| section | measurement | ratio | sides | check | detail |',
        '|---|---|---|---|---|---|',
    ]
    lines += [row.line() for row in self.rows]
    return '\n'.join(lines) + '\n'

  def finish(self) -> str:
    """The last write (and the results file's section, if asked); later
    rows are ignored. Returns the table."""
    with self.lock:
      self.finished = True
      self.write()
      text = self.markdown()
      if self.publish_to:
        results_file.publish(text, START, END, self.publish_to)
      return text

  def write(self) -> None:
    with self.lock:
      self.header['elapsed_s'] = time.perf_counter() - self.header['_start']
      os.makedirs(self.out, exist_ok=True)
      with open(os.path.join(self.out, MARKDOWN), 'w') as f:
        f.write(self.markdown())
      header = {k: v for k, v in self.header.items()
                if not k.startswith('_')}
      with open(os.path.join(self.out, JSON), 'w') as f:
        json.dump({'header': header,
                   'rows': [dataclasses.asdict(r) for r in self.rows]},
                  f, indent=1, default=str)


class Budget:
  """The seconds left; at the end, the partial table and exit 0."""

  def __init__(self, seconds: float, start: float):
    self.deadline = start + seconds
    self.done = threading.Event()

  def left(self) -> float:
    return self.deadline - time.perf_counter()

  def watch(self, report: Report, pending: tp.Callable[[], list[Row]]):
    """Until ``stop``: at the deadline, writes ``report`` with the rows of
    ``pending()`` added and ends the process (exit status 0)."""
    def run():
      if self.done.wait(max(self.left(), 0.0)):
        return
      with report.lock:
        if report.finished:
          return
        report.add(pending())
        report.finish()
        print('budget ran out: partial table written to '
              f'{os.path.join(report.out, MARKDOWN)}', flush=True)
        sys.stdout.flush()
        os._exit(0)  # pylint: disable=protected-access

    self.thread = threading.Thread(target=run, daemon=True)
    self.thread.start()

  def stop(self) -> None:
    self.done.set()
    self.thread.join()


# -- Sections -----------------------------------------------------------------


@dataclasses.dataclass
class Settings:
  tiny: bool
  repeats: int
  number: int
  ulps: float  # the tolerance of values from different programs


def _bytes(size: float | None) -> str:
  """``size`` bytes in the largest binary unit that keeps it >= 1."""
  if size is None:
    return 'n/a'
  for unit in ('B', 'KiB', 'MiB', 'GiB'):
    if abs(size) < 1024 or unit == 'GiB':
      return f'{size:,.0f} {unit}' if unit == 'B' else f'{size:,.1f} {unit}'
    size /= 1024
  raise AssertionError('unreachable')


def _count(n: float) -> str:
  """``n`` with a K, M or B suffix."""
  for unit, scale in (('B', 1e9), ('M', 1e6), ('K', 1e3)):
    if n >= scale:
      return f'{n / scale:,.1f}{unit}'
  return f'{n:,.0f}'


def _ms(seconds: float) -> str:
  return f'{seconds * 1e3:.3f} ms'


def bench_compiled(size: Size, settings: Settings) -> list[Row]:
  """``jax.jit(capture(f))`` against ``jax.jit(f)`` and by hand, runtime
  and peak memory, with a sow per block and with taps of every block."""
  sowing = make_model(size, sows=True)
  plain_model = share_weights(sowing, size, sows=False)
  graphdef_sow, state = nnx.split(sowing)
  graphdef_plain, _ = nnx.split(plain_model)
  tokens = jax.random.randint(jax.random.key(1), (size.batch, size.length),
                              0, size.vocab, jnp.int32)
  residual = lambda i: ('blocks', i, 'residual')
  tapped_name = lambda i: ('blocks', i, '__call__', 'output')
  tapped = tap(lambda m, t: m(t), 'blocks.*', inputs=False)

  def plain(state, tokens):
    return nnx.merge(graphdef_plain, state)(tokens)

  def by_hand(state, tokens):
    keep: list[tp.Any] = []
    out = nnx.merge(graphdef_plain, state)(tokens, keep)
    return out, keep

  def with_sows(state, tokens):
    return capture(lambda m, t: m(t))(nnx.merge(graphdef_sow, state), tokens)

  def with_taps(state, tokens):
    return capture(tapped)(nnx.merge(graphdef_plain, state), tokens)

  programs, compile_s = {}, {}
  for name, fn in (('plain', plain), ('hand', by_hand),
                   ('sow', with_sows), ('tap', with_taps)):
    start = time.perf_counter()
    programs[name] = jax.jit(fn).lower(state, tokens).compile()
    compile_s[name] = time.perf_counter() - start
  outs = {name: jax.block_until_ready(p(state, tokens))
          for name, p in programs.items()}
  hand_out, hand_keep = outs['hand']
  checks = {}
  for variant, name in (('sow', residual), ('tap', tapped_name)):
    out, collected = outs[variant]
    missing = [i for i in range(size.layers) if name(i) not in collected]
    if missing or len(collected) != size.layers:
      checks[variant] = Check(False, f'collected {sorted(collected)}')
      continue
    pairs = [(collected[name(i)][0], hand_keep[i])
             for i in range(size.layers)]
    pairs += [(out, outs['plain']), (out, hand_out)]
    checks[variant] = compare(pairs, settings.ulps,
                              f'{size.layers} residual streams and logits')
  del outs, hand_out, hand_keep, out, collected, pairs  # device memory
  began = time.perf_counter()
  times = dict(zip(programs, paired(
      *(lambda p=p: p(state, tokens) for p in programs.values()),
      repeats=settings.repeats, number=settings.number)))
  paired_s = time.perf_counter() - began
  peaks = {name: peak_bytes(p) for name, p in programs.items()}
  ops = {name: hlo_ops(p) for name, p in programs.items()}
  tokens_per_call = size.batch * size.length
  rows = []
  for variant, label in (('sow', 'a sow per block'),
                         ('tap', 'tap of every block')):
    check = checks[variant]
    common = dict(check=check.text(), ok=check.ok)
    t, t_plain, t_hand = times[variant], times['plain'], times['hand']
    numbers = {'seconds': {k: times[k] for k in ('plain', 'hand', variant)},
               'compile_s': {k: compile_s[k]
                             for k in ('plain', 'hand', variant)},
               'peak_bytes': {k: peaks[k]
                              for k in ('plain', 'hand', variant)},
               'hlo_ops': {k: ops[k] for k in ('plain', 'hand', variant)},
               'params': size.params(), 'tokens': tokens_per_call,
               'paired_s': paired_s}
    rows.append(Row(
        f'compiled {size.name}', f'{variant}.runtime_vs_jit',
        f'jit(capture(f)) / jit(f), runtime, '
        f'{label}', t / t_plain, f'{_ms(t)} vs {_ms(t_plain)}',
        detail=(f'{tokens_per_call / t:,.0f} tokens/s captured; compile '
                f'{compile_s[variant]:.1f} s vs {compile_s["plain"]:.1f} s'),
        numbers=numbers, **common))
    rows.append(Row(
        f'compiled {size.name}', f'{variant}.runtime_vs_hand',
        f'jit(capture(f)) / f returning the '
        f'residual streams by hand, runtime, {label}', t / t_hand,
        f'{_ms(t)} vs {_ms(t_hand)}',
        detail=(f'by hand / jit(f): {t_hand / t_plain:.3f}; optimized HLO '
                f'ops: {ops[variant]} captured, {ops["hand"]} by hand'),
        numbers=numbers, **common))
    peak, hand_peak, plain_peak = peaks[variant], peaks['hand'], peaks['plain']
    rows.append(Row(
        f'compiled {size.name}', f'{variant}.peak_memory',
        f'jit(capture(f)) / by hand, peak device '
        f'memory (XLA memory analysis), {label}',
        None if not (peak and hand_peak) else peak / hand_peak,
        f'{_bytes(peak)} vs {_bytes(hand_peak)}',
        detail=(f'jit(f) alone {_bytes(plain_peak)}' if peak else
                'this backend gives no memory analysis'),
        numbers=numbers, **common))
  return rows


def _decode_loop(model_step, caches, prompt, total: int):
  """A sampler-shaped greedy loop: a ``while_loop`` over positions feeding
  the prompt, then the argmax, one token per step (the prefill too, as
  Flax's examples/gemma sampler does)."""
  batch, prompt_length = prompt.shape
  buffer = jnp.zeros((batch, total + 1), jnp.int32)
  buffer = buffer.at[:, :prompt_length].set(prompt)

  def body(carry):
    at, buffer, caches = carry
    logits, caches = model_step(buffer[:, at], at, caches)
    chosen = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    following = jnp.where(at < prompt_length - 1, buffer[:, at + 1], chosen)
    buffer = jax.lax.dynamic_update_slice_in_dim(
        buffer, following[:, None], at + 1, axis=1)
    return at + 1, buffer, caches

  return jax.lax.while_loop(lambda c: c[0] < total, body,
                            (jnp.int32(0), buffer, caches))


def bench_decode_own(size: Size, settings: Settings, steps: int,
                     prompt_length: int) -> list[Row]:
  """This suite's own sampler-shaped loop: plain, every step's residual
  streams captured (both policies) and written into a buffer by hand."""
  model = make_model(size, sows=True)
  plain_model = share_weights(model, size, sows=False)
  graphdef, state = nnx.split(model)
  graphdef_plain, _ = nnx.split(plain_model)
  total = prompt_length + steps
  cache_shape = (size.batch, total, size.kv_heads, size.head_dim)
  caches = [(jnp.zeros(cache_shape, jnp.bfloat16),) * 2
            for _ in range(size.layers)]
  prompt = jax.random.randint(jax.random.key(2), (size.batch, prompt_length),
                              0, size.vocab, jnp.int32)

  def plain(state, caches, prompt):
    m = nnx.merge(graphdef_plain, state)
    return _decode_loop(m.step, caches, prompt, total)[1]

  def sowing(state, caches, prompt):
    m = nnx.merge(graphdef, state)
    return _decode_loop(m.step, caches, prompt, total)[1]

  def by_hand(state, caches, prompt):
    m = nnx.merge(graphdef_plain, state)
    kept = jnp.zeros((total, size.layers, size.batch, 1, size.embed),
                     jnp.bfloat16)

    def step(token, at, carry):
      caches, kept = carry
      keep: list[tp.Any] = []
      logits, caches = m.step(token, at, caches, keep)
      kept = kept.at[at].set(jnp.stack(keep))
      return logits, (caches, kept)

    _, buffer, (_, kept) = _decode_loop(step, (caches, kept), prompt, total)
    return buffer, kept

  runs = {'plain': plain, 'hand': by_hand}
  for policy in ('truncate', 'error'):
    runs[policy] = capture(sowing, max_steps=total, on_overflow=policy)
  programs = {name: jax.jit(fn).lower(state, caches, prompt).compile()
              for name, fn in runs.items()}
  outs = {name: jax.block_until_ready(p(state, caches, prompt))
          for name, p in programs.items()}
  tokens_plain = outs['plain']
  tokens_hand, kept = outs['hand']
  checks = {}
  for policy in ('truncate', 'error'):
    tokens, collected = outs[policy]
    pairs: list[tuple[tp.Any, tp.Any]] = [(tokens, tokens_plain),
                                          (tokens_hand, tokens_plain)]
    counts = set()
    for i in range(size.layers):
      (entry,) = collected[('blocks', i, 'residual')]
      counts.add(int(entry.count))
      pairs.append((entry.values, kept[:, i]))
    if counts != {total}:
      checks[policy] = Check(False, f'step counts {sorted(counts)}, '
                             f'expected {total}')
      continue
    checks[policy] = compare(
        pairs, settings.ulps,
        f'tokens and {size.layers} x {total} steps of residual streams')
  times = dict(zip(programs, paired(
      *(lambda p=p: p(state, caches, prompt) for p in programs.values()),
      repeats=settings.repeats, number=settings.number)))
  generated = size.batch * total
  what = (f'own sampler-shaped loop, {size.name}, {size.layers} layers, '
          f'batch {size.batch}, {total} steps ({prompt_length} of prompt)')
  return _decode_rows(what, times, generated, checks, total)


def _decode_rows(what, times, generated, checks, total) -> list[Row]:
  rows = []
  rate = {name: generated / t for name, t in times.items()}
  for policy in ('truncate', 'error'):
    extra = (' (no callback)' if policy == 'truncate' else
             ' (a host callback checks the count each call)')
    rows.append(Row(
        'decode', policy, f"tokens/s, every step's residual streams captured "
        f"(max_steps={total}, on_overflow='{policy}'{extra}) / plain loop, "
        f'{what}', rate[policy] / rate['plain'],
        f'{rate[policy]:,.0f} vs {rate["plain"]:,.0f} tokens/s',
        check=checks[policy].text(), ok=checks[policy].ok,
        detail=(f'written into a buffer by hand: {rate["hand"]:,.0f} tokens/s'
                if 'hand' in rate else 'no hand-written loop: Flax\'s own'),
        numbers={'tokens_per_s': rate, 'seconds': times,
                 'tokens_per_call': generated}))
  return rows


def bench_decode_flax(size: Size, settings: Settings, steps: int,
                      models_from: str) -> list[Row]:
  """Flax's examples/gemma sampler loop (``Sampler._sample_fn``), each
  layer's output and the logits sown (as the decode-loop tests instrument
  it), plain and captured; the oracle: the captured logits of each step
  against the logits the sampler itself keeps, and the same tokens."""
  tests = os.path.join(ROOT, 'tests', 'nnx', 'sow')
  if tests not in sys.path:
    sys.path.insert(0, tests)
  import sow_external_models as external  # pylint: disable=g-import-not-at-top
  src = external.source('flax', models_from)
  gemma = external.load_gemma(src.root)
  kinds = gemma.modules.AttentionType
  config = gemma.transformer.TransformerConfig(
      num_layers=size.layers, num_embed=size.vocab, embed_dim=size.embed,
      hidden_dim=size.hidden, num_heads=size.heads, head_dim=size.head_dim,
      num_kv_heads=size.kv_heads, final_logit_softcap=None,
      use_post_attn_norm=False, use_post_ffw_norm=False,
      attention_types=(kinds.GLOBAL,) * size.layers, dtype=jnp.bfloat16,
      weight_dtype=jnp.bfloat16)
  with external.gemma_mesh(), capture_compat.install():
    model = nnx.jit(lambda: external.instrument_decoder(
        gemma.transformer.Transformer(config, rngs=nnx.Rngs(params=0))))()
    prompt_text = 'abcdefghijklmnop'[:max(2, min(16, steps))]
    sampler = gemma.sampler.Sampler(
        vocab=external.CharVocab(config.num_embed),
        cache_size=len(prompt_text) + steps + 1, transformer=model)
    prompts = [sampler.tokenize(prompt_text)] * size.batch
    total = len(prompt_text) + steps
    state = sampler.init_sample_state(
        prompts, total_sampling_steps=total, include_logits=True,
        forbidden_token_ids=None, temperature=0.0, top_p=0.95,
        seed=jax.random.key(0))
    graphdef, params = nnx.split(model)
    decode = sampler._sample_fn  # pylint: disable=protected-access
    args = (graphdef, params, state)
    runs = {'plain': decode}
    for policy in ('truncate', 'error'):
      runs[policy] = capture(decode, max_steps=total, on_overflow=policy)
    programs = {name: jax.jit(fn, static_argnums=0).lower(*args).compile()
                for name, fn in runs.items()}
    call = lambda p: p(params, state)

    @jax.jit
    def head(params, residual):
      m = nnx.merge(graphdef, params)
      return m.embedder.attend(m.final_norm(residual),
                               out_sharding=m.shd_config.act_btd)

    outs = {name: jax.block_until_ready(call(p))
            for name, p in programs.items()}
    checks = {}
    plain_state = outs['plain']
    ran = int(plain_state.decoding_step)
    for policy in ('truncate', 'error'):
      final, collected = outs[policy]
      (logits,) = collected['logits']
      count = int(logits.count)
      layers = [collected[('layers', i, 'residual')][0]
                for i in range(size.layers)]
      if count != ran or any(int(e.count) != ran for e in layers):
        checks[policy] = Check(False, f'{count} steps captured, {ran} ran')
        continue
      # Step i's logits are what the sampler writes at i + 1.
      pairs = [(logits.values[:ran, :, 0], jnp.swapaxes(
          final.logits_buffer[:, 1:ran + 1], 0, 1)),
               (final.token_buffer, plain_state.token_buffer)]
      same = compare(
          pairs, 0.0,
          f"{ran} steps' logits against the sampler's own, and the tokens")
      # The last layer's residual streams through the model's own head.
      last = layers[-1].values[:ran, :, 0]
      heads = compare([(head(params, last), logits.values[:ran, :, 0])],
                      settings.ulps, 'the logits of the last residual '
                      'streams (final norm, unembedding)')
      checks[policy] = (Check(True, f'{same.how}; {heads.how}')
                        if same.ok and heads.ok else
                        Check(False, same.how if not same.ok else heads.how))
    times = dict(zip(programs, paired(
        *(lambda p=p: call(p) for p in programs.values()),
        repeats=settings.repeats, number=settings.number)))
  what = (f'Flax examples/gemma sampler ({src.repo}@{src.commit[:12]}), '
          f'{size.name} config, {size.layers} layers, batch {size.batch}, '
          f'{ran} steps')
  return _decode_rows(what, times, size.batch * ran, checks, total)


def bench_decode(size: Size, settings: Settings, steps: int,
                 prompt_length: int, models_from: str | None) -> list[Row]:
  """Flax's sampler given a checkout it can load, else the suite's own
  loop; a checkout that cannot be loaded is named in the rows."""
  if models_from:
    try:
      return bench_decode_flax(size, settings, steps, models_from)
    except ImportError as e:  # its packages are not in '.[test]'
      why = (f"Flax's sampler not loaded from {models_from}: "
             f'{type(e).__name__}: {e}')
    except Exception as e:  # pylint: disable=broad-except
      if type(e).__name__ != 'MissingSource':
        raise
      why = f"Flax's sampler not loaded: {e}"
    print(f'[decode] {why}; the suite\'s own loop instead', flush=True)
    rows = bench_decode_own(size, settings, steps, prompt_length)
    for row in rows:
      row.detail = f'{row.detail}; {why}'
    return rows
  return bench_decode_own(size, settings, steps, prompt_length)


class Scratch:
  """A folder under ``--out`` (so on its disk) for the stores, removed."""

  def __init__(self, out: str):
    os.makedirs(out, exist_ok=True)
    self.folder = tempfile.mkdtemp(prefix='scratch-', dir=out)
    self.count = 0

  def path(self) -> str:
    shutil.rmtree(os.path.join(self.folder, f'{self.count}'),
                  ignore_errors=True)
    self.count += 1
    return os.path.join(self.folder, f'{self.count}')

  def close(self):
    shutil.rmtree(self.folder, ignore_errors=True)


def bench_export(size: Size, settings: Settings, n_batches: int,
                 out: str) -> list[Row]:
  """``activations.export`` of every block's residual stream against the
  bare jitted forward, and its bytes/s against a sequential write."""
  model = make_model(size, sows=False)
  rng = np.random.default_rng(3)
  batches = [jnp.asarray(rng.integers(0, size.vocab,
                                      (size.batch, size.length), np.int32))
             for _ in range(n_batches)]
  forward = nnx.jit(lambda m, t: m(t))
  tapped = tap(lambda m, t: m(t), 'blocks.*', inputs=False)
  scratch = Scratch(out)
  try:
    def bare():
      result = None
      for batch in batches:
        result = forward(model, batch)
      jax.block_until_ready(result)

    last: dict[str, tp.Any] = {}

    def export():
      last['data'] = activations.export(
          tapped, batches, scratch.path(), args=(model,),
          names='blocks.*.__call__.output', progress=False)
      os.sync()

    repeats = 1 if settings.tiny else 3  # each writes the store: few
    t_bare, t_export = paired(bare, export, repeats=repeats)
    data = last['data']
    written = data.layout.batch_bytes() * n_batches
    block = np.random.default_rng(4).integers(
        0, 255, data.layout.batch_bytes(), np.uint8)

    def disk():
      path = scratch.path()
      os.makedirs(path)
      with open(os.path.join(path, 'sequential'), 'wb') as file:
        for i in range(n_batches):
          block[0] = i % 256  # new bytes each time, as the export's are
          file.write(block.data)
      os.sync()
      last['file'] = os.path.getsize(os.path.join(path, 'sequential'))

    t_disk, t_export2 = paired(disk, export, repeats=repeats)
    data = last['data']  # the last export's store; the earlier are gone
    # The store against a direct forward returning the streams by hand.
    graphdef, state = nnx.split(model)

    def by_hand(state, tokens):
      keep: list[tp.Any] = []
      nnx.merge(graphdef, state)(tokens, keep)
      return keep

    direct = jax.jit(by_hand)
    got = [np.asarray(data.read(f'blocks.{i}.__call__.output'))
           for i in range(size.layers)]
    want = [np.concatenate(v) for v in zip(
        *(direct(state, b) for b in batches))]
    check = compare(list(zip(got, [np.asarray(w) for w in want])),
                    settings.ulps, f'{size.layers} stores of '
                    f'{n_batches * size.batch} examples against a direct '
                    'forward')
    same_bytes = last['file'] == written
    both = Check(check.ok and same_bytes,
                 f'{check.how}; the file holds {last["file"]:,} bytes, the '
                 f'store {written:,}')
  finally:
    scratch.close()
  examples = n_batches * size.batch
  what = (f'{size.name}, {size.layers} residual streams, {n_batches} '
          f'batches of {size.batch}x{size.length} tokens, '
          f'{_bytes(written / n_batches)} per batch')
  return [
      Row('export', 'examples_per_s', 'examples/s, activations.export / '
          f'bare jitted forward, {what}', t_bare / t_export,
          f'{examples / t_export:,.1f} vs {examples / t_bare:,.1f} '
          'examples/s', check=check.text(), ok=check.ok,
          detail='the export creates, writes and trims the store, and '
          'ends with os.sync()',
          numbers={'seconds': {'bare': t_bare, 'export': t_export},
                   'examples': examples}),
      Row('export', 'bytes_per_s', 'bytes/s written, activations.export / '
          f'a sequential write of the same bytes to the same disk, {what}',
          t_disk / t_export2,
          f'{_bytes(written / t_export2)}/s vs {_bytes(written / t_disk)}/s',
          check=both.text(), ok=both.ok,
          detail='both sides end with os.sync(); the file is written in '
          "blocks of a batch's bytes",
          numbers={'seconds': {'disk': t_disk, 'export': t_export2},
                   'bytes': written}),
  ]


def bench_eager(size: Size, settings: Settings) -> list[Row]:
  """Eager ``capture(f)`` / ``f``, and the compat ``nnx.capture`` /
  Flax 0.12.8's own, on a model whose blocks sow (``sow``, then
  ``Module.sow``)."""
  model = make_model(size, sows=True)
  plain_model = share_weights(model, size, sows=False)
  tokens = jax.random.randint(jax.random.key(5), (size.batch, size.length),
                              0, size.vocab, jnp.int32)
  f = lambda m, t: m(t)
  captured = capture(f)
  out, collected = captured(model, tokens)
  keep: list[tp.Any] = []
  hand_out = plain_model(tokens, keep)
  pairs = [(collected[('blocks', i, 'residual')][0], keep[i])
           for i in range(size.layers)] + [(out, hand_out)]
  check = compare(pairs, 0.0, f'{size.layers} residual streams and logits '
                  'against eager by hand (the same operations)')
  t_f, t_c = paired(lambda: f(plain_model, tokens),
                    lambda: captured(model, tokens),
                    repeats=settings.repeats, number=settings.number)
  compiles = count_compiles(lambda: captured(model, tokens), 3)
  rows = [Row('eager', 'capture', f'capture(f) / f, eager, {size.name}, '
              'a sow per block', t_c / t_f, f'{_ms(t_c)} vs {_ms(t_f)}',
              check=check.text(), ok=check.ok,
              detail=f'{compiles} XLA compiles in 3 calls after the first',
              numbers={'seconds': {'f': t_f, 'capture': t_c},
                       'compiles_after_first': compiles})]
  if capture_compat.delegates(FLAX_CAPTURE):
    return rows + [Row('eager', 'compat',
                       'compat nnx.capture / Flax 0.12.8\'s, eager',
                       check='not run: this Flax\'s nnx.capture is the '
                       'compat one already', ok=None)]

  class ModuleSowBlock(nnx.Module):

    def __init__(self, block):
      self.block = block

    def __call__(self, x, positions):
      x = self.block(x, positions)
      self.sow(nnx.Intermediate, 'residual', x)
      return x

  legacy_model = share_weights(model, size, sows=False)
  legacy_model.blocks = nnx.List([ModuleSowBlock(b)
                                  for b in legacy_model.blocks])
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', DeprecationWarning)
    with capture_compat.install():
      new = capture_compat.capture(legacy_model, nnx.Intermediate)
      old = FLAX_CAPTURE(legacy_model, nnx.Intermediate)
      out_new, state_new = new(tokens)
      out_old, state_old = old(tokens)
      t_old, t_new = paired(lambda: old(tokens), lambda: new(tokens),
                            repeats=settings.repeats,
                            number=settings.number)
      compiles = count_compiles(lambda: new(tokens), 3)
  leaves_new = jax.tree.leaves(state_new)
  leaves_old = jax.tree.leaves(state_old)
  structure = (jax.tree.structure(state_new) == jax.tree.structure(state_old)
               and len(leaves_new) == size.layers)
  if structure:
    compat = compare(list(zip([out_new, *leaves_new], [out_old, *leaves_old])),
                     0.0, f'logits and {size.layers} sown States against '
                     'Flax 0.12.8\'s (the same operations)')
  else:
    compat = Check(False, f'States differ: {jax.tree.structure(state_new)} '
                   f'vs {jax.tree.structure(state_old)}')
  rows.append(Row(
      'eager', 'compat', 'compat nnx.capture / Flax 0.12.8\'s nnx.capture, '
      f'eager, {size.name}, Module.sow per block', t_new / t_old,
      f'{_ms(t_new)} vs {_ms(t_old)}', check=compat.text(), ok=compat.ok,
      detail=f'{compiles} XLA compiles in 3 calls after the first',
      numbers={'seconds': {'flax': t_old, 'compat': t_new},
               'compiles_after_first': compiles}))
  return rows


# -- The run ------------------------------------------------------------------


# Every row the suite produces, by section: a row not produced says why.
def planned(sizes: tp.Sequence[Size]) -> list[tuple[str, str, str]]:
  """``(section, key, what)`` of every row, in the order they run."""
  compiled = []
  for size in sizes:
    for variant, label in (('sow', 'a sow per block'),
                           ('tap', 'tap of every block')):
      compiled.append([
          (f'compiled {size.name}', f'{variant}.runtime_vs_jit',
           f'jit(capture(f)) / jit(f), runtime, {label}'),
          (f'compiled {size.name}', f'{variant}.runtime_vs_hand',
           'jit(capture(f)) / f returning the residual streams by hand, '
           f'runtime, {label}'),
          (f'compiled {size.name}', f'{variant}.peak_memory',
           'jit(capture(f)) / by hand, peak device memory (XLA memory '
           f'analysis), {label}')])
  rows = compiled[0] + compiled[1]
  rows += [('decode', p, f"tokens/s, on_overflow='{p}' / plain loop")
           for p in ('truncate', 'error')]
  rows += [('export', 'examples_per_s',
            'examples/s, activations.export / bare jitted forward'),
           ('export', 'bytes_per_s',
            'bytes/s written, activations.export / a sequential write')]
  rows += [('eager', 'capture', 'capture(f) / f, eager'),
           ('eager', 'compat',
            "compat nnx.capture / Flax 0.12.8's nnx.capture, eager")]
  return rows + compiled[2] + compiled[3]


def device_header(args, sizes: list[str], start: float) -> dict[str, tp.Any]:
  device = jax.devices()[0]
  memory = 'memory not reported'
  try:
    stats = device.memory_stats() or {}
    if 'bytes_limit' in stats:
      memory = f'{stats["bytes_limit"] / 2**30:,.1f} GiB'
  except Exception:  # pylint: disable=broad-except
    pass
  return {
      'device': (device.platform if device.device_kind.lower()
                 == device.platform else
                 f'{device.platform} {device.device_kind}'),
      'devices': jax.device_count(), 'memory': memory,
      'jax': jax.__version__, 'jaxlib': jax.lib.__version__,
      'flax': flax.__version__, 'python': platform.python_version(),
      'machine': f'{platform.machine()}, {os.cpu_count()} cores',
      'xla_flags': os.environ.get('XLA_FLAGS', ''),
      'date': time.strftime('%Y-%m-%d'), 'budget_s': args.budget_s,
      'tiny': args.tiny, 'sizes': sizes, 'elapsed_s': 0.0, 'section_s': {},
      'models_from': args.models_from or os.environ.get(MODELS_FROM_ENV),
      '_start': start,
  }


def memory_limit() -> int | None:
  try:
    return (jax.devices()[0].memory_stats() or {}).get('bytes_limit')
  except Exception:  # pylint: disable=broad-except
    return None


def fits_memory(size: Size) -> bool:
  """Whether the weights, the logits and a margin fit the device's memory
  (unknown: assumed to)."""
  limit = memory_limit()
  if limit is None:
    return True
  weights = size.params() * 2
  activations_ = size.batch * size.length * (
      size.vocab * 4 + size.hidden * 2 * 4 + size.embed * size.layers * 2 * 3)
  return 3 * weights + activations_ < 0.8 * limit


def make_parser() -> argparse.ArgumentParser:
  """The command line of the suite."""
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--out', required=True,
                      help=f'the directory for {MARKDOWN} and {JSON}')
  parser.add_argument('--budget-s', type=float, default=270.0,
                      help='seconds for the whole run (default 270)')
  parser.add_argument('--tiny', action='store_true',
                      help='toy sizes on any backend, every row checked')
  parser.add_argument('--models_from', default=None,
                      help='a directory with a checkout of google/flax in '
                      f'flax/, for the decode rows (or ${MODELS_FROM_ENV})')
  parser.add_argument('--publish', action='store_true',
                      help='also put the table into the results file')
  parser.add_argument('--results', default=results_file.RESULTS,
                      help='the results file --publish writes (default '
                      'benchmarks/RESULTS.md)')
  return parser


def main(argv: tp.Optional[list[str]] = None,
         started: tp.Optional[float] = None) -> int:
  """Runs the suite; the budget counts from ``started`` (the process's
  start, when run as a script) or from this call (in a process that ran
  before it, a test's, say, whose own time is not the suite's)."""
  parser = make_parser()
  args = parser.parse_args(argv)
  start = time.perf_counter() if started is None else started
  budget = Budget(args.budget_s, start)
  models_from = args.models_from or os.environ.get(MODELS_FROM_ENV)
  if args.tiny:
    small, large = TINY_SMALL, TINY_LARGE
    # Many repeats of calls of a fraction of a millisecond: cheap, and
    # medians that a busy machine moves less.
    settings = Settings(tiny=True, repeats=7, number=3, ulps=8.0)
    decode_steps, prompt_length, export_batches = 6, 4, 3
  else:
    small, large = SMALL, LARGE
    settings = Settings(tiny=False, repeats=10, number=3, ulps=8.0)
    # An export of 8 batches of 64 MiB (the ~300M model's 16 streams of
    # 8x256 tokens), run 8 times: a few GiB written in all.
    decode_steps, prompt_length, export_batches = 64, 16, 8
  notes = []
  while not fits_memory(large) and large.layers > 2:
    large = large.with_layers(large.layers // 2)
    notes.append(f'{LARGE.name} cut to {large.layers} layers to fit the '
                 "device's memory")
  header = device_header(args, [small.describe(), large.describe()], start)
  report = Report(args.out, header, args.tiny,
                  args.results if args.publish else None)
  plan = planned([small, large])
  done_sections: set[str] = set()
  running: list[str] = []

  def pending(reason: str | None = None) -> list[Row]:
    rows = []
    for section, key, what in plan:
      if section in done_sections:
        continue
      why = reason or (f'not run: the budget ({args.budget_s:.0f} s) ran '
                       'out' + (' during this section' if section in running
                                else ' before this section'))
      rows.append(Row(section, key, what, check=why, ok=None))
    return rows

  budget.watch(report, pending)
  report.write()

  def run(section: str, fn: tp.Callable[[], list[Row]], needs_s: float):
    if budget.left() < needs_s:
      report.add([Row(s, k, w, check=f'not run: {budget.left():.0f} s of '
                      f'the budget left, the section needs about '
                      f'{needs_s:.0f} s', ok=None)
                  for s, k, w in plan if s == section])
      done_sections.add(section)
      return None
    running[:] = [section]
    began = time.perf_counter()
    try:
      rows = fn()
    except Exception as e:  # pylint: disable=broad-except
      rows = [Row(s, k, w, check=f'FAILED: {type(e).__name__}: {e}'[:300],
                  ok=False) for s, k, w in plan if s == section]
      import traceback  # pylint: disable=g-import-not-at-top
      traceback.print_exc()
    elapsed = time.perf_counter() - began
    with report.lock:
      done_sections.add(section)
      running.clear()
      header['section_s'][section] = round(elapsed, 2)
      report.add(rows)
    return elapsed

  measured: dict[str, float] = {}

  def compiled_small():
    rows = bench_compiled(small, settings)
    measured['compile_s'] = sum(rows[0].numbers['compile_s'].values()) + (
        rows[3].numbers['compile_s']['tap'])
    measured['paired_s'] = rows[0].numbers['paired_s']
    return rows

  small_s = run(f'compiled {small.name}', compiled_small,
                needs_s=0 if args.tiny else 20)
  run('decode', lambda: bench_decode(small, settings, decode_steps,
                                     prompt_length, models_from),
      needs_s=0 if args.tiny else 15)
  export_size = small if args.tiny else dataclasses.replace(small,
                                                            length=256)
  run('export', lambda: bench_export(export_size, settings, export_batches,
                                     args.out),
      needs_s=0 if args.tiny else 15)
  run('eager', lambda: bench_eager(small, settings),
      needs_s=0 if args.tiny else 10)
  # The larger size last, with fewer layers if the smaller one's times say
  # it would not fit in what is left: its compiles (half as much again, for
  # the larger matrices) and the rest (making the weights, tracing) taken
  # to grow with the layers, its timed calls with the parameters times the
  # tokens.
  if small_s is not None and 'compile_s' in measured and not args.tiny:
    compile_s, paired_s = measured['compile_s'], measured['paired_s']
    other_s = max(small_s - compile_s - paired_s, 0.0)

    def estimate(size: Size) -> float:
      work = size.params() * size.batch * size.length
      return ((compile_s * 1.5 + other_s) * size.layers / small.layers
              + paired_s * work
              / (small.params() * small.batch * small.length))

    layers = large.layers
    while estimate(large) > budget.left() - 10 and large.layers > 2:
      large = large.with_layers(large.layers // 2)
    header['estimate_s'] = estimate(large)
    if large.layers != layers:
      notes.append(f'{LARGE.name} cut to {large.layers} layers '
                   f'({_count(large.params())} parameters) to fit the '
                   'budget')
  header['sizes'] = [small.describe(), large.describe(), *notes]
  run(f'compiled {large.name}', lambda: bench_compiled(large, settings),
      needs_s=header.get('estimate_s', 0))
  text = report.finish()
  budget.stop()
  print(text)
  failed = [r for r in report.rows if r.ok is False]
  if failed:
    print(f'{len(failed)} row(s) failed their check', flush=True)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main(started=_PROCESS_START))
