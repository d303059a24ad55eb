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
"""The interventions guide's workflows on Flax's examples/gemma.

Builds the Gemma transformer of a google/flax checkout (3 layers, random
weights, tiny sizes; nothing of Flax is stored here), runs on it the
workflows of ``docs_nnx/guides/interventions.md`` (cache, activation
patching over layer x position, attribution patching, logit lens, head
ablation, steered generation), each as one ``jax.jit`` program, and reports
per workflow the XLA compilations of the first call and of later calls, the
first call's time (cold: trace, compile, run) and the median time of later
calls (warm). Each workflow also checks its result against another way of
computing it (the check column).

Run from the repository root:
python benchmarks/interventions_gemma.py --flax_checkout PATH [--smoke]
    [--publish]
(or set ``FLAX_CHECKOUT``); without a checkout it says so and exits 0.
``--publish`` writes the table into benchmarks/RESULTS.md between its
markers.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
import typing as tp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import _worktree  # noqa: E402,F401  (import flax.nnx.sow from this tree)
import results_file  # noqa: E402  (benchmarks/, beside this script)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
import numpy as np  # noqa: E402

from flax import nnx  # noqa: E402
from flax.nnx.sow import capture, capture_grads, plant, tap  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, 'tests', 'nnx', 'sow'))  # the test helpers
import sow_testing  # noqa: E402  (the suite's compile counter)

CHECKOUT_ENV = 'FLAX_CHECKOUT'
START = '<!-- interventions-gemma:start -->'
END = '<!-- interventions-gemma:end -->'

# The model: as the guide's, tiny, so that a run takes milliseconds.
LAYERS, HEADS, HEAD_DIM, WIDTH, VOCAB, T = 3, 2, 8, 16, 16, 6
CLEAN = (3, 9, 4, 12, 5, 8)
CORRUPT = (3, 9, 4, 1, 5, 8)
ANSWER, WRONG = 7, 2


@dataclasses.dataclass
class Result:
  """One workflow's measurements."""

  workflow: str
  lines: int
  first_compiles: int
  later_compiles: int
  cold_s: float
  warm_ms: float
  check: str


def counting_compiles():
  """Yields a list with an entry per XLA compilation meanwhile (the test
  suite's counter)."""
  return sow_testing.count_compiles()


def measure(fn: tp.Callable[..., tp.Any], first: tuple, later: tuple,
            repeats: int) -> tuple[tp.Any, int, int, float, float]:
  """``fn(*first)`` cold, then ``fn(*later)`` ``repeats`` times warm.

  Returns:
    The first call's result, the compilations of the first call and of the
    later calls, the first call's seconds and the later calls' median
    milliseconds.
  """
  with counting_compiles() as first_compiles:
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*first))
    cold = time.perf_counter() - start
  times = []
  with counting_compiles() as later_compiles:
    for _ in range(repeats):
      start = time.perf_counter()
      jax.block_until_ready(fn(*later))
      times.append(time.perf_counter() - start)
  return (out, len(first_compiles), len(later_compiles), cold,
          statistics.median(times) * 1e3)


# --- the model -------------------------------------------------------------


def load_gemma(checkout: str):
  """examples/gemma's modules, imported from ``checkout``."""
  tests = os.path.join(ROOT, 'tests', 'nnx', 'sow')  # the parity suite's loader
  if tests not in sys.path:
    sys.path.insert(0, tests)
  import sow_external_models as external  # pylint: disable=g-import-not-at-top
  return external.load_gemma(os.path.abspath(checkout)), external


def checkout_commit(checkout: str) -> str:
  """The checkout's ``.commit`` file (a snapshot) or its git HEAD."""
  marker = os.path.join(checkout, '.commit')
  if os.path.exists(marker):
    with open(marker) as f:
      return f.read().strip()
  done = subprocess.run(['git', '-C', checkout, 'rev-parse', 'HEAD'],
                        capture_output=True, text=True, check=False)
  return done.stdout.strip() if done.returncode == 0 else 'unknown'


