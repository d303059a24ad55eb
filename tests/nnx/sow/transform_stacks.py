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
"""Transform stacks around and inside loops, against a per-step oracle.

A case is a loop (``scan``, ``fori_loop`` with static or traced bounds,
``while_loop`` under ``max_steps``, or a ``cond``) whose step holds one site
(a ``sow``, a ``perturb``, or a ``custom_vjp`` whose backward rule sows),
with a stack of JAX transforms around the loop and another inside it
(``vmap``, ``grad``, ``jvp``, ``jacfwd``, ``jacrev``, ``linearize``,
``vjp``, ``checkpoint``, ``custom_jvp``, ``custom_vjp``), eagerly or under
``jax.jit``.

The oracle is the same program with the loop stepped in Python, where the
site of step ``i`` has a name of its own, ``('s', i)``, so that each step is
captured alone and no loop axis is placed by the code under test: the
expected value of the loop's site is those values stacked on a new axis after
the axes that the transforms around the loop add (a ``vmap``, the basis of a
``jacfwd``, or of a ``jacrev`` for a site of its backward pass), counted by
capturing the loop alone: the layout ``capture`` documents.

Each case ends in one of: equal values; a refusal of the package (an error
whose message starts with its name: ``capture:``, ``perturb``, ...); not
applicable (the function without ``capture`` raises in JAX too, or sows
nothing: a ``perturb`` with no reverse mode around it); anything else is a
failure: a wrong value, or an error from inside JAX where the function
without ``capture`` runs.
"""

from __future__ import annotations

import dataclasses
import random
import typing as tp

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import perturb
from flax.nnx.sow import sow

TRANSFORMS = ('vmap', 'grad', 'jvp', 'jacfwd', 'jacrev', 'linearize', 'vjp',
              'checkpoint', 'custom_jvp', 'custom_vjp')
LOOPS = ('scan', 'fori', 'fori_traced', 'while', 'cond')
SITES = ('sow', 'perturb', 'custom_vjp_sow')
LENGTH = 3  # steps of every loop
BATCH = 2  # size of every vmap
SHAPE = (2,)  # of the innermost step's value
MAX_STEPS = LENGTH + 2  # the bound of a while_loop: kept steps, some empty



@dataclasses.dataclass(frozen=True)
class Case:
  outer: tuple[str, ...]  # transforms around the loop, outermost first
  inner: tuple[str, ...]  # transforms inside the step, outermost first
  loop: str
  site: str
  jit: bool

  def __str__(self):
    around = ''.join(f'{t}(' for t in self.outer)
    within = ''.join(f'{t}(' for t in self.inner)
    close = ')' * (len(self.outer) + len(self.inner))
    return (f'{"jit " if self.jit else ""}{around}{self.loop}[{within}'
            f'{self.site}{close}]')


class Outcome(tp.NamedTuple):
  kind: str  # 'equal', 'refused', 'not applicable', 'failure'
  detail: str = ''


# -- Building a case ---------------------------------------------------------
def _wrap(kind: str, g: tp.Callable) -> tp.Callable:
  """``g`` (shape -> same shape) under transform ``kind``: again a function
  of one array to an array of its shape (with a leading axis of ``BATCH``
  for a vmap)."""
  if kind == 'vmap':
    return jax.vmap(g)
  if kind == 'grad':
    return jax.grad(lambda x: jnp.sum(jnp.sin(g(x))))
  if kind == 'jvp':
    return lambda x: jax.jvp(g, (x,), (jnp.ones_like(x),))[1]
  if kind == 'jacfwd':
    return jax.jacfwd(lambda x: jnp.sum(jnp.sin(g(x))))
  if kind == 'jacrev':
    return jax.jacrev(lambda x: jnp.sum(jnp.sin(g(x))))
  if kind == 'linearize':
    return lambda x: jax.linearize(g, x)[1](jnp.ones_like(x))
  if kind == 'vjp':
    def pulled(x):
      out, back = jax.vjp(g, x)
      return back(jnp.cos(out))[0]
    return pulled
  if kind == 'checkpoint':
    return jax.checkpoint(g)
  if kind == 'custom_jvp':
    f = jax.custom_jvp(g)
    f.defjvp(lambda primals, tangents: jax.jvp(g, primals, tangents))
    return f
  if kind == 'custom_vjp':
    return _custom_vjp(g, None)
  raise ValueError(kind)


def _custom_vjp(g: tp.Callable, name: tp.Any) -> tp.Callable:
  """``g`` with its own VJP; with a ``name``, the backward rule sows the
  cotangent it receives under it."""
  f = jax.custom_vjp(g)

  def fwd(x):
    return g(x), x

  def bwd(x, ct):
    if name is not None:
      ct = sow(ct, name=name)
    return jax.vjp(g, x)[1](ct)

  f.defvjp(fwd, bwd)
  return f


