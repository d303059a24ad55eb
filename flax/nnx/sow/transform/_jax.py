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
"""Every private JAX name ``flax.nnx.sow`` uses, each with why.

The rest of the package (and ``flax.nnx.capture_compat``) imports JAX only
through public modules (``jax``, ``jax.core``, ``jax.extend``,
``jax.interpreters``, ``jax.tree_util``) and through this module, so that a
JAX upgrade has one file to check. Each name says why no public module
serves (as of JAX 0.10.2).
"""

from __future__ import annotations

import inspect
import sys
import types
import typing as tp

# pylint: disable=g-bad-import-order,protected-access
from jax._src import ad_util
from jax._src import core
from jax._src import custom_batching
from jax._src import effects
from jax._src import pjit
from jax._src import shard_map
from jax._src import sharding_impls
from jax._src import source_info_util
from jax._src import tree_util
from jax._src import util
from jax._src.interpreters import ad
from jax._src.interpreters import batching
from jax._src.interpreters import partial_eval as pe
from jax._src.lax import eval_jaxpr as eval_jaxpr_lib
from jax._src.lax.control_flow import conditionals

# -- Traces ------------------------------------------------------------------
# The current trace (`trace_ctx.trace`, `trace_ctx.is_top_level()`): public
# JAX only offers `find_top_trace` over given values and debug-only probes.
trace_ctx = core.trace_ctx
# JAX's eval trace, the parent of an eager interpretation at the top level:
# a bind handed to it runs at once, as at the top level (`eager.EagerTrace`
# hands it every primitive without a sow). Public JAX has no handle on it.
eval_trace = core.eval_trace
# The type of the staging (`jit`) trace, to emit equations into it directly;
# `jax.interpreters.partial_eval` exports its tracer, not the trace.
DynamicJaxprTrace = pe.DynamicJaxprTrace
# Per-primitive hooks of that trace: the rule receives the trace itself, so a
# capture can take the sows staged into its own trace without emitting them
# (see `staged_sows`). Only partial_eval has the table.
custom_staging_rules = pe.custom_staging_rules


def staged_eqns(trace: DynamicJaxprTrace) -> list[tp.Any]:
  """The list the staging ``trace`` appends its equations to, in order.

  Equations it may drop as dead are held by weak reference, the others
  (those with effects) as ``TracingEqn`` objects; positions never move, so
  a position read while tracing still orders the equations with effects
  in the jaxpr the trace returns. Public JAX has no view of the equations
  staged so far.
  """
  return trace.frame.tracing_eqns


TracingEqn = pe.TracingEqn

# -- Effects -----------------------------------------------------------------
# JAX's allow-lists of effects that may appear inside a lowering, control
# flow, custom derivatives, remat, and that partial evaluation keeps: there is
# no public way to register an effect type with them.
lowerable_effects = effects.lowerable_effects
control_flow_allowed_effects = effects.control_flow_allowed_effects
custom_derivatives_allowed_effects = effects.custom_derivatives_allowed_effects
remat_allowed_effects = effects.remat_allowed_effects
partial_eval_kept_effects = effects.partial_eval_kept_effects
# Effects that refer to jaxpr inputs by position (state effects): a rewritten
# jaxpr that moves its inputs must not copy them; the type is not public.
JaxprInputEffect = effects.JaxprInputEffect

# -- Primitives --------------------------------------------------------------
# Higher-order primitives with a capture rule that `jax.extend.core.primitives`
# does not list: bound by `jax.custom_batching.custom_vmap`, and by
# `jax.shard_map` (and `jax.pmap`).
custom_vmap_p = custom_batching.custom_vmap_p
shard_map_p = shard_map.shard_map_p
# Bound eagerly by code that evaluates a closed jaxpr as one primitive (it
# stages as `closed_call`); an eager interpretation meets it as it is.
eval_jaxpr_p = eval_jaxpr_lib.eval_jaxpr_p
# `jit` parameters use this sentinel for a sharding left to the compiler.
UNSPECIFIED = sharding_impls.UNSPECIFIED
# `shard_map_p.bind(subfuns=...)` expects its body to return a FlatTree with
# the output specs as aux data; `jax.tree_util` has no FlatTree.
FlatTree = tree_util.FlatTree
# Zeros of an abstract value with its sharding and varying manual axes, as a
# scan carry must be typed inside `shard_map`; `jnp.zeros` drops both.
zeros_like_aval = ad_util.zeros_like_aval
# The name-stack entry a transformation (`vmap`, `jvp`, ...) leaves on the
# equations it emits; `jax.extend.source_info_util` exports the stack only.
Transform = source_info_util.Transform
# The frames of an equation's traceback outside JAX, so that an error names
# the user's line rather than our own wrapper around `sow_p.bind`;
# `jax.extend.source_info_util.summarize` gives only the first of them.
user_frames = source_info_util.user_frames

