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
serves (as of JAX 0.10.2); where JAX 0.10.0 and 0.10.1 differ, the funnel
detects what this JAX has. A name is looked up, never imported, so that a
JAX without it still imports ``flax.nnx``: its use raises
:class:`MissingJaxFeature`. ``tests/nnx/sow/transform/jax_contract_test.py``
states, one test per name, what each is expected to be.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
import typing as tp
import weakref

import jax


class MissingJaxFeature(NotImplementedError):
  """The installed JAX lacks a private name ``flax.nnx.sow`` relies on."""


class Missing:
  """Stands for a private JAX name that the installed JAX does not have.

  Importing ``flax.nnx`` (hence this module) must work on every JAX that
  Flax accepts, so a name that is absent is not an import error: any use of
  it (a call, an attribute, an item, an ``isinstance``) raises
  :class:`MissingJaxFeature` naming the JAX version and the feature.
  """

  def __init__(self, feature: str, places: tp.Sequence[str]):
    self._feature = feature
    self._places = tuple(places)

  def error(self) -> MissingJaxFeature:
    return MissingJaxFeature(
        f'flax.nnx.sow needs {self._feature} from JAX (looked for'
        f' {", ".join(self._places)}), which JAX {jax.__version__} does not'
        ' have; install a JAX release this version of flax.nnx.sow supports'
        ' (see tests/nnx/sow/transform/jax_contract_test.py).'
    )

  def __repr__(self):
    return f'<missing from JAX {jax.__version__}: {self._feature}>'

  def __getattr__(self, name):
    if name.startswith('__'):
      raise AttributeError(name)
    raise self.error()

  def __call__(self, *args, **kwargs):
    raise self.error()

  def __getitem__(self, key):
    raise self.error()

  def __setitem__(self, key, value):
    raise self.error()

  def __iter__(self):
    raise self.error()

  def __instancecheck__(self, instance):
    raise self.error()


def _find(feature: str, *places: str) -> tp.Any:
  """The first of ``places`` (``'module:attribute'``) that JAX has, else a
  :class:`Missing` that raises on use, naming ``feature``."""
  for place in places:
    module_name, _, attribute = place.partition(':')
    try:
      module = importlib.import_module(module_name)
    except ImportError:
      continue
    if hasattr(module, attribute):
      return getattr(module, attribute)
  return Missing(feature, places)


def is_missing(value: tp.Any) -> bool:
  """Whether ``value`` is a name this JAX lacks (see :class:`Missing`)."""
  return type(value) is Missing


def _module(feature: str, name: str) -> tp.Any:
  """The private module ``name``, else a :class:`Missing` for ``feature``."""
  try:
    return importlib.import_module(name)
  except ImportError:
    return Missing(feature, [name])


# pylint: disable=protected-access
# Modules read at use (their names are checked by the contract's tests).
core = _module('its core (traces, tracers)', 'jax._src.core')
pjit = _module('its jit implementation', 'jax._src.pjit')

# -- Traces ------------------------------------------------------------------
# The current trace (`trace_ctx.trace`, `trace_ctx.is_top_level()`): public
# JAX only offers `find_top_trace` over given values and debug-only probes.
# Contract: jax_contract_test.TracesTest.test_trace_ctx_and_eval_trace.
trace_ctx = _find('the current trace', 'jax._src.core:trace_ctx')
# JAX's eval trace, the parent of an eager interpretation at the top level:
# a bind handed to it runs at once, as at the top level (`eager.EagerTrace`
# hands it every primitive without a sow). Public JAX has no handle on it.
eval_trace = _find('its eval trace', 'jax._src.core:eval_trace')
# The type of the staging (`jit`) trace, to emit equations into it directly;
# `jax.interpreters.partial_eval` exports its tracer, not the trace.
DynamicJaxprTrace = _find(
    'its staging trace type',
    'jax._src.interpreters.partial_eval:DynamicJaxprTrace',
)
# Per-primitive hooks of that trace: the rule receives the trace itself, so a
# capture can take the sows staged into its own trace without emitting them
# (see `staged_sows`). Only partial_eval has the table.
# Contract: jax_contract_test.TracesTest.test_custom_staging_rules_*.
custom_staging_rules = _find(
    'per-primitive staging rules',
    'jax._src.interpreters.partial_eval:custom_staging_rules',
)


def staged_eqns(trace: tp.Any) -> list[tp.Any]:
  """The list the staging ``trace`` appends its equations to, in order.

  Its entries are opaque (read them with :func:`kept_eqn`); positions never
  move, so a position read while tracing still orders the equations with
  effects in the jaxpr the trace returns. Public JAX has no view of the
  equations staged so far. Contract:
  jax_contract_test.test_staged_eqns_keep_effects_at_their_position.
  """
  return trace.frame.tracing_eqns


