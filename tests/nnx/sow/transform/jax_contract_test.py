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
"""The contract between ``flax.nnx.sow`` and the JAX it runs on.

One test per private name or behaviour the funnel
(``flax/nnx/sow/transform/_jax.py``) relies on, and per shape of a
primitive's parameters a capture rule reads: the first JAX release that
changes one fails here, in the test that names it, rather than somewhere
deep in a capture. Each funnel entry's comment points to its test. Every
expectation is checked against JAX itself (a jaxpr it traces, a value it
computes), never against this package's own use of the name.
"""

import inspect
import logging
import os
import subprocess
import sys
import textwrap
import weakref
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.extend.core as jex_core
from jax.extend.core import primitives as prims
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import sow
from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import primitive


X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)

# Every name the funnel takes from JAX, as it is looked up.
FUNNEL_NAMES = (
    'trace_ctx', 'eval_trace', 'DynamicJaxprTrace',
    'custom_staging_rules', 'TracingEqn', 'lowerable_effects',
    'control_flow_allowed_effects', 'custom_derivatives_allowed_effects',
    'remat_allowed_effects', 'partial_eval_kept_effects', 'JaxprInputEffect',
    'custom_vmap_p', 'shard_map_p', 'eval_jaxpr_p', 'UNSPECIFIED',
    'FlatTree', 'zeros_like_aval', 'Transform', 'user_frames', 'close_jaxpr',
    'convert_constvars_jaxpr', 'weakref_lru_cache', 'JVPTracer',
    'LinearizeTracer', 'BatchTracer', 'core', 'pjit', 'debug_callback_p',
)


def eqns_of(f, *args, primitive_=None):
  """The top-level equations of ``f``'s jaxpr (of one primitive)."""
  eqns = jax.make_jaxpr(f)(*args).jaxpr.eqns
  if primitive_ is None:
    return eqns
  return [e for e in eqns if e.primitive is primitive_]


class FunnelNamesTest(parameterized.TestCase):
  """Every name is present on this JAX, and a missing one raises at use."""

  @parameterized.named_parameters((n, n) for n in FUNNEL_NAMES)
  def test_present(self, name):
    self.assertFalse(
        _jax.is_missing(getattr(_jax, name)),
        f'JAX {jax.__version__} has no {name} where the funnel looks',
    )

  def test_the_funnel_lists_only_these_names(self):
    # A name the funnel adds needs its contract test here.
    def from_jax(value):
      if inspect.ismodule(value):
        return value.__name__.startswith('jax._src')
      return str(getattr(value, '__module__', '')).startswith('jax._src')

    taken = {n for n, v in vars(_jax).items()
             if not n.startswith('_') and from_jax(v)}
    self.assertEqual(taken - set(FUNNEL_NAMES), set())

  def test_a_missing_name_raises_at_use_naming_version_and_feature(self):
    missing = _jax._find('a feature JAX never had', 'jax._src.nowhere:thing',
                         'jax._src.core:no_such_name')
    self.assertTrue(_jax.is_missing(missing))
    for use in (lambda: missing(), lambda: missing.attribute,
                lambda: missing['key'], lambda: isinstance(1, missing),
                lambda: list(missing)):
      with self.assertRaises(_jax.MissingJaxFeature) as raised:
        use()
      message = str(raised.exception)
      self.assertIn(f'JAX {jax.__version__}', message)
      self.assertIn('a feature JAX never had', message)
      self.assertIn('jax._src.core:no_such_name', message)


  def test_a_jax_without_a_name_imports_flax_nnx_and_raises_at_use(self):
    # As on a JAX that lacks eval_jaxpr_p wherever the funnel looks.
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    program = textwrap.dedent("""
        import sys
        import jax
        for name in ('jax._src.lax.eval_jaxpr',
                     'jax._src.lax.control_flow.loops'):
          vars(sys.modules.get(name, sys)).pop('eval_jaxpr_p', None)
        import flax.nnx
        try:
          import _worktree  # this repository: its tree, not the installed one
        except ImportError:  # in Flax's tree
          pass
        import flax.nnx.sow
        from flax.nnx.sow.transform import _jax
        try:
          _jax.eval_jaxpr_p.bind()
        except _jax.MissingJaxFeature as e:
          print(e)
        """)
    done = subprocess.run([sys.executable, '-c', program], cwd=root,
                          capture_output=True, text=True, check=False,
                          env=dict(os.environ, PYTHONPATH=root))
    self.assertEqual(done.returncode, 0, done.stderr)
    self.assertIn(f'JAX {jax.__version__} does not have', done.stdout)
    self.assertIn('the eval_jaxpr primitive', done.stdout)