# -- Jaxprs and caches -------------------------------------------------------
# Closes (and cached: the same open jaxpr gives the same closed one, which
# keys our caches) and converts constants to inputs as JAX's own rules do;
# neither is in `jax.interpreters.partial_eval`.
close_jaxpr = pe.close_jaxpr
convert_constvars_jaxpr = pe.convert_constvars_jaxpr
# An LRU cache keyed weakly by its first argument (a jaxpr) and, optionally,
# by the trace context: `functools.lru_cache` would keep every jaxpr alive.
weakref_lru_cache = util.weakref_lru_cache

# -- Tracers ------------------------------------------------------------------
# What a JVP or linearize tracer stands for (its primal) and a batch tracer's
# batched value: a deferred sow (`deferred`) whose anchor is a tracer of a
# trace that is not current (a module closed over by a custom_vjp's forward
# under grad) finds the caller's array through them. Public JAX has no
# accessor for either.
_PRIMAL_TRACERS = (ad.JVPTracer, ad.LinearizeTracer)


def traced_value(tracer: tp.Any) -> tp.Any | None:
  """The value ``tracer`` stands for in its parent trace, or ``None``."""
  if isinstance(tracer, _PRIMAL_TRACERS):
    return tracer.primal
  if isinstance(tracer, batching.BatchTracer):
    return tracer.val
  return None


# -- jit functions -----------------------------------------------------------
# The options a `jax.jit` function was made with (static and donated
# arguments, compiler options), which an eager `capture(jax.jit(f))` compiles
# with: `jax.jit` keeps them only as the function's private `_jit_info`.
def jit_info(f: tp.Any) -> tp.Any:
  """The ``PjitInfo`` of a ``jax.jit`` function (its options)."""
  return f._jit_info


# -- The compiled fast path of a jit while a capture runs --------------------
# A `jax.jit` function called under a trace other than JAX's eval trace takes
# JAX's Python dispatch on every call (the C++ dispatcher's cache miss:
# `_infer_params`, then a `jit_p.bind`), and no compiled fast path is
# recorded for it: `_run_python_pjit`, which the cache miss calls, runs the
# program at once only where the trace state is clean. An eager interpretation
# makes no tracers and needs to see only the jits whose programs hold a sow;
# for the others, running the cache miss with the eval trace current is the
# top-level call itself, and records the fast path. Conversely, a jit called
# at the top level while a capture runs (a plant's function, called by the
# interpreter) records a fast path under the capturing jit key, which a later
# eager capture would take, running the jit's sows unseen: for a program
# holding one, no fast path may be recorded. Public JAX has no hook by which
# a trace chooses how a jit call is dispatched (CONTRIBUTING.md, "What JAX
# would need"); `_run_python_pjit` is the one place where the trace a cache
# miss runs under can be chosen, knowing the traced program, and its result
# says whether a fast path is recorded (its compiled executable, or None).
_RUN_PYTHON_JIT = getattr(pjit, '_run_python_pjit', None)
# Reloading this module (a notebook's autoreload) finds the previous module's
# wrapper installed: wrap what that one wraps, never the wrapper itself.
_RUN_PYTHON_JIT = getattr(_RUN_PYTHON_JIT, '__wrapped__', _RUN_PYTHON_JIT)
_RUN_PYTHON_JIT_PARAMETERS = ['p', 'args_flat', 'fun', 'args', 'kwargs']
# Where the compiled executable is in its result (of 8 values).
_EXECUTABLE = 5

# What a dispatch policy answers (see `set_jit_dispatch`).
AS_JAX_DOES = 'as JAX does'
AT_TOP_LEVEL = 'at the top level'
WITHOUT_FAST_PATH = 'without a fast path'
_policy: tp.Callable[[tp.Any, tp.Any], str] | None = None
# The trace types it is asked about, besides the eval trace.
_policy_traces: tuple[type, ...] = ()


