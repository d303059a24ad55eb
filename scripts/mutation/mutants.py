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
"""Hand-written semantic mutants of ``flax/nnx/sow`` and ``capture_compat``.

Each mutant is one small, plausible bug: a text ``old`` that occurs exactly
once in ``path``, replaced by ``new``. ``breaks`` says which behaviour the
mutant changes, so that a surviving mutant reads as a gap in the tests, not
as a diff. A mutant that changes no observable behaviour carries the reason
in ``equivalent`` and is left out of the score.

Why not ``mutmut`` or ``cosmic-ray``: both generate operator-level mutants
(every ``+``, comparison, constant and call), several thousand for these
~4,400 lines, and each must run the tests that reach the mutated line. Those
tests trace and compile JAX programs (10-40 s per file here), so even a
perfect per-line test selection would take days on two cores. The mutants
below are the bugs a reviewer plants by hand, at the decisions the code makes
(cache keys, axis positions, orders, refusals, parameters passed through).
``tests/nnx/mutation_table_test.py`` keeps this table in step with the code.
"""

from __future__ import annotations

import dataclasses

SOW = 'flax/nnx/sow/'
COMPAT = 'flax/nnx/capture_compat/'

# The deterministic tests that pin each module's behaviour, fastest-killing
# first (pytest stops at the first failure). The randomized fuzzer is not
# among them: what it finds is pinned by deterministic tests.
CORE_TESTS = (
    'tests/nnx/sow_eager_test.py',
    'tests/nnx/sow_semantics_test.py',
    'tests/nnx/sow_intervene_test.py',
    'tests/nnx/sow_cache_test.py',
    'tests/nnx/sow_test.py',
    'tests/nnx/sow_beyond_test.py',
    'tests/nnx/sow_coverage_test.py',
    'tests/nnx/sow_reliability_test.py',
    'tests/nnx/sow_sharding_test.py',
    'tests/nnx/sow_graph_nodes_test.py',
    'tests/nnx/sow_doctest_test.py',
    'tests/nnx/sow_memory_test.py',
    'tests/nnx/sow_plant_unread_test.py',
    'tests/nnx/sow_harvest_test.py',
    'tests/nnx/sow_modules_test.py',
)
COMPAT_TESTS = (
    'tests/nnx/capture_eager_test.py',
    'tests/nnx/sow_semantics_test.py',
    'tests/nnx/capture_compat_test.py',
    'tests/nnx/capture_compat_vmap_test.py',
    'tests/nnx/sow_graph_nodes_test.py',
    'tests/nnx/sow_parity_test.py',
    'tests/nnx/sow_doctest_test.py',
)
TRACING_TESTS = (
    'tests/nnx/sow_semantics_test.py',
    'tests/nnx/sow_graph_nodes_test.py',
    'tests/nnx/sow_test.py',
    'tests/nnx/capture_compat_test.py',
    'tests/nnx/sow_reliability_test.py',
    'tests/nnx/sow_modules_test.py',
)
# Module paths and taps serve both the functional transform and nnx.capture.
MODULES_TESTS = (
    'tests/nnx/sow_modules_test.py',
    'tests/nnx/capture_compat_test.py',
    'tests/nnx/capture_compat_vmap_test.py',
    'tests/nnx/sow_semantics_test.py',
    'tests/nnx/sow_parity_test.py',
    'tests/nnx/sow_doctest_test.py',
)


@dataclasses.dataclass(frozen=True)
class Mutant:
  """One planted bug.

  Attributes:
    id: a short, stable identifier.
    path: the file, relative to the repository root.
    old: text occurring exactly once in ``path``.
    new: its replacement.
    breaks: the behaviour the mutant changes.
    equivalent: why the mutant changes nothing observable, if it does not.
  """

  id: str
  path: str
  old: str
  new: str
  breaks: str
  equivalent: str | None = None

  @property
  def tests(self) -> tuple[str, ...]:
    if self.path.startswith(COMPAT):
      return COMPAT_TESTS
    if self.path.endswith(('tracing.py', 'write_back.py')):
      return TRACING_TESTS
    if self.path.endswith(('module_paths.py', 'taps.py')):
      return MODULES_TESTS
    return CORE_TESTS


def _m(id, file, old, new, breaks, equivalent=None):
  path = file if file.startswith(COMPAT) else SOW + file
  return Mutant(id, path, old, new, breaks, equivalent)