class ConfigurationTest(absltest.TestCase):
  """``harvesting`` and the package's other contexts are public
  ``jax.make_user_context`` values: what the package relies on is that one
  keys JAX's jit and tracing caches."""

  def test_a_user_context_keys_the_jit_and_tracing_caches(self):
    traces = []

    @jax.jit
    def f(x):
      traces.append(primitive.harvesting.value)
      return x * 2

    f(X)
    with primitive.harvesting(True):
      f(X)
      f(X)
    f(X)
    self.assertEqual(traces, [False, True])
    self.assertFalse(primitive.harvesting.value)


class TracesTest(absltest.TestCase):

  def test_trace_ctx_and_eval_trace(self):
    self.assertIs(_jax.trace_ctx.trace, _jax.eval_trace)
    self.assertTrue(_jax.trace_ctx.is_top_level())
    self.assertIs(_jax.trace_ctx.axis_env, _jax.core.top_axis_env)
    seen = []

    def f(x):
      seen.append((type(_jax.trace_ctx.trace),
                   _jax.trace_ctx.is_top_level()))
      return x

    jax.jit(f)(X)
    self.assertEqual(seen, [(_jax.DynamicJaxprTrace, False)])

  def test_set_current_trace(self):
    def f(x):
      with _jax.core.set_current_trace(_jax.eval_trace):
        self.assertIs(_jax.trace_ctx.trace, _jax.eval_trace)
      return x

    jax.jit(f)(X)

  def test_custom_staging_rules_receive_the_trace(self):
    p = jex_core.Primitive('contract_staged')
    p.def_abstract_eval(lambda x, **_: x)
    p.def_impl(lambda x, **_: x)
    calls = []

    def rule(trace, source_info, *tracers, **params):
      calls.append((type(trace), len(tracers), params))
      return trace.default_process_primitive(p, tracers, params,
                                             source_info=source_info)

    _jax.custom_staging_rules[p] = rule
    try:
      eqns = eqns_of(lambda x: p.bind(x, k=1), X)
    finally:
      del _jax.custom_staging_rules[p]
    self.assertEqual(calls, [(_jax.DynamicJaxprTrace, 1, {'k': 1})])
    self.assertEqual([e.primitive for e in eqns], [p])

  def test_staged_eqns_keep_effects_at_their_position(self):
    # The layout differs between releases (0.10.2: the equation itself;
    # 0.10.0 and 0.10.1: a closure); `kept_eqn` must read both.
    found = []

    def f(x):
      y = lax.sin(x)
      with primitive.harvesting(True):
        z = sow(y, name='a')
      z = lax.cos(z)
      kept = [_jax.kept_eqn(e) for e in _jax.staged_eqns(_jax.trace_ctx.trace)]
      self.assertTrue(all(type(k) is _jax.TracingEqn
                          for k in kept if k is not None))
      found.append([(i, k.primitive.name) for i, k in enumerate(kept)
                    if k is not None and k.effects])
      return z

    jax.jit(f)(X)
    self.assertEqual(found, [[(1, 'sow')]])


class EffectsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('lowerable', 'lowerable_effects'),
      ('control_flow', 'control_flow_allowed_effects'),
      ('custom_derivatives', 'custom_derivatives_allowed_effects'),
      ('remat', 'remat_allowed_effects'),
      ('partial_eval_kept', 'partial_eval_kept_effects'),
  )
  def test_the_allow_list_accepts_the_sow_effect(self, name):
    allow_list = getattr(_jax, name)
    self.assertTrue(callable(allow_list.add_type))
    self.assertTrue(allow_list.contains(primitive.sow_effect))

  def test_the_sow_effect_survives_control_flow_and_remat(self):
    # What the allow-lists buy: JAX accepts the effect in each of them.
    def f(x):
      with primitive.harvesting(True):
        g = lambda y: sow(y, name='a') * 2
        y = lax.cond(x[0] > 0, g, g, x)
        y = jax.checkpoint(g)(y)
        y = lax.scan(lambda c, _: (g(c), None), y, length=2)[0]
        return y

    jaxpr = jax.make_jaxpr(f)(X).jaxpr
    self.assertIn(primitive.sow_effect, jaxpr.effects)
    jax.jit(f).lower(X)  # lowerable

  def test_jaxpr_input_effect_is_the_state_effects_type(self):
    def f(x):
      ref = jax.new_ref(x)
      ref[...] = ref[...] * 2
      return ref[...]

    jaxpr = jax.make_jaxpr(f)(X).jaxpr
    self.assertTrue(any(isinstance(e, _jax.JaxprInputEffect)
                        for eqn in jaxpr.eqns for e in eqn.effects))


class PrimitivesTest(absltest.TestCase):

  def test_custom_vmap_p_is_what_custom_vmap_binds(self):
    @jax.custom_batching.custom_vmap
    def f(x):
      return x * 2

    f.def_vmap(lambda size, in_batched, x: (x * 2, in_batched[0]))
    eqns = eqns_of(f, X, primitive_=_jax.custom_vmap_p)
    self.assertLen(eqns, 1)
    self.assertIn('call', eqns[0].params)

  def test_shard_map_p_is_what_shard_map_binds(self):
    mesh = jax.make_mesh((1,), ('i',))
    spec = jax.P()
    f = jax.shard_map(lambda x: x * 2, mesh=mesh, in_specs=spec,
                      out_specs=spec)
    eqns = eqns_of(f, X, primitive_=_jax.shard_map_p)
    self.assertLen(eqns, 1)
    params = eqns[0].params
    self.assertLessEqual({'check_vma', 'in_specs', 'jaxpr', 'mesh',
                          'out_specs'}, set(params))
    # 'manual_axes' up to 0.10.1, 'newly_manual_axes' from 0.10.2.
    key = _jax.shard_map_manual_axes_key(params)
    self.assertEqual(params[key], frozenset({'i'}))

  def test_flat_tree_flattens_with_aux(self):
    tree = _jax.FlatTree.flatten([X, (X, X)]).with_aux('specs')
    self.assertIsInstance(tree, _jax.FlatTree)
    values, aux = tree.unpack_aux()
    self.assertEqual(aux, 'specs')
    self.assertLen(jax.tree.leaves(values.unflatten()), 3)

  def test_eval_jaxpr_p(self):
    # Moved between releases (loops.py to lax/eval_jaxpr.py in 0.10.2); its
    # rule inlines the closed jaxpr of its parameter `jaxpr`. (JAX 0.10.0
    # has no eager rule for it: only 0.10.1 on bind it outside a trace.)
    self.assertEqual(_jax.eval_jaxpr_p.name, 'eval_jaxpr')
    self.assertTrue(_jax.eval_jaxpr_p.multiple_results)
    closed = jax.make_jaxpr(lambda x: [jnp.sin(x)])(X)
    eqns = eqns_of(lambda x: _jax.eval_jaxpr_p.bind(x, jaxpr=closed), X)
    self.assertEqual([e.primitive for e in eqns], [prims.closed_call_p])
    self.assertIs(eqns[0].params['call_jaxpr'], closed)

  def test_debug_callback_p_takes_the_callers_effect(self):
    # What `runtime_checks` binds: flat values, a callback called with them
    # as arrays, any effect (it becomes the equation's and the program's,
    # through a while_loop too), and `partitioned`.
    class Mark(jex_core.Effect):
      pass

    mark = Mark()
    seen = []

    def f(x):
      def body(c):
        i, y = c
        _jax.debug_callback_p.bind(
            i, y, callback=lambda *v: seen.append(v) or (), effect=mark,
            partitioned=False)
        return i + 1, y * 2

      return lax.while_loop(lambda c: c[0] < 2, body, (0, x))[1]

    for allow_list in (_jax.control_flow_allowed_effects,
                       _jax.lowerable_effects):
      allow_list.add_type(Mark)
    closed = jax.make_jaxpr(f)(X)
    self.assertIn(mark, closed.effects)
    jax.block_until_ready(jax.jit(f)(X))
    self.assertLen(seen, 2)
    self.assertEqual([int(i) for i, _ in seen], [0, 1])
    np.testing.assert_array_equal(seen[1][1], X * 2)

  def test_unspecified_is_jits_default_sharding(self):
    eqn, = eqns_of(jax.jit(lambda x: x * 2), X)
    self.assertIs(eqn.primitive, prims.jit_p)
    self.assertIs(eqn.params['in_shardings'][0], _jax.UNSPECIFIED)
    self.assertIs(eqn.params['out_shardings'][0], _jax.UNSPECIFIED)

  def test_zeros_like_aval(self):
    aval = jax.core.ShapedArray((2, 3), jnp.float32)
    zeros = _jax.zeros_like_aval(aval)
    np.testing.assert_array_equal(zeros, np.zeros((2, 3), np.float32))