def _can_set_jit_dispatch() -> bool:
  if not callable(_RUN_PYTHON_JIT) or not hasattr(pjit, '_cpp_pjit'):
    return False
  try:
    parameters = list(inspect.signature(_RUN_PYTHON_JIT).parameters)
  except (TypeError, ValueError):
    return False
  return parameters == _RUN_PYTHON_JIT_PARAMETERS


def _run_python_jit(p, args_flat, fun, args, kwargs):
  # A staging trace (the common case of a cache miss) is never asked.
  trace = trace_ctx.trace
  if (
      _policy is None
      or trace is not eval_trace and type(trace) not in _policy_traces
      or trace_ctx.axis_env is not core.top_axis_env
  ):
    return _RUN_PYTHON_JIT(p, args_flat, fun, args, kwargs)
  how = _policy(trace, p.params['jaxpr'])
  if how is AT_TOP_LEVEL:
    with core.set_current_trace(eval_trace):
      return _RUN_PYTHON_JIT(p, args_flat, fun, args, kwargs)
  result = _RUN_PYTHON_JIT(p, args_flat, fun, args, kwargs)
  if how is WITHOUT_FAST_PATH:
    result = list(result)
    result[_EXECUTABLE] = None  # the cache miss then records no fast path
    result = tuple(result)
  return result


_run_python_jit.__wrapped__ = _RUN_PYTHON_JIT


def set_jit_dispatch(
    policy: tp.Callable[[tp.Any, tp.Any], str], traces: tuple[type, ...]
) -> bool:
  """Chooses how a ``jax.jit`` call's cache miss runs.

  ``policy(trace, closed_jaxpr)`` is asked on each cache miss of a
  ``jax.jit`` function called under ``trace``, the eval trace or one of the
  types ``traces``, with no axis environment, for the program traced for
  the call, and answers :data:`AS_JAX_DOES`;
  :data:`AT_TOP_LEVEL`: the miss runs with the eval trace current, so the
  program is compiled and run as a top-level call runs it and JAX records
  its compiled fast path for the jit key of the call (only for a trace whose
  values are concrete arrays, that would hand the call to the eval trace
  unchanged); or :data:`WITHOUT_FAST_PATH`: as JAX does, recording no fast
  path, so every later call with that jit key takes the cache miss again.
  Set once, for the process.

  Returns:
    Whether JAX has the function this relies on (with its parameters); if
    not, nothing is changed and JAX dispatches as it does.
  """
  global _policy, _policy_traces
  if not _can_set_jit_dispatch():
    return False
  _policy, _policy_traces = policy, traces
  pjit._run_python_pjit = _run_python_jit
  return True


def jit_dispatch_is_set() -> bool:
  """Whether :func:`set_jit_dispatch` is in effect."""
  return getattr(pjit, '_run_python_pjit', None) is _run_python_jit


# -- The cond batching rule --------------------------------------------------
# JAX 0.10.2 batches a cond whose index is batched by running every branch on
# every example and selecting the outputs, with no hook for an effect to
# refuse that (it refuses state and IO effects by name). The rule is reached
# here to recognise its frame; only this private module defines it.
_COND_BATCHING_CODE = conditionals._cond_batching_rule.__code__
# The rule's locals read below (`jax_contract_test` checks them). A JAX whose
# rule names them otherwise still has its frame recognised: every sow under
# it is then refused, as if its index were batched, rather than recorded.
COND_BATCHING_LOCALS = ('index_dim', 'branches')
_COND_LOCALS_READABLE = all(
    name in _COND_BATCHING_CODE.co_varnames for name in COND_BATCHING_LOCALS)


def branches_of_batched_cond() -> tp.Sequence[core.ClosedJaxpr] | None:
  """The branches of the innermost cond being batched with a batched index.

  Returns ``None`` unless JAX's cond batching rule is on the caller's stack
  with a batched index (its ``index_dim`` is not ``None``): it then runs each
  branch on every example, so the caller is being evaluated for examples that
  did not take its branch. A ``platform_dependent`` cond resets its
  ``index_dim`` to ``None`` (its index is the platform, never batched), so it
  is not reported. On a JAX whose rule does not name these locals, the
  rule's frame alone answers, with no branches.
  """
  frame: types.FrameType | None = sys._getframe(1)
  while frame is not None:
    if frame.f_code is _COND_BATCHING_CODE:
      if not _COND_LOCALS_READABLE:
        return ()  # cannot tell whether the index is batched: refuse
      local = frame.f_locals
      if local.get('index_dim') is not None:
        return local['branches']
    frame = frame.f_back
  return None