def _site(kind: str, name: tp.Any) -> tp.Callable:
  if kind == 'sow':
    return lambda x: jnp.sin(sow(x * 1.5 + 0.25, name=name))
  if kind == 'perturb':
    return lambda x: jnp.sin(perturb(x * 1.5 + 0.25, name=name))
  if kind == 'custom_vjp_sow':
    return _custom_vjp(lambda x: jnp.sin(x * 1.5 + 0.25), name)
  raise ValueError(kind)


def _step(case: Case, name: tp.Any) -> tp.Callable:
  g = _site(case.site, name)
  for kind in reversed(case.inner):
    g = _wrap(kind, g)
  return g


def _loop(case: Case, unrolled: bool) -> tp.Callable:
  """The loop of ``LENGTH`` steps over the carry; ``unrolled``: stepped in
  Python, step ``i``'s site named ``('s', i)``."""
  if unrolled:
    steps = [_step(case, ('s', i)) for i in range(LENGTH)]

    def run(c):
      if case.loop == 'cond':
        return steps[0](c)
      for step in steps:
        c = step(c)
      return c
    return run
  step = _step(case, 's')
  if case.loop == 'scan':
    return lambda c: lax.scan(lambda c, _: (step(c), None), c, None,
                              length=LENGTH)[0]
  if case.loop == 'fori':
    return lambda c: lax.fori_loop(0, LENGTH, lambda i, c: step(c), c)
  if case.loop == 'fori_traced':
    def traced(c):
      # A bound computed from the input: a while_loop, whatever its value.
      n = jnp.int32(LENGTH) + (jnp.sum(c) * 0).astype(jnp.int32)
      return lax.fori_loop(0, n, lambda i, c: step(c), c)
    return traced
  if case.loop == 'while':
    def counted(c):
      return lax.while_loop(lambda ic: ic[0] < LENGTH,
                            lambda ic: (ic[0] + 1, step(ic[1])), (0, c))[1]
    return counted
  if case.loop == 'cond':
    # Both branches sow the same (a cond's branches must); the first runs.
    return lambda c: lax.cond(jnp.sum(c) > -1e9, step,
                              lambda c: step(c * 0.5), c)
  raise ValueError(case.loop)


def build(case: Case, unrolled: bool) -> tp.Callable:
  f = _loop(case, unrolled)
  for kind in reversed(case.outer):
    f = _wrap(kind, f)
  return f


def input_for(case: Case) -> jax.Array:
  vmaps = sum(t == 'vmap' for t in case.outer + case.inner)
  shape = (BATCH,) * vmaps + SHAPE
  return jnp.linspace(-0.7, 0.9, int(np.prod(shape)),
                      dtype=jnp.float32).reshape(shape)


# -- Checking a case ---------------------------------------------------------
_REFUSAL_PREFIXES = ('capture', 'perturb', 'plant', 'sow', 'tap')


def _is_refusal(error: Exception) -> bool:
  return (isinstance(error, (ValueError, NotImplementedError, TypeError))
          and str(error).startswith(_REFUSAL_PREFIXES))


def _outer_axes(case: Case, x: jax.Array, value: np.ndarray) -> int:
  """How many leading axes of a step's ``value`` the transforms around the
  loop add: its rank less that of the same site in the loop alone, run on
  one example of the loop's carry (under a ``grad`` for a site sown by the
  backward pass, which adds no axis). Measured on loop-free programs, so
  that the oracle's layout owes nothing to the code under test."""
  vmaps = sum(t == 'vmap' for t in case.outer)
  alone = _loop(case, unrolled=True)
  if case.site != 'sow':
    alone = jax.grad(lambda c, loop=alone: jnp.sum(jnp.sin(loop(c))))
  _, sown = capture(alone)(x[(0,) * vmaps])
  return np.ndim(value) - np.ndim(sown[('s', 0)][0])


def _expected(case: Case, per_step: list[tp.Any], axis: int) -> np.ndarray:
  if case.loop == 'cond':
    return np.asarray(per_step[0])
  return np.stack([np.asarray(v) for v in per_step], axis=axis)