class NameStackTest(parameterized.TestCase):

  def test_vmap_and_jvp_leave_transform_entries(self):
    def names(f, *args):
      return {part.name
              for eqn in jax.make_jaxpr(f)(*args).jaxpr.eqns
              for part in eqn.source_info.name_stack.stack
              if isinstance(part, _jax.Transform)}

    self.assertIn('vmap', names(jax.vmap(jnp.sin), X))
    self.assertIn('jvp', names(lambda x: jax.jvp(jnp.sin, (x,), (x,)), X))
    self.assertIn('transpose',
                  names(jax.grad(lambda x: jnp.sin(x).sum()), X))

  def test_user_frames_skip_jax(self):
    def f(x):
      return lax.sin(x)

    eqn, = eqns_of(f, X)
    frames = list(_jax.user_frames(eqn.source_info.traceback))
    self.assertTrue(all('/jax/_src/' not in f.file_name for f in frames))
    self.assertEqual(frames[0].file_name, __file__)
    self.assertEqual(frames[0].function_name, f.__qualname__)


class JaxprsTest(absltest.TestCase):

  def test_close_jaxpr_is_cached(self):
    open_jaxpr = jax.make_jaxpr(jnp.sin)(X).jaxpr
    self.assertIs(_jax.close_jaxpr(open_jaxpr), _jax.close_jaxpr(open_jaxpr))
    self.assertEqual(_jax.close_jaxpr(open_jaxpr).consts, [])

  def test_convert_constvars_jaxpr_puts_constants_first(self):
    closed = jax.make_jaxpr(lambda x: x + np.arange(3.0, dtype=np.float32))(X)
    jaxpr = closed.jaxpr
    converted = _jax.convert_constvars_jaxpr(jaxpr)
    self.assertEqual(converted.constvars, [])
    self.assertEqual(converted.invars, [*jaxpr.constvars, *jaxpr.invars])

  def test_weakref_lru_cache(self):
    parameters = inspect.signature(_jax.weakref_lru_cache).parameters
    self.assertIn('maxsize', parameters)
    self.assertIn('trace_context_in_key', parameters)
    calls = []

    @_jax.weakref_lru_cache(trace_context_in_key=False, maxsize=4)
    def f(jaxpr, k):
      calls.append(k)
      return k

    class Key:
      pass

    key = Key()
    self.assertEqual([f(key, 1), f(key, 1), f(key, 2)], [1, 1, 2])
    self.assertEqual(calls, [1, 2])
    ref = weakref.ref(key)
    del key
    self.assertIsNone(ref())  # held weakly


class TracersTest(absltest.TestCase):

  def test_traced_values(self):
    seen = {}

    def f(name):
      def g(x):
        seen[name] = _jax.traced_value(x)
        return x
      return g

    jax.jvp(f('jvp'), (X,), (X,))
    jax.linearize(f('linearize'), X)
    jax.vmap(f('vmap'))(X[None])
    np.testing.assert_array_equal(seen['jvp'], X)
    np.testing.assert_array_equal(seen['linearize'], X)
    np.testing.assert_array_equal(seen['vmap'], X[None])
    self.assertIsNone(_jax.traced_value(X))