def build(gemma) -> nnx.Module:
  kinds = gemma.modules.AttentionType
  config = gemma.transformer.TransformerConfig(
      num_layers=LAYERS, num_embed=VOCAB, embed_dim=WIDTH, hidden_dim=2 * WIDTH,
      num_heads=HEADS, head_dim=HEAD_DIM, num_kv_heads=HEADS,
      final_logit_softcap=30.0, use_post_attn_norm=True,
      use_post_ffw_norm=True, attention_types=(kinds.GLOBAL,) * LAYERS)
  return gemma.transformer.Transformer(config, rngs=nnx.Rngs(params=0))


def forward(model, tokens):
  """Logits ``(T, vocab)`` of one sequence ``(T,)``."""
  length = tokens.shape[0]
  positions = jnp.arange(length)[None]
  mask = jnp.tril(jnp.ones((1, length, length), jnp.bool_))
  logits, _ = model(tokens[None], positions, None, mask)
  return logits[0]


def metric(logits):
  return logits[-1, ANSWER] - logits[-1, WRONG]


# Hook points by module path: no edit of Gemma's code.
resid = lambda l: ('layers', l, '__call__', 'output')          # (None, x)
RESID = 'layers.*.__call__.output'
pattern = lambda l: ('layers', l, 'attn', 'dropout', '__call__', 'output')
PATTERN = 'layers.*.attn.dropout.__call__.output'
z_in = lambda l: ('layers', l, 'attn', 'attn_vec_einsum', '__call__',
                  'inputs', 0)                                 # z
Z_IN = 'layers.*.attn.attn_vec_einsum.__call__.inputs.0'
tapped = tap(tap(forward, 'layers.*', 'layers.*.attn.dropout', inputs=False),
             'layers.*.attn.attn_vec_einsum', inputs=0, outputs=False)


# --- the workflows ---------------------------------------------------------


def cache_workflow(model, tokens):
  return capture(tapped, names=[RESID, PATTERN])(model, tokens)


def patched(model, clean, corrupt, layer, pos, alpha):
  """The metric of ``corrupt`` with layer ``layer``'s output at ``pos``
  moved ``alpha`` of the way to the clean run's."""
  _, c = capture(tapped, names=RESID)(model, clean)
  at = (jnp.arange(T) == pos)[:, None]

  def patch(value, index, name):   # every layer's output; acts at `layer`
    cache, x = value
    moved = x + alpha * (c.one(name)[1] - x)
    return cache, jnp.where((name[1] == layer) & at, moved, x)

  return metric(plant(tapped, {RESID: patch})(model, corrupt))


def patch_sweep(model, clean, corrupt, alpha):
  layers, positions = jnp.meshgrid(jnp.arange(LAYERS), jnp.arange(T),
                                   indexing='ij')
  sweep = jax.vmap(patched, (None, None, None, 0, 0, None))
  return sweep(model, clean, corrupt, layers.ravel(), positions.ravel(),
               alpha).reshape(LAYERS, T)


def attribution(model, clean, corrupt):
  _, c = capture(tapped, names=RESID)(model, clean)
  _, k, g = capture_grads(lambda m, t: metric(tapped(m, t)), RESID)(
      model, corrupt)
  return jnp.stack([jnp.sum(g.one(resid(l))[1] * (c.one(resid(l))[1]
                                                  - k.one(resid(l))[1]),
                            axis=-1)[0] for l in range(LAYERS)])  # (L, T)


def logit_lens(model, tokens):
  _, c = capture(tapped, names=RESID)(model, tokens)
  x = model.final_norm(jnp.stack([c.one(resid(l))[1] for l in range(LAYERS)]))
  logits = model.embedder.attend(x)
  cap = model.final_logits_softcap
  return jnp.tanh(logits / cap) * cap                          # (L, 1, T, V)


def ablated(model, tokens, layer, head):
  def zero(z, index, name):        # every layer's z; acts at `layer`
    off = (name[1] == layer) & (jnp.arange(HEADS) == head)[:, None]
    return jnp.where(off, 0, z)

  return metric(plant(tapped, {Z_IN: zero})(model, tokens))