MUTANTS: tuple[Mutant, ...] = (
    # -- primitive.py ------------------------------------------------------
    _m('primitive-jvp-drops-sow', 'primitive.py',
       'return sow_p.bind(*primals, **params), list(tangents)',
       'return list(primals), list(tangents)',
       'a sow differentiated by jax.grad/jvp is still collected'),
    _m('primitive-batch-vmapped-count', 'primitive.py',
       'out = sow_p.bind(*moved, vmapped=vmapped + 1, **params)',
       'out = sow_p.bind(*moved, vmapped=vmapped, **params)',
       'a loop axis goes after the vmap axes applied outside the loop'),
    _m('primitive-batch-no-broadcast', 'primitive.py',
       '      jax.numpy.broadcast_to(leaf, (size, *jax.numpy.shape(leaf)))\n'
       '      if dim is None',
       '      leaf\n      if dim is None',
       'an unbatched value sown under vmap gets one entry per member'),
    _m('primitive-no-effect', 'primitive.py',
       'sow_effects = _HARVEST_EFFECTS if harvesting.value else'
       ' jex_core.no_effects',
       'sow_effects = jex_core.no_effects',
       'a sow whose result is unused survives dead-code elimination'),
    _m('primitive-bool-name-part', 'primitive.py',
       '  if isinstance(part, bool) or isinstance(part, np.bool_):\n'
       '    return None\n',
       '',
       'a bool is refused as a part of a sow name'),
    _m('primitive-numpy-int-name-part-kept', 'primitive.py',
       '  if isinstance(part, np.integer):\n    return int(part)',
       '  if isinstance(part, np.integer):\n    return part',
       'a NumPy integer in a name becomes the int it holds'),
    _m('primitive-scalar-not-weak', 'primitive.py',
       'return leaf if isinstance(leaf, jax.Array) else'
       ' jax.numpy.asarray(leaf)',
       'return leaf if isinstance(leaf, jax.Array) else jax.numpy.asarray(\n'
       '      np.asarray(leaf))',
       'a sown Python number stays weakly typed, as JAX converts it'),
    _m('primitive-cond-batch-no-refusal', 'primitive.py',
       '      if branches is not None:\n        _refuse_batched_cond(',
       '      if False:\n        _refuse_batched_cond(',
       'capture(vmap(f)) refuses a cond with a batched index over sows'),
    _m('primitive-numpy-scalar-not-array', 'primitive.py',
       '_ARRAY_TYPES = (jax.Array, np.ndarray, np.generic)',
       '_ARRAY_TYPES = (jax.Array, np.ndarray)',
       'NumPy scalars passed to capture(jax.jit(f)) are traced like jit'),
    # -- _jax.py -----------------------------------------------------------
    _m('jax-any-cond-refused', '_jax.py',
       "      if local.get('index_dim') is not None:",
       '      if True:',
       'a batched cond whose index is not batched is still captured'),
    _m('jax-outermost-cond-only', '_jax.py',
       '        return local[\'branches\']\n    frame = frame.f_back',
       '        return local[\'branches\']\n      return None\n'
       '    frame = frame.f_back',
       'a sow in an inner cond whose index is not batched, inside a cond'
       ' whose index is, is refused'),
    _m('primitive-sow-keys-shallow', 'primitive.py',
       '      keys.update(sow_keys(sub))',
       '      pass',
       'a name predicate selects sows nested in a jit body'),
    _m('primitive-is-array-unbounded', 'primitive.py',
       '    if len(_IS_ARRAY) < _MAX_TYPES:',
       '    if True:',
       'the table of leaf types is bounded'),
    _m('primitive-mode-unchecked', 'primitive.py',
       '  if mode not in MODES:',
       '  if mode is None:',
       "a sow mode other than 'append'/'clobber' is refused"),
    _m('primitive-transpose-zero', 'primitive.py',
       '  del leaves, params\n  return list(cotangents)',
       '  del leaves, params\n'
       '  return [c if isinstance(c, ad.Zero) else jax.numpy.zeros_like(c)\n'
       '          for c in cotangents]',
       'gradients flow through a sow'),
    # -- selection.py ------------------------------------------------------
    _m('selection-str-as-chars', 'selection.py',
       '    return frozenset([names])',
       '    return frozenset(names)',
       "names='hidden' selects the name 'hidden', not its letters"),
    _m('selection-tag-ignored', 'selection.py',
       "    if self.tag is not None and params['tag'] != self.tag:",
       "    if self.tag is None and params['tag'] != self.tag:",
       'capture(f, tag=...) selects only sows with that tag'),
    _m('selection-predicate-ignored', 'selection.py',
       '        tag=self.tag, names=frozenset(filter(self.names, candidates))',
       '        tag=self.tag, names=frozenset(candidates)',
       'a name predicate selects only the names it accepts'),
    # -- interpreter.py ----------------------------------------------------
    _m('interpreter-planter-wrong-site', 'interpreter.py',
       '        self.leaves[: site.num_leaves],\n'
       '        self.leaves[site.num_leaves :],',
       '        self.leaves[len(self.leaves) - site.num_leaves :],\n'
       '        self.leaves[: len(self.leaves) - site.num_leaves],',
       'planted values reach their own sites inside one jit body'),
    _m('interpreter-transform-uncached', 'interpreter.py',
       '    return _cached_transform(closed, request)',
       '    return _transform(closed, request, None)',
       'an eager capture(jax.jit(f)) compiles once'),
    _m('interpreter-sow-literal', 'interpreter.py',
       '    if eqn.primitive is primitive.sow_p:  # an identity: it returns'
       ' literals\n      invals = [as_array(v) for v in invals]',
       '    pass',
       'a sown constant is returned as a JAX array'),
    # -- sites.py ----------------------------------------------------------
    _m('sites-remove-ignored', 'sites.py',
       '        self.collect or self.remove or self.plants(params)',
       '        self.collect or self.plants(params)',
       'a capture around a custom_vjp takes its sows out of the re-bound'
       ' function'),
    _m('sites-plant-needs-collect', 'sites.py',
       '        self.collect or self.remove or self.plants(params)',
       '        self.collect or self.remove',
       'plant handles sows though it collects nothing'),
    _m('sites-loop-axis-first', 'sites.py',
       '    at = self.outer_vmaps\n',
       '    at = 0\n',
       'a loop axis goes after the vmap axes applied outside the loop'),
    _m('sites-vmaps-any-transform', 'sites.py',
       "      if isinstance(part, _jax.Transform) and part.name == 'vmap'",
       '      if isinstance(part, _jax.Transform)',
       'only vmaps (not jvp/transpose) count as outer axes'),
    _m('sites-entry-dtype-unchecked', 'sites.py',
       '    if (got_shape, got_dtype) != (shape, dtype):',
       '    if got_shape != shape:',
       'a planted value of the wrong dtype is refused'),
    _m('sites-entry-tree-unchecked', 'sites.py',
       '  if tree != site.tree:',
       '  if tree.num_leaves != site.tree.num_leaves:',
       'a planted value of another structure is refused'),
    _m('sites-seen-through', 'sites.py',
       '    return dataclasses.replace(self, inner_vmaps=self.inner_vmaps +'
       ' vmaps)',
       '    return self',
       'vmaps on a call equation are inner to the scope holding it'),
    # -- scope.py ----------------------------------------------------------
    _m('scope-plant-clobber', 'scope.py',
       "    if site.mode == 'clobber':\n      raise ValueError(",
       "    if site.mode == 'never':\n      raise ValueError(",
       "planting a sow with mode='clobber' is refused"),
    _m('scope-zero-trip-first-value', 'scope.py',
       '    for record in reversed(self._records):',
       '    for record in self._records:',
       'a zero-trip while loop keeps the last value sown before it'),
    _m('scope-inline-vmaps-lost', 'scope.py',
       '    vmaps = vmaps_of(eqn)\n    self.inline_vmaps += vmaps',
       '    vmaps = 0\n    self.inline_vmaps += vmaps',
       'vmaps on a closed_call count for the sows inside its body'),
    _m('scope-clobber-keeps-superseded', 'scope.py',
       "    if site.mode == 'clobber' and name in self._first:",
       "    if site.mode == 'clobber' and False:",
       'an eager capture frees the values a clobber supersedes'),
    # -- dispatch.py -------------------------------------------------------
    _m('dispatch-plant-unread-allowed', 'dispatch.py',
       '  if not request.refuse_unread or handle_sow not in rules:',
       '  if True:',
       'plant refuses a sow whose result is unused'),
    _m('dispatch-no-refusal', 'dispatch.py',
       '      return _rules.RULES.get(prim, _refuse)',
       '      return _rules.RULES.get(prim)',
       'a higher-order primitive without a rule is refused, naming it'),
    _m('dispatch-strip-kept', 'dispatch.py',
       '  if rule is None and strip and primitive.sow_effect in eqn.effects:',
       '  if False:',
       'outside a capture, no sow effect survives (plain jit fast path)'),
    # -- staging.py --------------------------------------------------------
    _m('staging-rewrite-order', 'staging.py',
       '  outvars = [read(v) for v in jaxpr.outvars] + sown',
       '  outvars = [read(v) for v in jaxpr.outvars] + sown[::-1]',
       'values of several sows of one jit body go to their own names'),
    _m('staging-rewrite-keeps-readers', 'staging.py',
       '    elif substitute and reads_removed(eqn):',
       '    elif False:',
       'an equation reading a removed sow reads its input instead'),
    _m('staging-rewrite-while-planting', 'staging.py',
       '  if request.planted is not None or jaxpr.is_high:',
       '  if jaxpr.is_high:',
       'a planting request (compat init) is planted under jit too'),
    # -- rules.py ----------------------------------------------------------
    _m('rules-jit-donation-dropped', 'rules.py',
       "      donated_invars=(*p['donated_invars'], *[False] * n_in),",
       "      donated_invars=(False,) * (len(p['donated_invars']) + n_in),",
       'a re-bound jit keeps donating the arguments it donated'),
    _m('rules-remat-policy-dropped', 'rules.py',
       "      policy=p['policy'],",
       '      policy=None,',
       'a re-bound checkpoint keeps its rematerialization policy'),
    _m('rules-remat-prevent-cse', 'rules.py',
       "  prevent_cse = p['prevent_cse']\n",
       '  prevent_cse = True\n',
       'a re-bound checkpoint keeps its prevent_cse'),
    _m('rules-scan-loop-axis-leading', 'rules.py',
       '          jnp.moveaxis(next(appended), 0, site.outer_vmaps)',
       '          next(appended)',
       'inside vmap, a scanned value has its loop axis after the vmap axes'),
    _m('rules-scan-zero-length-clobber', 'rules.py',
       '    _record_zero_trip(scope, eqn)\n    return [*carry, *ys]',
       '    _record_zero_trip(scope, eqn)',
       'a zero-length scan records nothing for clobbered sows'),
    _m('rules-scan-append-order', 'rules.py',
       "  append_out = [v for s, vs in per_site if s.mode == 'append' for v in"
       ' vs]',
       "  append_out = [v for s, vs in per_site if s.mode == 'append' for v in"
       ' vs][::-1]',
       'values of several appended sows of one scan body keep their names'),
    _m('rules-cond-unchecked', 'rules.py',
       '  _check_branches_agree(eqn, branches)\n',
       '',
       'cond branches that sow differently are refused, listing each'),
    _m('rules-cond-last-branch', 'rules.py',
       '      branches[0].jaxpr, branches[0].sites,'
       ' branches[0].planted_sites,',
       '      branches[0].jaxpr, branches[-1].sites,'
       ' branches[0].planted_sites,',
       'none',
       equivalent='_check_branches_agree has made every branch sow the same'
       ' sites, so branch 0 and the last describe the same outputs'),
    _m('rules-while-cond-sows', 'rules.py',
       "  if dispatch.contains(p['cond_jaxpr'].jaxpr, scope.request):",
       '  if False:',
       'a sow in a while condition is refused'),
    _m('rules-while-prior-unchecked', 'rules.py',
       '  if prior is None or (prior[0].tree, prior[0].avals) != (site.tree,\n'
       '                                                         site.avals):',
       '  if prior is None:',
       'a prior value of another shape is refused for a zero-trip loop'),
    _m('rules-custom-plant-ignored', 'rules.py',
       '    if interpreter.plants_into(body, scope.request):\n'
       '      return _inline(scope, eqn, invals, body_param)',
       '    pass',
       'a value planted inside a custom_vjp/custom_jvp function is used'),
    _m('rules-derivative-rule-sows', 'rules.py',
       '    if extra:\n      raise NotImplementedError(',
       '    if False:\n      raise NotImplementedError(',
       'a derivative rule sowing a name its function does not is refused'),
    _m('rules-custom-unselected-stripped', 'rules.py',
       '    stripped = interpreter.transform(body, removing).jaxpr',
       '    stripped = interpreter.transform(\n'
       '        body, dataclasses.replace(removing, rebind_unhandled=False)\n'
       '    ).jaxpr',
       'a sow an inner capture around a custom_vjp leaves can be planted'),
    _m('rules-custom-unselected-twice', 'rules.py',
       '  dropping = dataclasses.replace(scope.request,'
       ' rebind_unhandled=False)',
       '  dropping = scope.request',
       'an outer capture sees a sow a custom_vjp capture leaves once'),
    _m('rules-zero-trip-superseded-append', 'rules.py',
       "    return params['mode'] == 'append' and"
       ' self.selection.matches(params)',
       '    return self.selection.matches(params)',
       'a zero-trip scan gives each append site an empty stack, also one a'
       ' clobber supersedes per iteration'),
    _m('rules-shard-map-axes-reversed', 'rules.py',
       "  axes = tuple(a for a in mesh.axis_names if a in"
       " p['newly_manual_axes'])",
       "  axes = tuple(a for a in mesh.axis_names if a in"
       " p['newly_manual_axes'])[::-1]",
       'per-shard values are stacked along the mesh axes in mesh order'),
    _m('rules-no-while', 'rules.py',
       '    prims.while_p: _while,\n',
       '',
       'a while loop with clobbered sows is captured'),
    # -- capture.py --------------------------------------------------------
    _m('capture-runner-ignores-statics', 'capture.py',
       '        static_argnums=info.static_argnums,\n'
       '        static_argnames=info.static_argnames,',
       '        static_argnums=(),\n        static_argnames=(),',
       "capture(jax.jit(f)) keeps f's static arguments static"),
    _m('capture-runner-ignores-selection', 'capture.py',
       '        runner = self.runners[key] = self._make_runner(key[0])',
       '        runner = self.runners[key] = next(\n'
       '            iter(self.runners.values()), None\n'
       '        ) or self._make_runner(key[0])',
       'capture(jax.jit(f), names=...) selects by its own names'),
    _m('capture-runner-predicate-unresolved', 'capture.py',
       '    selection = selection.resolve(lambda: self._sow_keys(args,'
       ' kwargs))\n',
       '',
       'a fresh predicate selecting the same names reuses the compiled'
       ' runner'),
    _m('capture-call-predicate-unresolved', 'capture.py',
       '    selection = selection.resolve(\n'
       '        lambda: primitive.sow_keys(staged.jaxpr.jaxpr)\n'
       '    )\n',
       '',
       'a fresh predicate selecting the same names reuses the transformed'
       ' bodies'),
    _m('capture-runner-no-donation', 'capture.py',
       '        donate_argnums=info.donate_argnums,\n'
       '        donate_argnames=info.donate_argnames,\n',
       '',
       "an eager capture(jax.jit(f)) donates f's donated arguments"),
    _m('capture-static-staged', 'capture.py',
       '  if not argnums and not argnames:\n    return fun, args, kwargs',
       '  if True:\n    return fun, args, kwargs',
       'a static argument of capture(jax.jit(f)) reaches f as given'),
    _m('capture-runners-hold-function', 'capture.py',
       '    self.f = weakref.ref(f)',
       '    self.f = lambda: f',
       'the runners of a jitted function go with the function'),
    _m('capture-runner-unbounded', 'capture.py',
       '        if len(self.runners) >= self._MAX_RUNNERS:',
       '        if False:',
       'the runners of one jitted function are bounded'),
    _m('capture-runner-shardings-dropped', 'capture.py',
       '        **_placement(info),\n',
       '',
       'a placed jit keeps its shardings and its Hijax updates'),
    _m('capture-layouts-hijax-allowed', 'capture.py',
       '      if jitted_itself:\n'
       '        _refuse_hijax_arguments(name, args, kwargs)\n',
       '',
       'a jit with layouts refuses Hijax Variables it cannot update'),
    _m('capture-runner-calls-the-jit', 'capture.py',
       '  if _has_layouts(info) or fun is None:\n    return weakref.ref(f)',
       '  if True:\n    return weakref.ref(f)',
       'an eager capture(jax.jit(f)) updates Hijax Variables as jax.jit(f)'),
    _m('capture-clobber-appends', 'capture.py',
       "    if site.mode == 'clobber':\n      grouped[key(site)] = [value]",
       "    if site.mode == 'never':\n      grouped[key(site)] = [value]",
       "a clobbered sow returns its last value only"),
    # -- plant.py ----------------------------------------------------------
    _m('plant-unused-silent', 'plant.py',
       '      planter.check_all_used(tag)\n',
       '',
       'plant refuses values for names the function never sows'),
    _m('plant-too-few-entries', 'plant.py',
       '    if index >= len(entries):\n      raise ValueError(',
       '    if index > len(entries):\n      raise ValueError(',
       'too few planted entries are refused, naming the sow'),
    _m('plant-tag-ignored', 'plant.py',
       "  selection = Selection.make(tag=tag, names=None, where='plant')",
       "  selection = Selection.make(tag=None, names=None, where='plant')",
       'plant(f, values, tag=...) plants only sows with that tag'),
    # -- perturb.py --------------------------------------------------------
    _m('perturb-bwd-not-sown', 'perturb.py',
       '  return (primitive.sow(cotangent, name=name, tag=tag),)',
       '  return (cotangent,)',
       'perturb sows the gradient of the value'),
    _m('perturb-bwd-tag-dropped', 'perturb.py',
       '  return (primitive.sow(cotangent, name=name, tag=tag),)',
       '  return (primitive.sow(cotangent, name=name),)',
       "perturb's gradient sow carries its tag"),
    _m('perturb-int-accepted', 'perturb.py',
       '    if not jnp.issubdtype(leaf.dtype, jnp.inexact):',
       '    if False:',
       'perturb refuses integer values, which have no gradient'),
    # -- harvest.py --------------------------------------------------------
    _m('harvest-order-ignored', 'harvest.py',
       '      while pending and pending[-1][0] <= marked:',
       '      while False:',
       'sows taken at staging keep program order with sow equations'),
    _m('harvest-takes-unselected', 'harvest.py',
       '        and harvest.request.handles(params)\n',
       '',
       'a sow the capture does not select stays for an enclosing one'),
    _m('harvest-any-trace', 'harvest.py',
       '        harvest.trace is trace\n',
       '        True\n',
       'a sow inside a scan body or jit is not taken as a value of f'),
    _m('harvest-takes-clobbers', 'harvest.py',
       "        and params['mode'] == 'append'\n",
       '',
       'an eager capture frees the values a clobber supersedes',
       equivalent='an eager capture no longer stages f (flax.nnx.sow.transform.eager), so'
       ' sows are taken at staging time only under a trace, where a taken'
       ' clobber is one more output of the staged program, like the ones the'
       ' one-call rewrite returns, which XLA drops when nothing reads it; the'
       ' records, and so the values, are the same (checked with'
       ' jax.make_jaxpr and jax.jit of a chain of clobbers).'),
    _m('harvest-leaves-shifted', 'harvest.py',
       '  num_outs = len(outs) - harvested.num_leaves\n',
       '  num_outs = len(outs) - harvested.num_leaves - 1\n',
       'the taken values are the extra outputs, not f\'s own'),
    # -- tracing.py --------------------------------------------------------
    _m('tracing-hijax-traced', 'tracing.py',
       '    self.traced_graphdef = _without_hijax(self.graphdef)',
       '    self.traced_graphdef = self.graphdef',
       'Hijax Variables are traced as ordinary copies'),
    _m('tracing-write-unchanged', 'tracing.py',
       '        if after is not before:\n'
       '          outcome.updates.append(',
       '        if True:\n          outcome.updates.append(',
       'a call that changes nothing writes nothing to the caller'),
    _m('tracing-graph-mode-ignored', 'tracing.py',
       '    self.graph = graphlib.set_graph_mode.current_value()',
       '    self.graph = True',
       'capture splits graph nodes in the current graph mode, as nnx.jit'),
    _m('tracing-innermost-frozen', 'write_back.py',
       '  while depth > 1 and _is_immutable_node(chain[depth - 1]):\n'
       '    depth -= 1\n',
       '',
       'a leaf in nested immutable pytrees is written back'),
    _m('tracing-refs-not-traced', 'tracing.py',
       '  return primitive.is_array(leaf) or variablelib.is_array_ref(leaf)',
       '  return primitive.is_array(leaf)',
       'a Variable holding an array reference is updated by reference',
       equivalent='a reference left out of the traced inputs is closed over'
       ' by the trace instead: the jaxpr then holds the same reference object'
       ' as a constant and reads and writes it alike, and a trace with'
       ' constants is never reused by the compat cache; checked eagerly, in'
       ' jax.jit(capture(model)) and through nnx.capture.'),
    # -- capture_compat/ ---------------------------------------------------
    _m('compat-name-order', 'module_paths.py',
       '  for part in (*path, name):',
       '  for part in (name, *path):',
       "a Module.sow below the root is named (*path, name) for capture"),
    _m('compat-keep-last-appends', COMPAT + 'module_methods.py',
       "  return 'clobber' if reduce_fn is keep_last else 'append'",
       "  return 'append'",
       'a keep_last reducer works inside nnx.while_loop'),
    _m('compat-init-types-ignored', COMPAT + 'frames.py',
       '    return var_type in self.var_types or var_type in'
       ' self.init_types.get(\n        path, ()\n    )',
       '    return var_type in self.var_types',
       "init's types are collected though not returned"),
    _m('compat-outermost-frame', 'module_paths.py',
       '  for frame in reversed(FRAMES.stack):\n    path = frame.path_of(obj)',
       '  for frame in FRAMES.stack:\n    path = frame.path_of(obj)',
       'a sow goes to the innermost capture holding its module'),
    _m('compat-reduce-reversed', COMPAT + 'call.py',
       '      for value in values[key]:\n'
       '        accumulated = info.reduce_fn(accumulated, value)',
       '      for value in reversed(values[key]):\n'
       '        accumulated = info.reduce_fn(accumulated, value)',
       'reduce_fn is applied in call order'),
    _m('compat-perturb-not-added', COMPAT + 'module_methods.py',
       '      mode=\'append\', meta=info,\n  )\n  return perturbation + value',
       '      mode=\'append\', meta=info,\n  )\n  return value',
       'Module.perturb adds its (planted) perturbation'),
    _m('compat-dropped-returns-true', COMPAT + 'module_methods.py',
       '      )\n    return False',
       '      )\n    return True',
       'Module.sow returns False when the capture does not collect it'),
    _m('compat-marks-ignore-paths', 'module_paths.py',
       '  paths: tuple[tuple[tp.Hashable, PathParts], ...]\n',
       '  paths: tuple[tuple[tp.Hashable, PathParts], ...] = (\n'
       '      dataclasses.field(compare=False))\n',
       'nnx.jit of two equal submodules is traced per module path'),
    _m('compat-frame-id-per-call', COMPAT + 'frames.py',
       "        threading.get_ident(),\n        depth,\n",
       "        threading.get_ident(),\n        object(),\n",
       'a capture run again compiles no jit inside it again'),
    _m('compat-frame-id-shared-by-threads', COMPAT + 'frames.py',
       "        'nnx.capture',\n        threading.get_ident(),\n",
       "        'nnx.capture',\n",
       "threads capturing the same model each get their own values"),
    _m('compat-marks-left-on-returned-modules', 'module_paths.py',
       '    unmark([m for _, m in modules] + returned, frame, refusing)',
       '    pass',
       'a module returned by the captured call carries no capture mark'),
    _m('compat-watch-through-setattr', 'taps.py',
       "  object.__setattr__(module, '__class__', cls)",
       '  module.__class__ = cls',
       'giving a copy its watching class adds no attribute to it'),
    # -- intervene.py and the fn entries of plant ----------------------------
    _m('intervene-fn-never-computed', 'intervene.py',
       '    if site.name not in self.counters:\n      return None',
       '    return None',
       'a name planted by a function takes what the function computes'),
    _m('intervene-index-not-counted', 'intervene.py',
       '    self.offset += 1\n',
       '',
       'fn sees the occurrence index of each execution of its name'),
    _m('intervene-fn-not-vmapped', 'intervene.py',
       '    for _ in range(n):\n      mapped = jax.vmap(mapped)\n',
       '',
       'fn sees one example of a sow inside a vmap in f'),
    _m('intervene-no-shape-check', 'intervene.py',
       '    if got != (tuple(shape), np.dtype(dtype)):',
       '    if False:',
       'a fn returning another shape or dtype raises naming the site'),
    _m('intervene-hoist-nothing', 'intervene.py',
       '  is_tracer = [isinstance(c, jax.core.Tracer) for c in consts]',
       '  is_tracer = [False for c in consts]',
       'fn closing over a jit argument works inside a sub-jaxpr'),
    _m('rules-scan-index-not-carried', 'rules.py',
       '      outvars=[*carry_out, *ends_out, *clobber_out, *ys_out,'
       ' *append_out],',
       '      outvars=[*carry_out, *starts_in, *clobber_out, *ys_out,'
       ' *append_out],',
       'the index inside a scan advances each iteration'),
    _m('rules-scan-counts-one-iteration', 'rules.py',
       '  t.fn_finish(scope, ends, times=length)',
       '  t.fn_finish(scope, ends, times=1)',
       'the index after a scan counts every iteration'),
    _m('rules-while-static-count', 'rules.py',
       '  return _finish(scope, eqn, outs, t, times=None)',
       '  return _finish(scope, eqn, outs, t, times=1)',
       'the index after a while_loop counts its trips'),
    _m('rules-cond-missing-name-counted', 'rules.py',
       '        dict(zip(b.fn_names, b.fn_counts)).get(name, 0) for b in'
       ' branches',
       '        dict(zip(b.fn_names, b.fn_counts)).get(name, 1) for b in'
       ' branches',
       'a cond branch that does not sow a name leaves its index unchanged'),
    _m('plant-fn-never-sown-unchecked', 'plant.py',
       '        used = int(self.counters[name].seen)',
       '        used = 1',
       'a fn-planted name the function never sows raises'),
    _m('compat-init-perturbation-ignored', COMPAT + 'call.py',
       '        _InitPlanter(planted) if planted else None,',
       '        None,',
       'a perturbation given in init is added to the value'),
    _m('compat-decorator-drops-init', COMPAT + '__init__.py',
       '      return capture(\n'
       '          actual_fn, *all_types, init=init,'
       ' method_outputs=method_outputs\n      )',
       '      return capture(\n'
       '          actual_fn, *all_types, method_outputs=method_outputs\n'
       '      )',
       'the decorator form passes init through'),
    _m('compat-method-outputs-call-only', COMPAT + 'method_outputs.py',
       '      patterns=None, methods=None, inputs=False, outputs=False,',
       "      patterns=None, methods=('__call__',), inputs=False,"
       ' outputs=False,',
       'method_outputs sows every public method of the classes'),
    # -- module_paths.py, taps.py: modules through the functional transform
    _m('paths-no-functional-frame', 'tracing.py',
       '      if self.paths:\n        out = _call_in_frame(',
       '      if False:\n        out = _call_in_frame(',
       'Module.sow in a functional capture is collected by module path'),
    _m('paths-argument-prefix-dropped', 'module_paths.py',
       '    prefix = () if node is None and i == 0 else (i,)',
       '    prefix = ()',
       'a module in another positional argument is named from its position'),
    _m('paths-keyword-prefix-dropped', 'module_paths.py',
       '    found.append(((name,), arg))',
       '    found.append(((), arg))',
       'a module in a keyword argument is named from the keyword'),
    _m('paths-closure-not-refused', 'module_paths.py',
       '  if innermost_functional() is None:\n    return\n  raise',
       '  if True:\n    return\n  raise',
       'Module.sow on a module in a closure of a functional capture is'
       ' refused'),
    _m('paths-fresh-functional-id', 'module_paths.py',
       '          threading.get_ident(), -1 - sum(f.functional for f in'
       ' FRAMES.stack)',
       '          threading.get_ident(), -next(_COMPAT_IDS)',
       'an nnx.jit inside a functional capture is traced once across calls'),
    _m('paths-functional-defers-to-outer', 'module_paths.py',
       '    if frame.functional:\n      return fallback or (frame, path, True)',
       '    if frame.functional:\n      continue',
       'a functional capture collects the Module.sow sites of its modules'),
    _m('capture-runner-ignores-module-sow', 'capture.py',
       '    key = (selection, module_paths.sow_methods())',
       '    key = (selection, None)',
       'capture(jax.jit(f)) sees Module.sow sites after install'),
    _m('taps-inputs-not-replaced', 'taps.py',
       '      args, kwargs = _sow_arrays(\n',
       '      _ = _sow_arrays(\n',
       'a value planted into a tap\'s inputs is the call\'s input'),
    _m('taps-output-not-replaced', 'taps.py',
       "      result = _sow_arrays(result, name=(*base, 'output'), tag=tag)",
       "      _sow_arrays(result, name=(*base, 'output'), tag=tag)",
       "a value planted into a tap's output is the call's result"),
    _m('taps-wildcard-any-length', 'taps.py',
       '  return len(pattern) == len(path) and all(',
       '  return all(',
       'a pattern matches paths of its own length only'),
    _m('taps-unmatched-pattern-accepted', 'taps.py',
       '    if not hits:\n',
       '    if False:\n',
       'a pattern matching no module is refused'),
    _m('taps-class-not-restored', 'taps.py',
       '        _set_class(module, cls)\n    if not previous',
       '        pass\n    if not previous',
       'the copies get their own class back when the call ends'),
    _m('taps-returned-copies-keep-watching', 'taps.py',
       '      if cls is not None and id(node) not in _HELD:\n'
       '        _set_class(node, cls)',
       '      if cls is not None and id(node) not in _HELD:\n'
       '        pass',
       'a module returned by a tapped call has its own class'),
    _m('compat-replaced-forgotten', COMPAT + 'replaced.py',
       '  return ORIGINALS.get(name)',
       '  return None',
       "Flax's own capture, held from before install, still collects"),
    # -- eager.py ---------------------------------------------------------
    _m('eager-sow-not-recorded', 'eager.py',
       '    return dispatch.handle_site(self.scope, site, leaves)',
       '    return leaves',
       'an eager capture collects the sows bound in f itself'),
    _m('eager-unhandled-sow-dropped', 'eager.py',
       '      return self._forward(primitive.sow_p, args, params)',
       '      return list(args)',
       'an enclosing capture sees the sows an inner eager capture leaves'),
    _m('eager-higher-order-forwarded', 'eager.py',
       '    if _has_jaxprs(params):\n      rule =',
       '    if False:\n      rule =',
       'the sows inside a jit (scan, cond...) called eagerly are collected'),
    _m('eager-custom-jvp-unseen', 'eager.py',
       '    del prim, jvp, symbolic_zeros  # evaluated, not differentiated\n'
       '    with core.set_current_trace(self):',
       '    del prim, jvp, symbolic_zeros  # evaluated, not differentiated\n'
       '    with core.set_current_trace(self.parent):',
       'the sows of a custom_jvp function called eagerly are collected'),
    _m('eager-own-trace-state', 'eager.py',
       '    self._weakref = parent._weakref\n',
       '',
       'an eager capture updates the Variables of its modules in place'),
    _m('eager-never', 'eager.py',
       '  return _jax.trace_ctx.is_top_level() or (',
       '  return False and (',
       'an eager capture runs on concrete values, as a direct call'),
    _m('primitive-harvesting-not-in-jit-key', 'primitive.py',
       '    include_in_jit_key=True,\n',
       '',
       'a jit compiled outside a capture has its sows seen in an eager one'),
    _m('sites-params-without-meta', 'sites.py',
       "    return {'sow_name': self.name, 'tag': self.tag, 'meta': self.meta}",
       "    return {'sow_name': self.name, 'tag': self.tag}",
       "an eager nnx.capture plants init's perturbations"),
    _m('paths-legacy-sow-allowed', 'module_paths.py',
       '  refusing = frame.functional and legacy_sow_methods()',
       '  refusing = False',
       "Flax's own Module.sow in a functional capture raises, naming install"),
    _m('taps-released-by-the-first-call', 'taps.py',
       '      if not held[1]:\n',
       '      if True:\n',
       'threads tapping the same model each see all its calls'),
)