class JitTest(absltest.TestCase):

  def test_jit_info_holds_the_options(self):
    f = jax.jit(lambda x, n: x * n, static_argnums=(1,), donate_argnums=())
    info = _jax.jit_info(f)
    self.assertEqual(info.static_argnums, (1,))
    for name in ('fun_signature', 'static_argnames', 'donate_argnums',
                 'donate_argnames', 'keep_unused', 'compiler_options_kvs',
                 'in_layouts_leaves', 'out_layouts_leaves',
                 'user_specified_in_shardings', 'in_shardings_treedef',
                 'in_shardings_leaves', 'out_shardings_treedef',
                 'out_shardings_leaves', 'backend', 'device'):
      self.assertTrue(hasattr(info, name), name)

  def test_the_fast_path_hook(self):
    # What `set_jit_dispatch` checks, and what it relies on: a cache miss
    # runs `_run_python_pjit(p, ...)`, whose result holds the program at 4
    # and the compiled executable (a fast path is recorded from it) at 5.
    self.assertTrue(_jax._can_set_jit_dispatch())
    current = _jax.pjit._run_python_pjit
    results = []

    def triple(x):
      return x * 3

    def recording(p, args_flat, fun, args, kwargs):
      result = current(p, args_flat, fun, args, kwargs)
      if fun is triple:
        results.append((p.params['jaxpr'], result))
      return result

    _jax.pjit._run_python_pjit = recording
    try:
      jax.jit(triple)(X)
    finally:
      _jax.pjit._run_python_pjit = current
    (program, result), = results
    self.assertLen(result, 8)
    self.assertIs(result[4], program)
    self.assertIsInstance(program, jex_core.ClosedJaxpr)
    self.assertIsNotNone(result[_jax._EXECUTABLE])


  def test_a_failed_callback_raises_a_runtime_error_from_the_hook(self):
    # What `set_jit_errors` relies on: a jit call's cache miss runs the
    # program in `_run_python_pjit`, and a host callback that raised fails
    # it there with a `JaxRuntimeError` holding the exception's text.
    current = _jax.pjit._run_python_pjit
    raised = []

    def recording(p, args_flat, fun, args, kwargs):
      try:
        return current(p, args_flat, fun, args, kwargs)
      except Exception as error:
        raised.append(error)
        raise

    def fail(x):
      raise ValueError(f'a message of ours {x.shape}')

    def f(x):
      jax.debug.callback(fail, x)
      return x * 2

    logger = logging.getLogger('jax._src.debugging')
    _jax.pjit._run_python_pjit = recording
    try:
      with mock.patch.object(logger, 'disabled', True):
        with self.assertRaises(jax.errors.JaxRuntimeError):
          jax.block_until_ready(jax.jit(f)(X))
    finally:
      _jax.pjit._run_python_pjit = current
    error, = raised
    self.assertIsInstance(error, jax.errors.JaxRuntimeError)
    self.assertIn('ValueError: a message of ours (3,)', str(error))


