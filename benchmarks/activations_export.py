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
"""The activations export at the limit: against the forward pass and the disk.

Run from the repository root:
python benchmarks/activations_export.py [--smoke] [--publish]

Two rows, each a ratio of two things measured side by side in one run; the
sides alternate repeat by repeat (so a change in machine load hits both)
and each side's figure is the median of its repeats, after a warm-up that
compiles:

* compute-bound: a small transformer's residual streams (the output of
  every block, tapped) exported over N batches, against the bare jitted
  forward (``nnx.jit`` of the model) over the same batches: examples/s over
  examples/s; the export includes creating, writing and trimming the store.
* IO-bound: a function that sows 16 MiB per batch from almost no compute,
  exported over 2 GiB; its bytes/s against the disk's sequential write
  bandwidth, measured by writing the same bytes in blocks of a batch's size
  to one file. Both sides end with ``os.sync()``, so both are the disk's
  speed, not the page cache's; the store is on the same file system as the
  file.

Each side's result is checked: the store read back equals the values
computed directly.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import typing as tp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import _worktree  # noqa: E402,F401  (import flax.nnx.sow from this tree)
import results_file  # noqa: E402  (benchmarks/, beside this script)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from flax import nnx  # noqa: E402
from flax.nnx.sow import activations, sow, tap  # noqa: E402

START = '<!-- activations-export:start -->'
END = '<!-- activations-export:end -->'


class Block(nnx.Module):

  def __init__(self, width, heads, rngs):
    self.norm1 = nnx.LayerNorm(width, rngs=rngs)
    self.attn = nnx.MultiHeadAttention(heads, width, decode=False, rngs=rngs)
    self.norm2 = nnx.LayerNorm(width, rngs=rngs)
    self.up = nnx.Linear(width, 4 * width, rngs=rngs)
    self.down = nnx.Linear(4 * width, width, rngs=rngs)

  def __call__(self, x):
    x = x + self.attn(self.norm1(x))
    return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))


class Transformer(nnx.Module):

  def __init__(self, vocab, width, heads, layers, rngs):
    self.embed = nnx.Embed(vocab, width, rngs=rngs)
    self.blocks = nnx.List([Block(width, heads, rngs)
                            for _ in range(layers)])
    self.unembed = nnx.Linear(width, vocab, rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens)
    for block in self.blocks:
      x = block(x)
    return self.unembed(x)


def alternate(sides: tp.Sequence[tp.Callable[[], None]], repeats: int,
              ) -> list[float]:
  """Median seconds of each side, alternating repeat by repeat."""
  for side in sides:  # warm-up: compiles
    side()
  times = [[] for _ in sides]
  for _ in range(repeats):
    for i, side in enumerate(sides):
      start = time.perf_counter()
      side()
      times[i].append(time.perf_counter() - start)
  return [statistics.median(t) for t in times]


class Scratch:
  """A fresh store path per call, on one file system, removed after."""

  def __init__(self):
    self.folder = tempfile.mkdtemp(dir=os.environ.get('TMPDIR'))
    self.count = 0

  def path(self) -> str:
    self.count += 1
    path = os.path.join(self.folder, f'store-{self.count}')
    shutil.rmtree(os.path.join(self.folder, f'store-{self.count - 1}'),
                  ignore_errors=True)
    return path

  def close(self):
    shutil.rmtree(self.folder, ignore_errors=True)


def compute_bound(smoke: bool, scratch: Scratch) -> dict[str, tp.Any]:
  vocab, width, heads, layers, length, examples = (
      (32, 32, 2, 2, 8, 4) if smoke else (512, 384, 6, 4, 128, 8))
  n = 3 if smoke else 24
  model = Transformer(vocab, width, heads, layers, nnx.Rngs(0))
  rng = np.random.default_rng(0)
  batches = [jnp.asarray(rng.integers(0, vocab, (examples, length)))
             for _ in range(n)]
  forward = nnx.jit(lambda m, t: m(t))
  tapped = tap(lambda m, t: m(t), 'blocks.*')

  def bare():
    out = None
    for batch in batches:
      out = forward(model, batch)
    jax.block_until_ready(out)

  last = {}

  def export():
    last['data'] = activations.export(
        tapped, batches, scratch.path(), args=(model,),
        names='blocks.*.__call__.output', progress=False)

  seconds = alternate([bare, export], repeats=1 if smoke else 5)
  data = last['data']

  def by_hand(m, t):
    x, out = m.embed(t), []
    for block in m.blocks:
      x = block(x)
      out.append(x)
    return out

  direct = [np.concatenate(v) for v in zip(
      *(nnx.jit(by_hand)(model, b) for b in batches))]
  # The same blocks in another jitted program: XLA may fuse them otherwise,
  # so a float32 tolerance of a few ulps of the stream's scale.
  ok = all(np.allclose(data.read(f'blocks.{i}.__call__.output'), d,
                       rtol=1e-5, atol=1e-5) for i, d in enumerate(direct))
  bytes_per_batch = data.layout.batch_bytes()
  return dict(
      what=(f'{layers}-layer transformer, width {width}, {examples}x{length}'
            f' tokens per batch, {n} batches; {layers} residual streams,'
            f' {bytes_per_batch / 2**20:.1f} MiB per batch'),
      bare=n * examples / seconds[0], export=n * examples / seconds[1],
      ok=ok)


def io_bound(smoke: bool, scratch: Scratch) -> dict[str, tp.Any]:
  rows, inner, width = (64, 4, 256) if smoke else (1024, 16, 4096)
  # 2 GiB: written to the page cache and flushed by os.sync(), both sides
  # are the disk's speed; smaller, the memory copies dominate.
  n = 3 if smoke else 128
  w = jnp.asarray(np.random.default_rng(1).normal(size=(inner, width)),
                  jnp.float32)
  inputs = [jnp.full((rows, inner), float(i)) for i in range(n)]

  def f(x):
    return sow(x @ w, name='h')

  block = np.array(jax.jit(f)(inputs[0]))
  nbytes = n * block.nbytes

  def disk():
    path = scratch.path()
    os.makedirs(path)
    with open(os.path.join(path, 'sequential'), 'wb') as file:
      for i in range(n):
        block[0, 0] = i  # bytes written, as the export's are
        file.write(block.data)
    os.sync()

  last = {}

  def export():
    last['data'] = activations.export(f, inputs, scratch.path(),
                                      progress=False)
    os.sync()

  seconds = alternate([disk, export], repeats=1 if smoke else 5)
  data = last['data']
  # Batch by batch (2 GiB in all): the store against f's jitted values.
  jitted = jax.jit(lambda x: x @ w)
  ok = all(np.array_equal(data.read('h', rows=slice(i * rows,
                                                      (i + 1) * rows)),
                          np.asarray(jitted(x)))
           for i, x in enumerate(inputs))
  return dict(
      what=(f'{rows}x{width} float32 per batch ({block.nbytes / 2**20:.0f}'
            f' MiB), {n} batches ({nbytes / 2**20:.0f} MiB)'),
      disk=nbytes / seconds[0], export=nbytes / seconds[1], ok=ok)


def render(compute, io, smoke) -> str:
  def row(name, what, ratio, target, detail, ok):
    met = 'met' if ratio >= target else 'MISSED'
    return (f'| {name} | {what} | {ratio:.2f} | >= {target} ({met}) |'
            f' {detail} | {"ok" if ok else "FAILED"} |')

  return '\n'.join([
      '## Activations export: against the forward pass and the disk',
      '',
      f'From `python benchmarks/activations_export.py'
      f'{" --smoke" if smoke else ""}` on {time.strftime("%Y-%m-%d")}:'
      f' {platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__},'
      f' {jax.devices()[0].platform}. Sides alternate repeat by repeat; each'
      ' figure is the median of 5 repeats after a warm-up that compiles.'
      ' Compute-bound: examples/s of `activations.export` of every block\'s'
      ' output over examples/s of the bare `nnx.jit` forward over the same'
      ' batches (store created, written and trimmed). IO-bound: bytes/s of'
      ' an export of a site of 16 MiB per batch over the bytes/s of writing'
      ' the same 2 GiB sequentially to one file, on the same file system;'
      ' both end with `os.sync()`, so both are bound by the disk.'
      ' "check": the store read back equals the values computed directly.',
      '',
      '| case | what | ratio | target | sides | check |',
      '|---|---|---|---|---|---|',
      row('compute-bound', compute['what'],
          compute['export'] / compute['bare'], 0.9,
          f'{compute["export"]:.1f} vs {compute["bare"]:.1f} examples/s',
          compute['ok']),
      row('IO-bound', io['what'], io['export'] / io['disk'], 0.8,
          f'{io["export"] / 1e6:.0f} vs {io["disk"] / 1e6:.0f} MB/s',
          io['ok']),
  ]) + '\n'


def publish(text: str, path: str = results_file.RESULTS) -> None:
  results_file.publish(text, START, END, path)


def main(argv: tp.Optional[list[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--smoke', action='store_true',
                      help='tiny sizes, one repeat; nothing published')
  parser.add_argument('--publish', action='store_true',
                      help='write the table into benchmarks/RESULTS.md')
  args = parser.parse_args(argv)
  if args.smoke and args.publish:
    parser.error('--publish needs a full run, not --smoke')
  scratch = Scratch()
  try:
    compute = compute_bound(args.smoke, scratch)
    io = io_bound(args.smoke, scratch)
  finally:
    scratch.close()
  text = render(compute, io, args.smoke)
  print(text)
  if args.publish:
    publish(text)
  if not (compute['ok'] and io['ok']):
    print('a check failed: the store differs from the values')
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