def kept_eqn(entry: tp.Any) -> tp.Any | None:
  """The equation an entry of :func:`staged_eqns` holds for good, or None.

  The trace holds an equation it may drop as dead (one without effects)
  by weak reference, and the others, those with effects, for good: as the
  ``TracingEqn`` itself on JAX 0.10.2, as a closure returning it on 0.10.0
  and 0.10.1. Reading only ``TracingEqn`` entries found no equation with
  the sow effect on those releases, so a capture took its jaxpr for one
  without sows inside (a ``cond``'s were never interpreted).
  """
  if isinstance(entry, weakref.ReferenceType):
    return None
  if type(entry) is not TracingEqn and callable(entry):
    entry = entry()
  return entry if type(entry) is TracingEqn else None


# Contract: jax_contract_test.TracesTest.test_staged_eqns_*.
TracingEqn = _find(
    'the staged equation type', 'jax._src.interpreters.partial_eval:TracingEqn'
)

# -- Effects -----------------------------------------------------------------
# JAX's allow-lists of effects that may appear inside a lowering, control
# flow, custom derivatives, remat, and that partial evaluation keeps: there is
# no public way to register an effect type with them.
# Contract: jax_contract_test.EffectsTest.test_the_allow_list_*.
lowerable_effects = _find(
    'the lowerable effects allow-list', 'jax._src.effects:lowerable_effects'
)
control_flow_allowed_effects = _find(
    'the control-flow effects allow-list',
    'jax._src.effects:control_flow_allowed_effects',
)
custom_derivatives_allowed_effects = _find(
    'the custom-derivatives effects allow-list',
    'jax._src.effects:custom_derivatives_allowed_effects',
)
remat_allowed_effects = _find(
    'the remat effects allow-list', 'jax._src.effects:remat_allowed_effects'
)
partial_eval_kept_effects = _find(
    'the partial-eval kept effects list',
    'jax._src.effects:partial_eval_kept_effects',
)
def allow_effect_type(effect_type: type) -> None:
  """Registers ``effect_type`` with every allow-list JAX 0.10.2 consults
  before accepting an effect inside a higher-order primitive or a lowering:
  lowering, control flow, custom derivatives, remat, and the effects that
  partial evaluation keeps (without which partial evaluation that re-traces
  a jaxpr from its outputs, such as the known half of a linearized scan,
  drops equations whose outputs are unused)."""
  for allow_list in (
      lowerable_effects,
      control_flow_allowed_effects,
      custom_derivatives_allowed_effects,
      remat_allowed_effects,
      partial_eval_kept_effects,
  ):
    allow_list.add_type(effect_type)


# Effects that refer to jaxpr inputs by position (state effects): a rewritten
# jaxpr that moves its inputs must not copy them; the type is not public.
# Contract: jax_contract_test.EffectsTest.test_jaxpr_input_effect_*.
JaxprInputEffect = _find(
    'the jaxpr input effect type', 'jax._src.effects:JaxprInputEffect'
)

# -- Primitives --------------------------------------------------------------
# Higher-order primitives with a capture rule that `jax.extend.core.primitives`
# does not list: bound by `jax.custom_batching.custom_vmap`, and by
# `jax.shard_map` (and `jax.pmap`).
# Contract: jax_contract_test.PrimitivesTest.test_custom_vmap_p_* and
# test_shard_map_p_*; their parameters: RuleShapesTest.
custom_vmap_p = _find(
    'the custom_vmap primitive', 'jax._src.custom_batching:custom_vmap_p'
)
shard_map_p = _find('the shard_map primitive', 'jax._src.shard_map:shard_map_p')


def shard_map_manual_axes_key(params: tp.Mapping[str, tp.Any]) -> str:
  """The parameter of a ``shard_map_p`` equation naming the mesh axes it
  makes manual: ``newly_manual_axes`` from JAX 0.10.2, ``manual_axes``
  before (the same set for a ``shard_map`` not nested in another; JAX
  0.10.2 leaves out axes an outer one made manual). ``bind`` takes the
  same name. Contract: jax_contract_test.PrimitivesTest.test_shard_map_p*.
  """
  for key in ('newly_manual_axes', 'manual_axes'):
    if key in params:
      return key
  raise MissingJaxFeature(
      f'flax.nnx.sow: a shard_map equation of JAX {jax.__version__} has'
      f' neither newly_manual_axes nor manual_axes: {sorted(params)}'
  )

# A host callback bound with an effect of the caller's choosing: the public
# `jax.debug.callback` always binds JAX's own debug effect, by which a
# `jax.jit` program holding a runtime check of ours cannot be told from one
# that prints (`runtime_checks`, `set_jit_errors`).
# Contract: jax_contract_test.PrimitivesTest.test_debug_callback_p.
debug_callback_p = _find(
    'the debug callback primitive', 'jax._src.debugging:debug_callback_p'
)