class CondBatchingTest(absltest.TestCase):

  def test_cond_batching_rule_frame_locals(self):
    # For `branches_of_batched_cond` (a frame walk), which issue 46 may
    # remove: drop this test with it.
    code = _jax._COND_BATCHING_CODE
    self.assertIsNotNone(code)
    for name in ('index_dim', 'branches', 'axis_data'):
      self.assertIn(name, code.co_varnames)
    # A primitive bound in a branch is batched inside the rule's frame.
    p = jex_core.Primitive('contract_batched')
    p.def_abstract_eval(lambda x: x)
    p.def_impl(lambda x: x)
    seen = []

    def batch(args, dims):
      seen.append(_jax.branches_of_batched_cond())
      return p.bind(*args), dims[0]

    jax.interpreters.batching.primitive_batchers[p] = batch
    try:
      jax.vmap(lambda i, x: lax.cond(i > 0, p.bind, jnp.negative, x))(
          jnp.array([0, 1]), X[:2])
    finally:
      del jax.interpreters.batching.primitive_batchers[p]
    self.assertTrue(seen)
    self.assertTrue(all(b is not None and len(b) == 2 for b in seen))
    self.assertIsNone(_jax.branches_of_batched_cond())

  def test_custom_calls_of_a_branch_are_bound_while_the_rule_evaluates(self):
    # For `primitive._mark_rules_under_batched_cond`: the rule evaluates
    # each batched branch by binding its equations, a custom_vjp_call with
    # its functions as `subfuns`, under the trace the rule was called under
    # (not its own batch trace); JAX's bind is the class's.
    seen = []
    p = prims.custom_vjp_call_p
    hooked = p.bind
    self.assertIs(hooked.unhooked, type(p).bind)

    def spy(*args, **params):
      trace = _jax.trace_ctx.trace
      seen.append(('subfuns' in params, getattr(trace, 'axis_data', None),
                   _jax.branches_of_batched_cond(evaluating=True)))
      return hooked(*args, **params)

    site = jax.custom_vjp(jnp.sin)
    site.defvjp(lambda x: (jnp.sin(x), x), lambda x, ct: (ct * jnp.cos(x),))
    p.bind = spy
    try:
      jax.grad(lambda xs: jnp.sum(jax.vmap(lambda x: lax.cond(
          x > 0, site, jnp.cos, x))(xs)))(X[:2])
    finally:
      p.bind = hooked
    self.assertTrue(any(has and data is None and branches is not None
                        and len(branches) == 2
                        for has, data, branches in seen), seen)


class RuleShapesTest(parameterized.TestCase):
  """The parameters each capture rule reads, as JAX names them."""

  def assertParams(self, eqn, names):
    missing = set(names) - set(eqn.params)
    self.assertFalse(missing, f'{eqn.primitive.name} lacks {missing}')

  def test_jit(self):
    eqn, = eqns_of(jax.jit(jnp.sin), X)
    self.assertParams(eqn, ['jaxpr', 'in_shardings', 'out_shardings',
                            'in_layouts', 'out_layouts', 'donated_invars'])

  def test_cond(self):
    eqn, = eqns_of(lambda x: lax.cond(x[0] > 0, jnp.sin, jnp.cos, x), X,
                   primitive_=prims.cond_p)
    self.assertParams(eqn, ['branches'])
    self.assertLen(eqn.params['branches'], 2)

  def test_scan(self):
    eqn, = eqns_of(lambda x: lax.scan(lambda c, y: (c + y, c), x, X[None]),
                   X, primitive_=prims.scan_p)
    self.assertParams(eqn, ['jaxpr', 'length', 'num_carry', 'num_consts'])

  def test_while(self):
    eqn, = eqns_of(
        lambda x: lax.while_loop(lambda c: c[0] < 3, lambda c: c + 1, x),
        X, primitive_=prims.while_p)
    self.assertParams(eqn, ['body_jaxpr', 'body_nconsts', 'cond_jaxpr',
                            'cond_nconsts'])

  def test_remat(self):
    eqn, = eqns_of(jax.checkpoint(jnp.sin), X)
    self.assertIs(eqn.primitive, prims.remat_p)
    self.assertParams(eqn, ['jaxpr', 'prevent_cse', 'differentiated',
                            'policy'])

  def test_custom_jvp_and_vjp(self):
    f = jax.custom_jvp(jnp.sin)
    f.defjvp(lambda p, t: (jnp.sin(p[0]), jnp.cos(p[0]) * t[0]))
    eqn, = eqns_of(f, X, primitive_=prims.custom_jvp_call_p)
    self.assertParams(eqn, ['call_jaxpr'])
    g = jax.custom_vjp(jnp.sin)
    g.defvjp(lambda x: (jnp.sin(x), x), lambda x, ct: (jnp.cos(x) * ct,))
    eqn, = eqns_of(g, X, primitive_=prims.custom_vjp_call_p)
    self.assertParams(eqn, ['call_jaxpr'])


if __name__ == '__main__':
  absltest.main()