def ablation_sweep(model, tokens):
  layers, heads = jnp.meshgrid(jnp.arange(LAYERS), jnp.arange(HEADS),
                               indexing='ij')
  sweep = jax.vmap(ablated, (None, None, 0, 0))
  return sweep(model, tokens, layers.ravel(), heads.ravel()).reshape(
      LAYERS, HEADS)


def generate(model, prompt, steps):
  """Greedy decoding of ``steps`` tokens after ``prompt``, recomputing the
  whole (fixed-length) buffer at each step; causal, so later slots do not
  matter."""
  n = prompt.shape[0]
  buffer = jnp.zeros(n + steps, jnp.int32).at[:n].set(prompt)
  step = lambda t, buf: buf.at[t].set(jnp.argmax(tapped(model, buf)[t - 1]))
  return lax.fori_loop(n, n + steps, step, buffer)


def steered(model, prompt, vector, alpha, layer=1, steps=4):
  add = lambda v, i: (v[0], v[1] + alpha * vector)
  return plant(lambda m, p: generate(m, p, steps), {resid(layer): add})(
      model, prompt)


# --- the run ---------------------------------------------------------------


def close(a, b, ulps=64) -> bool:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  scale = max(np.abs(a).max(), np.abs(b).max(), 1e-30)
  return bool(np.abs(a - b).max() <= ulps * np.finfo(np.float32).eps * scale)


def code_lines(*fns: tp.Callable[..., tp.Any]) -> int:
  """Lines of code of ``fns``: ``def`` lines included, docstrings, comments
  and blank lines not."""
  count = 0
  for fn in fns:
    source = textwrap.dedent(inspect.getsource(fn))
    (node,) = ast.parse(source).body
    skip = set()
    if ast.get_docstring(node) is not None:
      doc = node.body[0]
      skip = set(range(doc.lineno, doc.end_lineno + 1))
    count += sum(1 for i, line in enumerate(source.splitlines(), 1)
                 if i not in skip and line.strip()
                 and not line.strip().startswith('#'))
  return count


# The functions of each workflow (the model, `forward`, `metric` and the
# taps are shared by all, and not counted).
WORKFLOWS = {
    'cache': (cache_workflow,),
    'activation patching (layer x position)': (patched, patch_sweep),
    'attribution patching': (attribution,),
    'logit lens': (logit_lens,),
    'head ablation': (ablated, ablation_sweep),
    'steered generation': (generate, steered),
}


def run(checkout: str, smoke: bool) -> list[Result]:
  gemma, external = load_gemma(checkout)
  repeats = 2 if smoke else 20
  clean, corrupt = jnp.array(CLEAN), jnp.array(CORRUPT)
  results = []

  def add(name, fn, first, later, check):
    out, n1, n2, cold, warm = measure(jax.jit(fn), first, later, repeats)
    results.append(Result(name, code_lines(*WORKFLOWS[name]), n1, n2, cold, warm,
                          'ok' if check(out) else 'FAILED'))
    return out

  with external.gemma_mesh():
    model = build(gemma)
    plain = jax.jit(forward)
    clean_m = metric(plain(model, clean))

    def check_cache(out):
      logits, c = out
      return (close(logits, plain(model, clean))
              and c[pattern(0)][0].shape == (1, T, HEADS, T))

    add('cache', cache_workflow, (model, clean), (model, corrupt),
        check_cache)
    # The last layer's output at the last position decides the metric.
    add('activation patching (layer x position)', patch_sweep,
        (model, clean, corrupt, 1.0), (model, corrupt, clean, 1.0),
        lambda p: close(p[-1, -1], clean_m, ulps=512))
    sweep = jax.jit(patch_sweep)
    eps = 1e-2
    slope = (np.asarray(sweep(model, clean, corrupt, eps), np.float64)
             - np.asarray(sweep(model, clean, corrupt, -eps), np.float64)
             ) / (2 * eps)
    add('attribution patching', attribution, (model, clean, corrupt),
        (model, corrupt, clean),
        lambda a: np.abs(a - slope).max() <= 1e-2 * np.abs(a).max())
    add('logit lens', logit_lens, (model, clean), (model, corrupt),
        lambda lens: close(lens[-1, 0], plain(model, clean)))
    # Against zeroing the head in the value captured from the same run.
    def check_ablation(table):
      _, c = capture(tapped, names=[z_in(1)])(model, clean)
      zeroed = c.one(z_in(1)).at[:, :, 0].set(0)
      direct = metric(plant(tapped, {z_in(1): (zeroed,)})(model, clean))
      return close(table[1, 0], direct, ulps=512)

    add('head ablation', ablation_sweep, (model, clean), (model, corrupt),
        check_ablation)
    vector = jax.random.normal(jax.random.key(1), (WIDTH,))
    prompt = clean[:3]
    unsteered = jax.jit(lambda m, p: generate(m, p, 4))(model, prompt)
    # alpha = 0 is the plain decoding; a large alpha changes the tokens.
    steer = jax.jit(steered)
    add('steered generation', steered, (model, prompt, vector, 0.0),
        (model, prompt, vector, 8.0),
        lambda tokens: bool((tokens == unsteered).all()) and bool(
            (steer(model, prompt, vector, 8.0) != unsteered).any()))
  return results