# Bound eagerly by code that evaluates a closed jaxpr as one primitive (it
# stages as `closed_call`); an eager interpretation meets it as it is. JAX
# 0.10.2 moved it from `lax.control_flow.loops` to a module of its own.
# Contract: jax_contract_test.PrimitivesTest.test_eval_jaxpr_p.
eval_jaxpr_p = _find(
    'the eval_jaxpr primitive',
    'jax._src.lax.eval_jaxpr:eval_jaxpr_p',
    'jax._src.lax.control_flow.loops:eval_jaxpr_p',
)
# `jit` parameters use this sentinel for a sharding left to the compiler.
# Contract: jax_contract_test.PrimitivesTest.test_unspecified_*.
UNSPECIFIED = _find(
    'the unspecified sharding sentinel', 'jax._src.sharding_impls:UNSPECIFIED'
)
# `shard_map_p.bind(subfuns=...)` expects its body to return a FlatTree with
# the output specs as aux data; `jax.tree_util` has no FlatTree.
# Contract: jax_contract_test.PrimitivesTest.test_flat_tree_*.
FlatTree = _find('the FlatTree type', 'jax._src.tree_util:FlatTree')
# Zeros of an abstract value with its sharding and varying manual axes, as a
# scan carry must be typed inside `shard_map`; `jnp.zeros` drops both.
# Contract: jax_contract_test.PrimitivesTest.test_zeros_like_aval.
zeros_like_aval = _find(
    'zeros of an abstract value', 'jax._src.ad_util:zeros_like_aval'
)
# The name-stack entry a transformation (`vmap`, `jvp`, ...) leaves on the
# equations it emits; `jax.extend.source_info_util` exports the stack only.
# Contract: jax_contract_test.NameStackTest.test_vmap_and_jvp_*.
Transform = _find(
    'the name-stack transform entry', 'jax._src.source_info_util:Transform'
)
# The frames of an equation's traceback outside JAX, so that an error names
# the user's line rather than our own wrapper around `sow_p.bind`;
# `jax.extend.source_info_util.summarize` gives only the first of them.
# Contract: jax_contract_test.NameStackTest.test_user_frames_skip_jax.
user_frames = _find(
    'the user frames of a traceback', 'jax._src.source_info_util:user_frames'
)

# -- Jaxprs and caches -------------------------------------------------------
# Closes (and cached: the same open jaxpr gives the same closed one, which
# keys our caches) and converts constants to inputs as JAX's own rules do;
# neither is in `jax.interpreters.partial_eval`.
# Contract: jax_contract_test.JaxprsTest.test_close_jaxpr_* and
# test_convert_constvars_*.
close_jaxpr = _find(
    'cached jaxpr closing', 'jax._src.interpreters.partial_eval:close_jaxpr'
)
convert_constvars_jaxpr = _find(
    'constants-to-inputs conversion',
    'jax._src.interpreters.partial_eval:convert_constvars_jaxpr',
)
# An LRU cache keyed weakly by its first argument (a jaxpr) and, optionally,
# by the trace context: `functools.lru_cache` would keep every jaxpr alive.
# Contract: jax_contract_test.JaxprsTest.test_weakref_lru_cache.
weakref_lru_cache = _find(
    'the weak-keyed LRU cache', 'jax._src.util:weakref_lru_cache'
)

# -- Tracers ------------------------------------------------------------------
# What a JVP or linearize tracer stands for (its primal) and a batch tracer's
# batched value: a deferred sow (`deferred`) whose anchor is a tracer of a
# trace that is not current (a module closed over by a custom_vjp's forward
# under grad) finds the caller's array through them. Public JAX has no
# accessor for either.
# Contract: jax_contract_test.TracersTest.test_traced_values.
JVPTracer = _find('the JVP tracer', 'jax._src.interpreters.ad:JVPTracer')
LinearizeTracer = _find(
    'the linearize tracer', 'jax._src.interpreters.ad:LinearizeTracer'
)
BatchTracer = _find(
    'the batch tracer', 'jax._src.interpreters.batching:BatchTracer'
)


def traced_value(tracer: tp.Any) -> tp.Any | None:
  """The value ``tracer`` stands for in its parent trace, or ``None``."""
  if isinstance(tracer, (JVPTracer, LinearizeTracer)):
    return tracer.primal
  if isinstance(tracer, BatchTracer):
    return tracer.val
  return None