def _close(got, want) -> str | None:
  """None if equal to float32 rounding (the loop and its unrolled oracle
  are different programs: XLA may fuse and order their operations
  differently; 1e-5 relative to the largest magnitude holds on any CPU for
  these few dozen operations), else the difference."""
  got, want = np.asarray(got), np.asarray(want)
  if got.shape != want.shape:
    return f'shape {got.shape}, expected {want.shape}'
  scale = max(float(np.max(np.abs(want), initial=0.0)), 1.0)
  error = float(np.max(np.abs(got - want), initial=0.0))
  if not error <= 1e-5 * scale:
    return f'values differ by {error:.3g} (scale {scale:.3g})'
  return None


def check(case: Case) -> Outcome:
  x = input_for(case)
  plain = build(case, unrolled=False)
  oracle = build(case, unrolled=True)
  bounds = ({'max_steps': MAX_STEPS}
            if case.loop in ('while', 'fori_traced') else {})
  try:
    # Run as the capture runs it: a fori_loop's bound is concrete in an
    # eager call (a scan), traced under jit (a while_loop).
    want_out = (jax.jit(plain) if case.jit else plain)(x)
  except Exception as e:  # pylint: disable=broad-exception-caught
    return Outcome('not applicable', f'without capture: {e!r:.200}')
  try:
    # The unrolled program has no loop, but its stack is the case's: it is
    # captured as the case is (eagerly or under jit).
    _, sown = (jax.jit(capture(oracle)) if case.jit else capture(oracle))(x)
  except Exception as e:  # pylint: disable=broad-exception-caught
    if _is_refusal(e):
      return Outcome('refused', 'unrolled: ' + str(e).split('\n')[0])
    return Outcome('failure',
                   f'unrolled: {type(e).__name__}: {str(e)[:300]}')
  per_step = [sown[('s', i)] for i in range(LENGTH) if ('s', i) in sown]
  if not per_step:
    return Outcome('not applicable', 'the oracle sows nothing')
  if case.loop != 'cond' and len(per_step) != LENGTH:
    return Outcome('failure', f'the oracle sowed {len(per_step)} steps')
  if any(len(entries) != 1 for entries in per_step):
    return Outcome('not applicable', 'a step sows more than once')
  values = [entries[0] for entries in per_step]
  axis = _outer_axes(case, x, values[0])
  want = _expected(case, values, axis)
  run = capture(plain, **bounds)
  if case.jit:
    run = jax.jit(run)
  try:
    out, collected = run(x)
  except Exception as e:  # pylint: disable=broad-exception-caught
    if _is_refusal(e):
      return Outcome('refused', str(e).split('\n')[0])
    return Outcome('failure', f'{type(e).__name__}: {str(e)[:300]}')
  difference = _close(out, want_out)
  if difference is not None:
    return Outcome('failure', f'output: {difference}')
  if list(collected) != ['s']:
    return Outcome('failure', f'collected {list(collected)}')
  # One entry, or one per time JAX runs the loop: linearize runs a
  # while_loop twice (its known half, then the whole loop for the tangents),
  # and each run sows.
  for got in collected['s']:
    difference = _compare(got, want, axis)
    if difference is not None:
      return Outcome('failure', f"'s' ({len(collected['s'])} entries):"
                     f' {difference}')
  if len(collected['s']) > 1:
    return Outcome('equal', f"{len(collected['s'])} entries")
  return Outcome('equal')


def _compare(got: tp.Any, want: np.ndarray, axis: int) -> str | None:
  """How the loop's entry ``got`` differs from the oracle's, or None."""
  if hasattr(got, 'count'):
    # A Steps: the loop axis holds MAX_STEPS entries, the first LENGTH run.
    # (A fori_loop whose bound is concrete, as it is in an eager capture,
    # is a scan: its values are stacked as a scan's.)
    count = np.asarray(got.count)
    if not np.all(count == LENGTH):
      return f'count {count}, expected {LENGTH}'
    values = np.asarray(got.values)
    if values.ndim <= axis or values.shape[axis] != MAX_STEPS:
      return (f'steps of shape {values.shape}, the loop axis ({MAX_STEPS})'
              f' expected at {axis}')
    got = np.take(values, np.arange(LENGTH), axis=axis)
  return _close(got, want)


def sample(seed: int, n: int, max_depth: int = 4) -> list[Case]:
  """``n`` distinct cases drawn with ``seed``: stacks of depth 0 to
  ``max_depth`` split between around the loop and inside it."""
  rng = random.Random(seed)
  cases: dict[Case, None] = {}
  while len(cases) < n:
    depth = rng.randint(1, max_depth)
    stack = tuple(rng.choice(TRANSFORMS) for _ in range(depth))
    split = rng.randint(0, depth)
    case = Case(outer=stack[:split], inner=stack[split:],
                loop=rng.choice(LOOPS), site=rng.choice(SITES),
                jit=rng.random() < 0.5)
    cases[case] = None
  return list(cases)