def render(results: list[Result], checkout: str, smoke: bool) -> str:
  commit = checkout_commit(checkout)[:12]
  lines = [
      '## Interventions on Flax\'s Gemma',
      '',
      f'From `python benchmarks/interventions_gemma.py'
      f'{" --smoke" if smoke else ""}` on {time.strftime("%Y-%m-%d")}: '
      f'google/flax@{commit} examples/gemma, {LAYERS} layers, {HEADS} heads,'
      f' width {WIDTH}, vocabulary {VOCAB}, {T} tokens, random weights; '
      f'{platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__},'
      f' {jax.devices()[0].platform}. Each workflow of the interventions '
      'guide is one `jax.jit` program; "compiles" counts XLA compilations '
      '(first call / the later calls, on other inputs), cold is the first '
      'call (trace, compile, run), warm the median of the later calls; '
      '"check" compares the result with another way of computing it; '
      '"lines" counts the code of the workflow\'s functions in the script '
      '(`def` lines included; the model and its taps are shared).',
      '',
      '| workflow | lines | compiles (first / later) | cold (s) | warm (ms)'
      ' | check |',
      '|---|---|---|---|---|---|',
  ]
  lines += [f'| {r.workflow} | {r.lines} | {r.first_compiles} / '
            f'{r.later_compiles} | {r.cold_s:.2f} | {r.warm_ms:.2f} | '
            f'{r.check} |' for r in results]
  return '\n'.join(lines) + '\n'


def publish(text: str, path: str = results_file.RESULTS) -> None:
  results_file.publish(text, START, END, path)


def main(argv: tp.Optional[list[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--flax_checkout', default=os.environ.get(CHECKOUT_ENV),
                      help=f'a google/flax checkout (or ${CHECKOUT_ENV})')
  parser.add_argument('--smoke', action='store_true',
                      help='two warm calls per workflow; nothing published')
  parser.add_argument('--publish', action='store_true',
                      help='write the table into benchmarks/RESULTS.md')
  args = parser.parse_args(argv)
  if args.smoke and args.publish:
    parser.error('--publish needs a full run, not --smoke')
  checkout = args.flax_checkout
  if not checkout or not os.path.isdir(
      os.path.join(checkout, 'examples', 'gemma')):
    print('skipped: no google/flax checkout with examples/gemma; pass '
          f'--flax_checkout PATH or set {CHECKOUT_ENV}')
    return 0
  results = run(checkout, args.smoke)
  text = render(results, checkout, args.smoke)
  print(text)
  if args.publish:
    publish(text)
  failed = [r.workflow for r in results if r.check != 'ok']
  if failed:
    print('checks failed: ' + ', '.join(failed))
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