# -- jit functions -----------------------------------------------------------
# The options a `jax.jit` function was made with (static and donated
# arguments, compiler options), which an eager `capture(jax.jit(f))` compiles
# with: `jax.jit` keeps them only as the function's private `_jit_info`.
# Contract: jax_contract_test.JitTest.test_jit_info_holds_the_options.
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
# Contract: jax_contract_test.JitTest.test_the_fast_path_hook.
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
  if _checked is None or not any(
      isinstance(effect, _checked) for effect in p.params['jaxpr'].effects):
    return _dispatched(p, args_flat, fun, args, kwargs)
  try:
    return _dispatched(p, args_flat, fun, args, kwargs)
  except jax.errors.JaxRuntimeError as error:
    translated = _translate(error)
    if translated is None:
      raise
    # JAX's error only wraps the text of this one: it adds nothing.
    raise translated from None


def _dispatched(p, args_flat, fun, args, kwargs):
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


tp.cast(tp.Any, _run_python_jit).__wrapped__ = _RUN_PYTHON_JIT


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


# What `set_jit_errors` set: an effect type, and how a runtime error of a
# program holding it is translated.
_checked: type | None = None
_translate: tp.Callable[[Exception], BaseException | None] | None = None


def set_jit_errors(
    effect_type: type,
    translate: tp.Callable[[Exception], BaseException | None],
) -> bool:
  """Translates the runtime errors of ``jax.jit`` programs with an effect.

  A host callback that raises fails its program; the runtime reports a
  ``jax.errors.JaxRuntimeError`` that holds only the text of the callback's
  exception. For a ``jax.jit`` call whose program has an effect of type
  ``effect_type`` (at any depth: a program's effects hold those of its
  equations), such an error is passed to ``translate``, and what that
  returns (unless ``None``) is raised in its place. JAX records no compiled
  fast path for a program with effects (a fast path would raise from C++,
  where nothing can translate), so every call of it is seen here (contract:
  runtime_checks_test.test_only_a_program_with_a_check_loses_its_fast_path).
  Calls that do
  not go through ``jax.jit``'s dispatch (an ahead-of-time compiled
  function, ``jax.pmap``) raise the runtime's error as it is. Set once, for
  the process.

  Returns:
    Whether JAX has the function this relies on (``set_jit_dispatch``); if
    not, nothing is changed.
  """
  global _checked, _translate
  if not _can_set_jit_dispatch():
    return False
  _checked, _translate = effect_type, translate
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
# Contract: jax_contract_test.CondBatchingTest and rules_cond_test.
_COND_BATCHING_RULE = _find(
    'the cond batching rule',
    'jax._src.lax.control_flow.conditionals:_cond_batching_rule',
)
_COND_BATCHING_CODE = getattr(_COND_BATCHING_RULE, '__code__', None)
# The rule's locals read below (`rules_cond_test` checks them). A JAX whose
# rule names them otherwise still has its frame recognised: every sow under
# it is then refused, as if its index were batched, rather than recorded.
COND_BATCHING_LOCALS = ('index_dim', 'branches', 'axis_data')
_COND_LOCALS_READABLE = _COND_BATCHING_CODE is not None and all(
    name in _COND_BATCHING_CODE.co_varnames for name in COND_BATCHING_LOCALS)


def branches_of_batched_cond(
    *, evaluating: bool = False
) -> tp.Sequence[tp.Any] | None:
  """The branches of the innermost cond being batched with a batched index.

  Returns ``None`` unless JAX's cond batching rule is on the caller's stack
  with a batched index (its ``index_dim`` is not ``None``): it then runs each
  branch on every example, so the caller is being evaluated for examples that
  did not take its branch. A ``platform_dependent`` cond resets its
  ``index_dim`` to ``None`` (its index is the platform, never batched), so it
  is not reported. On a JAX whose rule does not name these locals, the
  rule's frame alone answers, with no branches.

  The rule first batches each branch (under a batch trace of its own, whose
  axis is the rule's ``axis_data``; JAX caches the batched branch and may
  reuse it for a cond whose index is not batched), then evaluates it under
  the trace it was called under. With ``evaluating``, a rule in the first
  step does not count: what is marked then stays with this cond.
  """
  if _COND_BATCHING_CODE is None:
    raise _COND_BATCHING_RULE.error()
  current = trace_ctx.trace if evaluating else None
  frame: types.FrameType | None = sys._getframe(1)
  while frame is not None:
    if frame.f_code is _COND_BATCHING_CODE:
      if not _COND_LOCALS_READABLE:
        return ()  # cannot tell whether the index is batched: refuse
      local = frame.f_locals
      batching_branches = evaluating and (
          getattr(current, 'axis_data', None) is local.get('axis_data'))
      if local.get('index_dim') is not None and not batching_branches:
        return local['branches']
    frame = frame.f_back
  return None
