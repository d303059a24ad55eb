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

The table follows the package's layers (see ``flax/nnx/sow/__init__.py``):
``transform/`` (the primitive, the interpreter and its rules, in plain
JAX), ``lift/`` (graph-node calls, module paths, taps), the API modules
(``capture``, ``plant``, ``perturb``, ``tap``), then ``capture_compat/``.
Each module's mutants run against the tests of its layer (``Mutant.tests``).

Each mutant is one small, plausible bug: a text ``old`` that occurs exactly
once in ``path``, replaced by ``new``. ``breaks`` says which behaviour the
mutant changes, so that a surviving mutant reads as a gap in the tests, not
as a diff. A mutant that changes no observable behaviour carries the reason
in ``equivalent`` and is left out of the score.

Why not ``mutmut`` or ``cosmic-ray``: both generate operator-level mutants
(every ``+``, comparison, constant and call), several thousand for these
~7,300 lines, and each must run the tests that reach the mutated line. Those
tests trace and compile JAX programs (10-40 s per file here), so even a
perfect per-line test selection would take days on two cores. The mutants
below are the bugs a reviewer plants by hand, at the decisions the code makes
(cache keys, axis positions, orders, refusals, parameters passed through).
``tests/tooling/mutation_table_test.py`` keeps this table in step with the code.
"""

from __future__ import annotations

import dataclasses

SOW = 'flax/nnx/sow/'
COMPAT = 'flax/nnx/capture_compat/'
# The codemod's decision modules (outside the flax package).
MIGRATE = 'scripts/migrate/sow_migrate/'

# The deterministic tests that pin each module's behaviour, fastest-killing
# first (pytest stops at the first failure). The randomized fuzzer is not
# among them: what it finds is pinned by deterministic tests.
CORE_TESTS = (
    'tests/nnx/sow/transform/names_test.py',
    'tests/nnx/sow/api/names_and_patterns_test.py',
    'tests/nnx/sow/api/capture_see_through_test.py',
    'tests/nnx/sow/api/capture_grads_test.py',
    'tests/nnx/sow/transform/sow_primitive_test.py',
    'tests/nnx/sow/transform/sites_test.py',
    'tests/nnx/sow/transform/selection_test.py',
    'tests/nnx/sow/transform/scope_test.py',
    'tests/nnx/sow/transform/planting_test.py',
    'tests/nnx/sow/transform/interpreter_test.py',
    'tests/nnx/sow/transform/eager_trace_test.py',
    'tests/nnx/sow/transform/deferred_test.py',
    'tests/nnx/sow/api/capture_eager_test.py',
    'tests/nnx/sow/api/capture_eager_dispatch_test.py',
    'tests/nnx/sow/api/capture_test.py',
    'tests/nnx/sow/api/capture_composition_test.py',
    'tests/nnx/sow/transform/rules/rules_calls_test.py',
    'tests/nnx/sow/api/plant_functions_test.py',
    'tests/nnx/sow/api/compiled_runners_test.py',
    'tests/nnx/sow/api/capture_caches_test.py',
    'tests/nnx/sow/api/perturb_test.py',
    'tests/nnx/sow/api/perturb_forward_test.py',
    'tests/nnx/sow/transform/rules/rules_custom_derivatives_test.py',
    'tests/nnx/sow/transform/rules/rules_loops_test.py',
    'tests/nnx/sow/transform/rules/rules_while_steps_test.py',
    'tests/nnx/sow/transform/runtime_checks_test.py',
    'tests/nnx/sow/transform/steps_test.py',
    'tests/nnx/sow/transform/rules/rules_cond_test.py',
    'tests/nnx/sow/api/plant_test.py',
    'tests/nnx/sow/transform/rules/rules_coverage_test.py',
    'tests/nnx/sow/bad_inputs_test.py',
    'tests/nnx/sow/concurrency_and_leaks_test.py',
    'tests/nnx/sow/api/transform_stacks_test.py',
    'tests/nnx/sow/transform/rules/rules_shard_map_test.py',
    'tests/nnx/sow/api/capture_graph_nodes_test.py',
    'tests/nnx/sow/docstrings_test.py',
    'tests/nnx/sow/api/capture_memory_test.py',
    'tests/nnx/sow/api/capture_staging_test.py',
    'tests/nnx/capture_compat/module_sow_test.py',
    'tests/nnx/capture_compat/module_taps_test.py',
)
COMPAT_TESTS = (
    'tests/nnx/capture_compat/eager_external_values_test.py',
    'tests/nnx/sow/api/capture_test.py',
    'tests/nnx/sow/api/capture_composition_test.py',
    'tests/nnx/sow/transform/rules/rules_calls_test.py',
    'tests/nnx/capture_compat/compat_capture_test.py',
    'tests/nnx/capture_compat/compat_sow_values_test.py',
    'tests/nnx/capture_compat/compat_variable_updates_test.py',
    'tests/nnx/capture_compat/compat_install_test.py',
    'tests/nnx/capture_compat/compat_method_outputs_test.py',
    'tests/nnx/capture_compat/compat_perturb_test.py',
    'tests/nnx/capture_compat/compat_transforms_test.py',
    'tests/nnx/capture_compat/compat_eager_call_test.py',
    'tests/nnx/capture_compat/compat_threads_and_failures_test.py',
    'tests/nnx/capture_compat/compat_vmap_test.py',
    'tests/nnx/sow/api/capture_graph_nodes_test.py',
    'tests/nnx/capture_compat/parity_test.py',
    'tests/nnx/sow/docstrings_test.py',
)
# lift/: graph-node calls staged on copies and written back.
GRAPH_CALLS_TESTS = (
    'tests/nnx/sow/lift/graph_nodes_test.py',
    'tests/nnx/sow/lift/write_back_test.py',
    'tests/nnx/sow/lift/graph_calls_test.py',
    'tests/nnx/sow/api/capture_test.py',
    'tests/nnx/sow/api/capture_composition_test.py',
    'tests/nnx/sow/transform/rules/rules_calls_test.py',
    'tests/nnx/sow/api/capture_graph_nodes_test.py',
    'tests/nnx/sow/transform/sow_primitive_test.py',
    'tests/nnx/sow/api/perturb_test.py',
    'tests/nnx/capture_compat/compat_capture_test.py',
    'tests/nnx/capture_compat/compat_sow_values_test.py',
    'tests/nnx/capture_compat/compat_variable_updates_test.py',
    'tests/nnx/capture_compat/compat_install_test.py',
    'tests/nnx/capture_compat/compat_method_outputs_test.py',
    'tests/nnx/capture_compat/compat_perturb_test.py',
    'tests/nnx/capture_compat/compat_transforms_test.py',
    'tests/nnx/capture_compat/compat_eager_call_test.py',
    'tests/nnx/capture_compat/compat_threads_and_failures_test.py',
    'tests/nnx/sow/bad_inputs_test.py',
    'tests/nnx/sow/concurrency_and_leaks_test.py',
    'tests/nnx/capture_compat/module_sow_test.py',
    'tests/nnx/capture_compat/module_taps_test.py',
)
# Module paths and taps serve both the functional transform and nnx.capture.
MODULES_TESTS = (
    'tests/nnx/sow/lift/module_paths_test.py',
    'tests/nnx/sow/lift/taps_test.py',
    'tests/nnx/sow/api/tap_patterns_test.py',
    'tests/nnx/capture_compat/module_sow_test.py',
    'tests/nnx/capture_compat/module_taps_test.py',
    'tests/nnx/capture_compat/compat_capture_test.py',
    'tests/nnx/capture_compat/compat_sow_values_test.py',
    'tests/nnx/capture_compat/compat_variable_updates_test.py',
    'tests/nnx/capture_compat/compat_install_test.py',
    'tests/nnx/capture_compat/compat_method_outputs_test.py',
    'tests/nnx/capture_compat/compat_perturb_test.py',
    'tests/nnx/capture_compat/compat_transforms_test.py',
    'tests/nnx/capture_compat/compat_eager_call_test.py',
    'tests/nnx/capture_compat/compat_threads_and_failures_test.py',
    'tests/nnx/capture_compat/compat_vmap_test.py',
    'tests/nnx/capture_compat/nothing_on_modules_test.py',
    'tests/nnx/sow/api/capture_test.py',
    'tests/nnx/sow/api/capture_composition_test.py',
    'tests/nnx/sow/transform/rules/rules_calls_test.py',
    'tests/nnx/capture_compat/parity_test.py',
    'tests/nnx/sow/docstrings_test.py',
)

# activations/: the export, its store and its reader.
ACTIVATIONS_TESTS = (
    'tests/nnx/sow/activations/export_test.py',
    'tests/nnx/sow/activations/export_errors_test.py',
    'tests/nnx/sow/activations/dataset_test.py',
    'tests/nnx/sow/activations/site_names_test.py',
    'tests/nnx/sow/activations/export_kill_test.py',
    'tests/nnx/sow/activations/multiprocess_export_test.py',
)

# The codemod: its deterministic tests of the decisions, fastest first
# (the projects run in fresh processes last; the fuzzer is not among them).
MIGRATE_TESTS = (
    'tests/migrate/migrate_sow_decide_test.py',
    'tests/migrate/migrate_sow_other_readers_test.py',
    'tests/migrate/migrate_sow_tool_test.py',
    'tests/migrate/migrate_sow_wrong_rewrites_test.py',
    'tests/migrate/migrate_sow_projects_test.py',
)

# discover and the tables it and Collected print.
TABLES_TESTS = (
    'tests/nnx/sow/api/discover_test.py',
    'tests/nnx/sow/api/render_test.py',
    'tests/nnx/sow/api/capture_repr_test.py',
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
    """The tests run against this mutant, by the layer of its module."""
    if self.path.startswith(COMPAT):
      return COMPAT_TESTS
    if self.path.startswith(MIGRATE):
      return MIGRATE_TESTS
    module = self.path[len(SOW):]
    if module.startswith('lift/'):
      return _LIFT_TESTS[module]  # a new lift/ module must be listed there
    if module == 'tap.py':  # the API of the taps
      return MODULES_TESTS
    if module in ('discover.py', 'render.py'):
      return TABLES_TESTS
    if module.startswith('activations/'):
      return ACTIVATIONS_TESTS
    return CORE_TESTS  # transform/, capture, plant, perturb


# The tests of each module of lift/.
_LIFT_TESTS = {
    'lift/graph_calls.py': GRAPH_CALLS_TESTS,
    'lift/write_back.py': GRAPH_CALLS_TESTS,
    'lift/graph_nodes.py': GRAPH_CALLS_TESTS,
    'lift/module_paths.py': MODULES_TESTS,
    'lift/taps.py': MODULES_TESTS,
    'lift/class_hooks.py': MODULES_TESTS,
}


def _m(id, file, old, new, breaks, equivalent=None):
  path = file if file.startswith((COMPAT, MIGRATE)) else SOW + file
  return Mutant(id, path, old, new, breaks, equivalent)


MUTANTS: tuple[Mutant, ...] = (
    # -- transform/primitive.py --------------------------------------------
    _m('primitive-jvp-drops-sow', 'transform/primitive.py',
       '  with binding_jvp_primal():\n    out = sow_p.bind(*primals, **params)',
       '  with binding_jvp_primal():\n    out = list(primals)',
       'a sow differentiated by jax.grad/jvp is still collected'),
    _m('primitive-jvp-primal-batched', 'transform/primitive.py',
       '  keep = keeps_unbatched(dims)',
       '  keep = False',
       'the primal of a sow under jax.jacfwd (jax.hessian) stays unbatched'),
    _m('primitive-batch-vmapped-count', 'transform/primitive.py',
       'out = sow_p.bind(*moved, *anchors, vmapped=vmapped + 1, **params)',
       'out = sow_p.bind(*moved, *anchors, vmapped=vmapped, **params)',
       'a loop axis goes after the vmap axes applied outside the loop'),
    _m('primitive-batch-no-broadcast', 'transform/primitive.py',
       '      jax.numpy.broadcast_to(leaf, (size, *jax.numpy.shape(leaf)))\n'
       '      if dim is None',
       '      leaf\n      if dim is None',
       'an unbatched value sown under vmap gets one entry per member'),
    _m('primitive-no-effect', 'transform/primitive.py',
       'sow_effects = _HARVEST_EFFECTS if harvesting.value else'
       ' jex_core.no_effects',
       'sow_effects = jex_core.no_effects',
       'a sow whose result is unused survives dead-code elimination'),
    _m('primitive-bool-name-part', 'transform/primitive.py',
       '  if isinstance(part, bool) or isinstance(part, np.bool_):\n'
       '    return None\n',
       '',
       'a bool is refused as a part of a sow name'),
    _m('primitive-numpy-int-name-part-kept', 'transform/primitive.py',
       '  if isinstance(part, np.integer):\n    return int(part)',
       '  if isinstance(part, np.integer):\n    return part',
       'a NumPy integer in a name becomes the int it holds'),
    _m('primitive-scalar-not-weak', 'transform/primitive.py',
       'return leaf if isinstance(leaf, jax.Array) else'
       ' jax.numpy.asarray(leaf)',
       'return leaf if isinstance(leaf, jax.Array) else jax.numpy.asarray(\n'
       '      np.asarray(leaf))',
       'a sown Python number stays weakly typed, as JAX converts it'),
    _m('primitive-cond-batch-no-refusal', 'transform/primitive.py',
       '        if branches is not None:\n'
       "          refuse_batched_cond(params['sow_name'], branches)",
       '        if False:\n'
       "          refuse_batched_cond(params['sow_name'], branches)",
       'capture(vmap(f)) refuses a cond with a batched index over sows'),
    _m('primitive-numpy-scalar-not-array', 'transform/primitive.py',
       '_ARRAY_TYPES = (jax.Array, np.ndarray, np.generic)',
       '_ARRAY_TYPES = (jax.Array, np.ndarray)',
       'NumPy scalars passed to capture(jax.jit(f)) are traced like jit'),
    _m('primitive-sow-keys-shallow', 'transform/primitive.py',
       '      keys.update(sow_keys(sub))',
       '      pass',
       'a name predicate selects sows nested in a jit body'),
    _m('primitive-is-array-unbounded', 'transform/primitive.py',
       '    if len(_IS_ARRAY) < _MAX_TYPES:',
       '    if True:',
       'the table of leaf types is bounded'),
    _m('primitive-mode-unchecked', 'transform/primitive.py',
       '  if mode not in MODES:',
       '  if mode is None:',
       "a sow mode other than 'append'/'clobber' is refused"),
    _m('primitive-transpose-zero', 'transform/primitive.py',
       '  del leaves, params\n  return list(cotangents)',
       '  del leaves, params\n'
       '  return [c if isinstance(c, ad.Zero) else jax.numpy.zeros_like(c)\n'
       '          for c in cotangents]',
       'gradients flow through a sow'),
    _m('primitive-custom-rules-unmarked', 'transform/primitive.py',
       "    if harvesting.value and 'subfuns' in params:",
       '    if False:',
       "a custom_vjp's backward rule sowing under jax.grad(jax.vmap) of a"
       ' cond whose index is batched is refused, not recorded for every'
       ' example'),
    _m('primitive-custom-rules-sows-unrefused', 'transform/primitive.py',
       '      rules = _IN_RULES_OF_BATCHED_COND.stack\n      if rules:',
       '      rules = _IN_RULES_OF_BATCHED_COND.stack\n      if False:',
       "a sow in a custom rule of a batched-index cond's branch is refused"
       ' when the rule runs'),
    # -- transform/_jax.py -------------------------------------------------
    _m('jax-any-cond-refused', 'transform/_jax.py',
       "      if local.get('index_dim') is not None and not"
       ' batching_branches:',
       '      if True:',
       'a batched cond whose index is not batched is still captured'),
    _m('jax-cond-batching-counts-as-evaluating', 'transform/_jax.py',
       '      batching_branches = evaluating and (',
       '      batching_branches = False and (',
       'a cond whose index is not batched, reusing the batched branches JAX'
       ' cached for one whose index was, still captures what its branches'
       ' sow when differentiated'),
    _m('jax-outermost-cond-only', 'transform/_jax.py',
       '        return local[\'branches\']\n    frame = frame.f_back',
       '        return local[\'branches\']\n      return None\n'
       '    frame = frame.f_back',
       'a sow in an inner cond whose index is not batched, inside a cond'
       ' whose index is, is refused'),
    # -- transform/names.py ------------------------------------------------
    _m('names-any-depth-takes-one', 'transform/names.py',
       'for i in range(len(parts) + 1))',
       'for i in range(1, len(parts) + 1))',
       "'**' matches no component too"),
    _m('names-ambiguity-unrefused', 'transform/names.py',
       'not k.wild and len(found) > 1:',
       'not k.wild and len(found) > 2:',
       "a spelling of two names ('a.b' and ('a', 'b')) is refused"),
    _m('names-glob-as-exact', 'transform/names.py',
       "  return ONE in pattern and _glob(pattern).fullmatch(part) is not None",
       "  return pattern == ONE",
       "a component 'm*' matches the components beginning with 'm'"),
    # -- transform/selection.py --------------------------------------------
    _m('selection-patterns-ignored', 'transform/selection.py',
       '    return any(pattern.matches(name) for pattern in self.patterns)',
       '    return False',
       "capture(f, names='layers.*.h') selects what the pattern matches"),
    _m('selection-nothing-selected-passes', 'transform/selection.py',
       '    if not selected:\n      return None',
       '    if not selected:\n      return []',
       'a tag that selects no sow is an error'),
    _m('selection-str-as-chars', 'transform/selection.py',
       '    return [names_lib.key(names, where=where)]',
       '    return [names_lib.key(n, where=where) for n in names]',
       "names='hidden' selects the name 'hidden', not its letters"),
    _m('selection-tag-ignored', 'transform/selection.py',
       "    if self.tag is not None and params['tag'] != self.tag:",
       "    if self.tag is None and params['tag'] != self.tag:",
       'capture(f, tag=...) selects only sows with that tag'),
    _m('selection-predicate-ignored', 'transform/selection.py',
       '    return self.answered(frozenset(filter(self.names, candidates)))',
       '    return self.answered(frozenset(candidates))',
       'a name predicate selects only the names it accepts'),
    _m('selection-zero-trip-superseded-append', 'transform/selection.py',
       "    return params['mode'] == 'append' and"
       ' self.selection.matches(params)',
       '    return self.selection.matches(params)',
       'a zero-trip scan gives each append site an empty stack, also one a'
       ' clobber supersedes per iteration'),
    # -- transform/request.py ----------------------------------------------
    _m('request-remove-ignored', 'transform/request.py',
       '        self.collect or self.remove or self.plants(params)',
       '        self.collect or self.plants(params)',
       'a capture around a custom_vjp takes its sows out of the re-bound'
       ' function'),
    _m('request-plant-needs-collect', 'transform/request.py',
       '        self.collect or self.remove or self.plants(params)',
       '        self.collect or self.remove',
       'plant handles sows though it collects nothing'),
    # -- transform/sites.py ------------------------------------------------
    _m('sites-loop-axis-first', 'transform/sites.py',
       '    at = self.outer_vmaps\n',
       '    at = 0\n',
       'a loop axis goes after the vmap axes applied outside the loop'),
    _m('sites-vmaps-any-transform', 'transform/sites.py',
       "      yield sum(1 for part in kept if _is(part, 'vmap'))",
       '      yield sum(1 for part in kept if isinstance(part, _jax.Transform))',
       'only vmaps (not jvp/transpose) count as outer axes'),
    _m('sites-seen-through', 'transform/sites.py',
       '    return dataclasses.replace(self, inner_vmaps=self.inner_vmaps +'
       ' vmaps)',
       '    return self',
       'vmaps on a call equation are inner to the scope holding it'),
    _m('sites-custom-lin-context-counted-twice', 'transform/sites.py',
       '        yield from readings(i + 1 + len(context), kept)',
       '        yield from readings(i + 1, kept)',
       "a perturb under vmap(grad) in a loop: the loop axis comes first"),
    _m('sites-checkpoint-copy-counted-twice', 'transform/sites.py',
       '          yield from readings(i + 1 + n + len(copy), kept + relative)',
       '          yield from readings(i + 1, kept)',
       'under vmap(grad(checkpoint)) each vmap counts once'),
    _m('sites-contradicted-count-not-refused', 'transform/sites.py',
       '    if not 0 <= outer <= self.vmapped:',
       '    if False:',
       'a vmap count the batching rule contradicts is refused'),
    _m('primitive-remat-sow-recorded-twice', 'transform/primitive.py',
       '  staged = eqn\n  if eqn.effects:',
       '  staged = eqn\n  if False:',
       'a sow under jax.checkpoint is recorded once, by the known program'),
    _m('sites-leafless-sow-loses-vmap-size', 'transform/primitive.py',
       "    params['sizes'] = (axis_data.size, *params.get('sizes', ()))",
       '    pass',
       'a leafless sow under vmap in a while_loop has a count per example'),
    _m('sites-ambiguous-stack-guessed', 'transform/sites.py',
       '      count != inner and count <= vmapped for count in',
       '      count != inner and count < 0 for count in',
       'a stack read as two counts of vmaps in a loop is refused, not'
       ' guessed'),
    _m('primitive-capture-alone-broadcasts', 'transform/primitive.py',
       '      not planting.value and all(dim is None for dim in dims))',
       '      False)',
       'a sow carried by a loop under jax.jacfwd: JAX needs it unbatched'),
    _m('sites-key-dtype-to-numpy', 'transform/sites.py',
       '  if jax.dtypes.issubdtype(dtype, jax.dtypes.extended):\n'
       '    return dtype\n',
       '',
       'a PRNG key is sown and planted'),
    _m('sites-params-without-meta', 'transform/sites.py',
       "    return {'sow_name': self.name, 'tag': self.tag, 'meta': self.meta}",
       "    return {'sow_name': self.name, 'tag': self.tag}",
       "an eager nnx.capture plants init's perturbations"),
    _m('sites-registered-dirs-not-skipped', 'transform/sites.py',
       '  if directory not in _LIBRARY_DIRS:\n'
       '    _LIBRARY_DIRS.append(directory)',
       '  pass',
       'an error names the user\'s line, not a frame of the layers above'
       ' transform/ (Module.sow in capture_compat, perturb, the taps)'),
    # -- transform/scope.py ------------------------------------------------
    _m('scope-plant-clobber', 'transform/scope.py',
       "    if site.mode == 'clobber':\n      raise ValueError(",
       "    if site.mode == 'never':\n      raise ValueError(",
       "planting a sow with mode='clobber' is refused"),
    _m('scope-zero-trip-first-value', 'transform/scope.py',
       '    for record in reversed(self._records):',
       '    for record in self._records:',
       'a zero-trip while loop keeps the last value sown before it'),
    _m('scope-inline-vmaps-lost', 'transform/scope.py',
       '    vmaps = vmaps_of(eqn)\n    self.inline_vmaps += vmaps',
       '    vmaps = 0\n    self.inline_vmaps += vmaps',
       'vmaps on a closed_call count for the sows inside its body'),
    _m('scope-clobber-keeps-superseded', 'transform/scope.py',
       "    if site.mode == 'clobber' and name in self._first:",
       "    if site.mode == 'clobber' and False:",
       'an eager capture frees the values a clobber supersedes'),
    # -- transform/planting.py ---------------------------------------------
    _m('planting-zero-trip-name-unseen', 'transform/planting.py',
       '    self.seen = True\n    if count is None:',
       '    self.seen = self.seen or bool(count)\n    if count is None:',
       'a function plant of a name sown only in an empty loop is accepted'),
    _m('planting-value-dtype-unchecked', 'transform/planting.py',
       '    if (got_shape, got_dtype) != (tuple(shape), dtype):',
       '    if got_shape != tuple(shape):',
       'a planted value of the wrong dtype is refused'),
    _m('planting-value-tree-unchecked', 'transform/planting.py',
       '  if got_tree != tree:',
       '  if got_tree.num_leaves != tree.num_leaves:',
       'a planted value of another structure is refused'),
    _m('planting-fn-never-computed', 'transform/planting.py',
       '    if site.name not in self.counters:\n      return None',
       '    return None',
       'a name planted by a function takes what the function computes'),
    _m('planting-index-not-counted', 'transform/planting.py',
       '    self.offset += 1\n',
       '',
       'fn sees the occurrence index of each execution of its name'),
    _m('planting-fn-not-vmapped', 'transform/planting.py',
       '    for _ in range(n):\n      mapped = jax.vmap(mapped)\n',
       '',
       'fn sees one example of a sow inside a vmap in f'),
    _m('planting-fn-value-unchecked', 'transform/planting.py',
       '      return check_value(\n          new, site.tree, example,',
       '      return jax.tree_util.tree_leaves(new)\n'
       '      return check_value(\n          new, site.tree, example,',
       'a fn returning another shape or dtype raises naming the site'),
    _m('planting-hoist-nothing', 'transform/planting.py',
       '  is_tracer = [isinstance(c, jax.core.Tracer) for c in consts]',
       '  is_tracer = [False for c in consts]',
       'fn closing over a jit argument works inside a sub-jaxpr'),
    _m('planting-value-shape-unchecked', 'transform/planting.py',
       '    if (got_shape, got_dtype) != (tuple(shape), dtype):',
       '    if got_dtype != dtype:',
       'a planted value (or a planted function\'s result) of the wrong shape'
       ' is refused'),
    _m('planting-fn-message-as-entry', 'transform/planting.py',
       "          where=f'plant: the function planted at {site.name!r}',\n"
       '          returned=True,',
       "          where=f'plant: the function planted at {site.name!r}',",
       'a planted function returning a wrong value is told what it must'
       ' return'),
    # -- transform/interpreter.py ------------------------------------------
    _m('interpreter-plant-collects-every-sow', 'transform/interpreter.py',
       '  selection: selection_lib.SiteFilter = selection_lib.Both(\n'
       '      request.selection, request.planted)',
       '  selection: selection_lib.SiteFilter = request.selection',
       'plant works beside an append in a while_loop in a sub-program'),
    _m('interpreter-planter-wrong-site', 'transform/planting.py',
       '        self.leaves[: site.num_leaves],\n'
       '        self.leaves[site.num_leaves :],',
       '        self.leaves[len(self.leaves) - site.num_leaves :],\n'
       '        self.leaves[: len(self.leaves) - site.num_leaves],',
       'planted values reach their own sites inside one jit body'),
    _m('interpreter-transform-uncached', 'transform/interpreter.py',
       '    return _cached_transform(closed, request)',
       '    return _transform(closed, request, None)',
       'an eager capture(jax.jit(f)) compiles once'),
    _m('interpreter-sow-literal', 'transform/interpreter.py',
       '    if eqn.primitive is primitive.sow_p:  # an identity: it returns'
       ' literals\n      invals = [as_array(v) for v in invals]',
       '    pass',
       'a sown constant is returned as a JAX array'),
    _m('interpreter-plant-unread-allowed', 'transform/interpreter.py',
       '  if not request.refuse_unread or handle_sow not in rules:',
       '  if True:',
       'plant refuses a sow whose result is unused'),
    _m('interpreter-no-refusal', 'transform/interpreter.py',
       '      return RULES.get(prim, _refuse)',
       '      return RULES.get(prim)',
       'a higher-order primitive without a rule is refused, naming it'),
    _m('interpreter-strip-kept', 'transform/interpreter.py',
       '  if rule is None and strip and primitive.sow_effect in eqn.effects:',
       '  if False:',
       'outside a capture, no sow effect survives (plain jit fast path)'),
    _m('interpreter-rewrite-while-planting', 'transform/interpreter.py',
       '  if request.planted is not None or jaxpr.is_high:',
       '  if jaxpr.is_high:',
       'a planting request (compat init) is planted under jit too'),
    _m('interpreter-staged-leaves-shifted', 'transform/interpreter.py',
       '  num_outs = len(outs) - staged.num_leaves\n',
       '  num_outs = len(outs) - staged.num_leaves - 1\n',
       'the taken values are the extra outputs, not f\'s own'),
    _m('interpreter-rewrite-despite-rule', 'transform/interpreter.py',
       '    elif rule is handle_sow or rule is drop_sow:',
       '    elif rule is not None:',
       'a jit body holding a higher-order equation with sows (a rule) is not'
       ' rewritten as one call'),
    _m('interpreter-rewrite-records-dropped', 'transform/interpreter.py',
       '      sows.append(rule is handle_sow)',
       '      sows.append(True)',
       'a sow a request drops is not recorded by the one-call rewrite'),
    _m('interpreter-staged-marked-ignored', 'transform/interpreter.py',
       '  if staged.marked:\n',
       '  if False:\n',
       'sows taken at staging are recorded with the sow equations of the'
       ' same jaxpr, in program order'),
    # -- transform/rewrite.py ----------------------------------------------
    _m('rewrite-order', 'transform/rewrite.py',
       '  outvars = [read(v) for v in jaxpr.outvars] + sown',
       '  outvars = [read(v) for v in jaxpr.outvars] + sown[::-1]',
       'values of several sows of one jit body go to their own names'),
    _m('rewrite-keeps-readers', 'transform/rewrite.py',
       '    elif substitute and reads_removed(eqn):',
       '    elif False:',
       'an equation reading a removed sow reads its input instead'),
    # -- transform/staged_sows.py ------------------------------------------
    _m('staged-sows-order-ignored', 'transform/staged_sows.py',
       '      while pending and pending[-1][0] <= marked:',
       '      while False:',
       'sows taken at staging keep program order with sow equations'),
    _m('staged-sows-takes-unselected', 'transform/staged_sows.py',
       '        and harvest.request.handles(params)\n',
       '',
       'a sow the capture does not select stays for an enclosing one'),
    _m('staged-sows-any-trace', 'transform/staged_sows.py',
       '        harvest.trace is trace\n',
       '        True\n',
       'a sow inside a scan body or jit is not taken as a value of f'),
    _m('staged-sows-takes-clobbers', 'transform/staged_sows.py',
       "        and params['mode'] == 'append'\n",
       '',
       'an eager capture frees the values a clobber supersedes',
       equivalent='an eager capture no longer stages f'
       ' (flax.nnx.sow.transform.eager), so sows are taken at staging time'
       ' only under a trace, where a taken clobber is one more output of the'
       ' staged program, like the ones the one-call rewrite returns, which'
       ' XLA drops when nothing reads it; the records, and so the values, are'
       ' the same (checked with jax.make_jaxpr and jax.jit of a chain of'
       ' clobbers).'),
    # -- transform/deferred.py ---------------------------------------------
    _m('deferred-one-name-for-all', 'transform/deferred.py',
       '  return _renamed(jaxpr, resolutions)',
       '  return _renamed(jaxpr, (resolutions[0],) * len(resolutions))',
       'each deferred sow of a program is named from its own anchors'),
    _m('deferred-cond-index-operand-kept', 'transform/deferred.py',
       "    return [('branches', i, branch, whole[1:])",
       "    return [('branches', i, branch, whole)",
       "a cond branch's inputs are its operands after the index"),
    _m('deferred-drop-keeps-sow', 'transform/deferred.py',
       '      if resolution is DROP:\n        for out, into',
       '      if False:\n        for out, into',
       'a dropped deferred sow passes its values through, unsown'),
    _m('deferred-unresolved-accepted', 'transform/request.py',
       '    if deferred.is_deferred(params):\n'
       '      # Every running capture',
       '    if False:\n'
       '      # Every running capture',
       'a deferred sow no capture could name is refused, never collected'),
    # -- transform/eager.py ------------------------------------------------
    _m('eager-sow-not-recorded', 'transform/eager.py',
       '    out = interpreter.handle_site(self.scope, site, leaves)',
       '    out = leaves',
       'an eager capture collects the sows bound in f itself'),
    _m('eager-unhandled-sow-dropped', 'transform/eager.py',
       "      self.scope.passed.add((params['sow_name'], params['tag']))\n"
       '      return self._forward(primitive.sow_p, args, params)',
       "      self.scope.passed.add((params['sow_name'], params['tag']))\n"
       '      return list(args)',
       'an enclosing capture sees the sows an inner eager capture leaves'),
    _m('eager-higher-order-forwarded', 'transform/eager.py',
       '      rule = interpreter.higher_order_rule(prim, params,',
       '      rule = None and interpreter.higher_order_rule(prim, params,',
       'the sows inside a jit (scan, cond...) called eagerly are collected'),
    _m('eager-fast-path-for-sowing-jits', 'transform/eager.py',
       '  fast = not tracking_reads.value and not primitive.sow_keys('
       'closed.jaxpr)',
       '  fast = not tracking_reads.value',
       'a jit whose program holds a sow is bound on every eager call'),
    _m('eager-fast-path-while-tracking-reads', 'transform/eager.py',
       '  fast = not tracking_reads.value and not',
       '  fast = True and not',
       'a planted value read only by a jit counts as read'),
    _m('eager-fast-path-recorded-by-plant-functions', 'transform/eager.py',
       '  return _jax.AS_JAX_DOES if fast else _jax.WITHOUT_FAST_PATH',
       '  return _jax.AS_JAX_DOES',
       'a jit a plant function calls records no fast path for later captures'),
    _m('eager-fast-path-off', 'transform/eager.py',
       '_jax.set_jit_dispatch(_dispatch, (EagerTrace,))',
       'del _dispatch',
       'a jit without sows takes the compiled path in an eager capture'),
    _m('eager-predicate-not-asked-inside', 'transform/eager.py',
       '        self._meet([key for sub in core.jaxprs_in_params(params)',
       '        self._meet([key for sub in core.jaxprs_in_params({})',
       'a name predicate selects the sows inside a jit of an eager call'),
    _m('eager-shard-map-in-a-scope-of-its-own', 'transform/eager.py',
       '          closed.jaxpr, closed.consts, list(args), self.scope)',
       '          closed.jaxpr, closed.consts, list(args),'
       ' Scope(self.scope.request))',
       'an eager shard_map gives its per-shard values'),
    _m('eager-custom-jvp-unseen', 'transform/eager.py',
       '    del prim, jvp, symbolic_zeros  # evaluated, not differentiated\n'
       '    self._read(tracers)\n'
       '    with core.set_current_trace(self):',
       '    del prim, jvp, symbolic_zeros  # evaluated, not differentiated\n'
       '    self._read(tracers)\n'
       '    with core.set_current_trace(self.parent):',
       'the sows of a custom_jvp function called eagerly are collected'),
    _m('eager-own-trace-state', 'transform/eager.py',
       '    self._weakref = parent._weakref\n',
       '',
       'an eager capture updates the Variables of its modules in place'),
    _m('eager-never', 'transform/eager.py',
       '  return _jax.trace_ctx.is_top_level() or (',
       '  return False and (',
       'an eager capture runs on concrete values, as a direct call'),
    # -- transform/__init__.py ---------------------------------------------
    _m('transform-rules-unregistered', 'transform/__init__.py',
       'from flax.nnx.sow.transform import rules as rules\n',
       '',
       'the rules are registered wherever a jaxpr is evaluated (a scan, a'
       ' jit, a cond holding sows is captured, not refused)'),
    # -- transform/rules/support.py ----------------------------------------
    _m('rules-finish-call-vmaps-lost', 'transform/rules/support.py',
       '    scope.record(scope.here(site, eqn), leaves)',
       '    scope.record(scope.here(site), leaves)',
       'vmaps on a call or cond equation are inner to the scope holding it'
       ' (a loop around puts its axis after the others)'),
    # -- transform/rules/calls.py ------------------------------------------
    _m('rules-jit-donation-dropped', 'transform/rules/calls.py',
       "      donated_invars=(*p['donated_invars'], *[False] * n_in),",
       "      donated_invars=(False,) * (len(p['donated_invars']) + n_in),",
       'a re-bound jit keeps donating the arguments it donated'),
    _m('rules-remat-policy-dropped', 'transform/rules/calls.py',
       "      policy=p['policy'],",
       '      policy=None,',
       'a re-bound checkpoint keeps its rematerialization policy'),
    _m('rules-remat-prevent-cse', 'transform/rules/calls.py',
       "  prevent_cse = p['prevent_cse']\n",
       '  prevent_cse = True\n',
       'a re-bound checkpoint keeps its prevent_cse'),
    # -- transform/rules/custom_derivatives.py -----------------------------
    _m('rules-custom-plant-ignored', 'transform/rules/custom_derivatives.py',
       '    if interpreter.plants_into(body, scope.request):\n'
       '      return calls.inline(scope, eqn, invals, body_param)',
       '    pass',
       'a value planted inside a custom_vjp/custom_jvp function is used'),
    _m('rules-derivative-rule-sows', 'transform/rules/custom_derivatives.py',
       '    if extra:\n      raise NotImplementedError(',
       '    if False:\n      raise NotImplementedError(',
       'a derivative rule sowing a name its function does not is refused'),
    _m('rules-custom-unselected-stripped',
       'transform/rules/custom_derivatives.py',
       '    stripped = interpreter.transform(body, removing).jaxpr',
       '    stripped = interpreter.transform(\n'
       '        body, dataclasses.replace(removing, rebind_unhandled=False)\n'
       '    ).jaxpr',
       'a sow an inner capture around a custom_vjp leaves can be planted'),
    _m('rules-custom-unselected-twice', 'transform/rules/custom_derivatives.py',
       '  dropping = dataclasses.replace(scope.request,'
       ' rebind_unhandled=False)',
       '  dropping = scope.request',
       'an outer capture sees a sow a custom_vjp capture leaves once'),
    # -- transform/rules/loops.py ------------------------------------------
    _m('rules-scan-loop-axis-leading', 'transform/rules/loops.py',
       '          jnp.moveaxis(next(appended), 0, site.outer_vmaps)',
       '          next(appended)',
       'inside vmap, a scanned value has its loop axis after the vmap axes'),
    _m('rules-scan-zero-length-clobber', 'transform/rules/loops.py',
       '    _record_zero_trip(scope, eqn)\n    return [*carry, *ys]',
       '    _record_zero_trip(scope, eqn)',
       'a zero-length scan records nothing for clobbered sows'),
    _m('rules-scan-append-order', 'transform/rules/loops.py',
       "  append_out = [v for s, vs in per_site if s.mode == 'append' for v in"
       ' vs]',
       "  append_out = [v for s, vs in per_site if s.mode == 'append' for v in"
       ' vs][::-1]',
       'values of several appended sows of one scan body keep their names'),
    _m('rules-while-cond-sows', 'transform/rules/loops.py',
       "  if interpreter.contains(p['cond_jaxpr'].jaxpr, scope.request):",
       '  if False:',
       'a sow in a while condition is refused'),
    _m('rules-while-prior-unchecked', 'transform/rules/loops.py',
       '  if prior is None or (prior[0].tree, prior[0].avals) != (site.tree,\n'
       '                                                         site.avals):',
       '  if prior is None:',
       'a prior value of another shape is refused for a zero-trip loop'),
    _m('rules-no-while', 'transform/rules/loops.py',
       '@interpreter.register(prims.while_p)\n',
       '',
       'a while loop with clobbered sows is captured'),
    _m('rules-scan-index-not-carried', 'transform/rules/loops.py',
       '      outvars=[*carry_out, *ends_out, *clobber_out, *ys_out,'
       ' *append_out],',
       '      outvars=[*carry_out, *starts_in, *clobber_out, *ys_out,'
       ' *append_out],',
       'the index inside a scan advances each iteration'),
    _m('rules-scan-counts-one-iteration', 'transform/rules/loops.py',
       '  t.fn_finish(scope, ends, times=length)',
       '  t.fn_finish(scope, ends, times=1)',
       'the index after a scan counts every iteration'),
    _m('rules-while-static-count', 'transform/rules/loops.py',
       '  t.fn_finish(scope, ends, None)  # run-time trip count',
       '  t.fn_finish(scope, ends, 1)',
       'the index after a while_loop counts its trips'),
    _m('rules-while-past-the-bound-overwrites', 'transform/rules/loops.py',
       '        leaf = jnp.where(index < bound, leaf, kept)',
       '        leaf = jnp.where(True, leaf, kept)',
       'steps past max_steps leave the kept steps as they were'),
    _m('rules-while-step-of-the-slowest-example', 'transform/rules/loops.py',
       '    index = jnp.max(count) if count.ndim else count',
       '    index = jnp.min(count) if count.ndim else count',
       'under a batched predicate each example writes its own steps'),
    _m('rules-while-planted-steps-unchecked', 'transform/rules/loops.py',
       '    short = ran > np.asarray(held)',
       '    short = ran > np.asarray(held) + 1',
       'a while_loop longer than the planted steps raises'),
    _m('planting-entry-ignores-used', 'transform/planting.py',
       '    return entries[index] if index < len(entries) else None',
       '    return entries[0] if index < len(entries) else None',
       'the while rule reads the entry take checks next'),
    _m('rules-while-overflow-unchecked', 'transform/rules/loops.py',
       "  if any(b is not None for b in bounds) and (\n"
       "      scope.request.bounds.on_overflow == 'error'):",
       "  if False:",
       'a loop that runs more steps than max_steps keeps is an error'),
    # -- transform/runtime_checks.py ---------------------------------------
    _m('runtime-checks-not-translated', 'transform/runtime_checks.py',
       '    return _failures.pop(int(numbers[0]), None)',
       '    return None',
       "a check failing under jax.jit raises the package's ValueError"),
    # -- transform/steps.py ------------------------------------------------
    _m('steps-mask-inclusive', 'transform/steps.py',
       '    return steps < jnp.expand_dims(count, -1)',
       '    return steps <= jnp.expand_dims(count, -1)',
       'Steps.mask marks the steps that ran, not one more'),
    _m('steps-bound-zero-accepted', 'transform/steps.py',
       '  ) or bound < 1:',
       '  ) or bound < 0:',
       'max_steps=0 is refused'),
    # -- transform/rules/cond.py -------------------------------------------
    _m('rules-cond-unchecked', 'transform/rules/cond.py',
       '  _check_branches_agree(eqn, branches)\n',
       '',
       'cond branches that sow differently are refused, listing each'),
    _m('rules-cond-last-branch', 'transform/rules/cond.py',
       '      branches[0].jaxpr, branches[0].sites,'
       ' branches[0].planted_sites,',
       '      branches[0].jaxpr, branches[-1].sites,'
       ' branches[0].planted_sites,',
       'none',
       equivalent='_check_branches_agree has made every branch sow the same'
       ' sites, so branch 0 and the last describe the same outputs'),
    _m('rules-cond-missing-name-counted', 'transform/rules/cond.py',
       '        dict(zip(b.fn_names, b.fn_counts)).get(name, 0) for b in'
       ' branches',
       '        dict(zip(b.fn_names, b.fn_counts)).get(name, 1) for b in'
       ' branches',
       'a cond branch that does not sow a name leaves its index unchanged'),
    # -- transform/rules/shard_map.py --------------------------------------
    _m('rules-shard-map-axes-reversed', 'transform/rules/shard_map.py',
       "  axes = tuple(a for a in mesh.axis_names if a in p[manual])",
       "  axes = tuple(a for a in mesh.axis_names if a in p[manual])[::-1]",
       'per-shard values are stacked along the mesh axes in mesh order'),
    # -- lift/graph_nodes.py -----------------------------------------------
    _m('graph-nodes-holds-nothing', 'lift/graph_nodes.py',
       '  return any(\n      is_graph_node(leaf)',
       '  return False and any(\n      is_graph_node(leaf)',
       'a module in an argument is found (named by its path), and'
       ' capture(jax.jit(f)) with a name predicate sees its Module.sow'
       ' sites'),
    _m('graph-nodes-traced-refs-not-nodes', 'lift/graph_nodes.py',
       '      or type(jax.typeof(leaf)) is jax.core.ShapedArray\n',
       '      or True\n',
       'a traced array reference is a graph node, as graphlib says'),
    # -- lift/graph_calls.py -----------------------------------------------
    _m('graph-calls-hijax-traced', 'lift/graph_calls.py',
       '    self.traced_graphdef = _without_hijax(self.graphdef)',
       '    self.traced_graphdef = self.graphdef',
       'Hijax Variables are traced as ordinary copies'),
    _m('graph-calls-write-unchanged', 'lift/graph_calls.py',
       '        if after is not before:\n'
       '          outcome.updates.append(',
       '        if True:\n          outcome.updates.append(',
       'a call that changes nothing writes nothing to the caller'),
    _m('graph-calls-graph-mode-ignored', 'lift/graph_calls.py',
       '    self.graph = graphlib.set_graph_mode.current_value()',
       '    self.graph = True',
       'capture splits graph nodes in the current graph mode, as nnx.jit'),
    _m('graph-calls-refs-not-traced', 'lift/graph_calls.py',
       '  return primitive.is_array(leaf) or variablelib.is_array_ref(leaf)',
       '  return primitive.is_array(leaf)',
       'a Variable holding an array reference is updated by reference',
       equivalent='a reference left out of the traced inputs is closed over'
       ' by the trace instead: the jaxpr then holds the same reference object'
       ' as a constant and reads and writes it alike, and a trace with'
       ' constants is never reused by the compat cache; checked eagerly, in'
       ' jax.jit(capture(model)) and through nnx.capture.'),
    _m('graph-calls-staged-origins-dropped', 'lift/graph_calls.py',
       '      origins[:] = module_paths.release(started, input_values)',
       '      module_paths.release(started, input_values)',
       'a Module.sow in nnx.jit inside jax.jit(capture(f)) is named'),
    _m('paths-no-functional-frame', 'lift/graph_calls.py',
       '      if self.paths:\n        out = _call_in_frame(',
       '      if False:\n        out = _call_in_frame(',
       'Module.sow in a functional capture is collected by module path'),
    # -- lift/write_back.py ------------------------------------------------
    _m('write-back-innermost-frozen', 'lift/write_back.py',
       '  while depth > 1 and _is_immutable_node(chain[depth - 1]):\n'
       '    depth -= 1\n',
       '',
       'a leaf in nested immutable pytrees is written back'),
    # -- lift/module_paths.py ----------------------------------------------
    _m('paths-variable-index-not-refreshed', 'lift/module_paths.py',
       '    if found is None and value is not None:\n'
       '      self._index_variables()',
       '    if False:\n'
       '      self._index_variables()',
       'a Variable given a new value during the call is found by it'),
    _m('paths-foreign-tracer-not-followed', 'lift/module_paths.py',
       '      underlying = _jax.traced_value(value)',
       '      underlying = None',
       'a Module.sow in a custom_vjp forward under nnx.grad is named'),
    _m('compat-name-order', 'lift/module_paths.py',
       '  for part in (*path, name):',
       '  for part in (name, *path):',
       "a Module.sow below the root is named (*path, name) for capture"),
    _m('compat-outermost-frame', 'lift/module_paths.py',
       '  for frame in reversed(FRAMES.stack if frames is None else frames):',
       '  for frame in (FRAMES.stack if frames is None else frames):',
       'a sow goes to the innermost capture holding its module'),
    _m('paths-anchors-not-agreeing', 'lift/module_paths.py',
       '      found = candidates if found is None else found & candidates',
       '      found = candidates',
       'a Module.sow reading Variables of two modules is refused'),
    _m('paths-argument-prefix-dropped', 'lift/module_paths.py',
       '    prefix = () if node is None and i == 0 else (i,)',
       '    prefix = ()',
       'a module in another positional argument is named from its position'),
    _m('paths-keyword-prefix-dropped', 'lift/module_paths.py',
       '    found.append(((name,), arg))',
       '    found.append(((), arg))',
       'a module in a keyword argument is named from the keyword'),
    _m('paths-closure-not-refused', 'lift/module_paths.py',
       '  if innermost_functional() is None:\n    return\n  raise',
       '  if True:\n    return\n  raise',
       'Module.sow on a module in a closure of a functional capture is'
       ' refused'),
    _m('paths-fresh-functional-id', 'lift/module_paths.py',
       '          threading.get_ident(), -1 - sum(f.functional for f in'
       ' FRAMES.stack)',
       '          threading.get_ident(), -next(_COMPAT_IDS)',
       'an nnx.jit inside a functional capture is traced once across calls'),
    _m('paths-functional-defers-to-outer', 'lift/module_paths.py',
       '    if frame.functional:\n      return fallback or (frame, path, True)',
       '    if frame.functional:\n      continue',
       'a functional capture collects the Module.sow sites of its modules'),
    # -- lift/taps.py ------------------------------------------------------
    _m('taps-negative-index-off-by-one', 'lift/taps.py',
       '    ok = len(ints) >= -head and ints[head] == step',
       '    ok = len(ints) > -head and ints[head + 1] == step',
       "('blocks', -1) taps the last block"),
    _m('taps-container-tapped-silently', 'lift/taps.py',
       '    if not tapped:\n',
       '    if not hits:\n',
       "('blocks',) on an nnx.List is an error, not nothing tapped"),
    _m('taps-argument-not-sown', 'lift/taps.py',
       '      args[which] = sown(args[which])',
       '      args[which] = args[which]',
       'tap(inputs=0) sows the first positional argument'),
    _m('taps-mode-dropped', 'lift/taps.py',
       '      primitive.sow(view, name=name, tag=tag, mode=mode)',
       '      primitive.sow(view, name=name, tag=tag)',
       "tap(mode='clobber') taps inside a while_loop"),
    _m('taps-copies-not-tapped', 'lift/taps.py',
       '  return [spec for frame in module_paths.FRAMES.stack for spec in'
       ' frame.taps',
       '  return [spec for frame in () for spec in frame.taps',
       'a tapped module copied by nnx.vmap/nnx.scan/nnx.jit is tapped'),
    _m('taps-inputs-not-replaced', 'lift/taps.py',
       '      args, kwargs = _sow_arrays(\n',
       '      _ = _sow_arrays(\n',
       'a value planted into a tap\'s inputs is the call\'s input'),
    _m('taps-output-not-replaced', 'lift/taps.py',
       '        result = _sow_arrays(result, name=output_name, tag=tag,'
       ' mode=mode)',
       '        _ = _sow_arrays(result, name=output_name, tag=tag, mode=mode)',
       "a value planted into a tap's output is the call's result"),
    _m('taps-output-item-not-replaced', 'lift/taps.py',
       '  items[which] = sown\n',
       '',
       "a value planted into a tap's output item is that item of the result"),
    _m('taps-output-item-past-end', 'lift/taps.py',
       '    if not -len(result) <= which < len(result):',
       '    if False:',
       'an output item past the end is refused, naming the count'),
    _m('taps-wildcard-any-length', 'lift/taps.py',
       '  if not pattern:\n    return not path',
       '  if not pattern:\n    return True',
       'a pattern matches paths of its own length only'),
    _m('taps-unmatched-pattern-accepted', 'lift/taps.py',
       '    if not hits:\n',
       '    if False:\n',
       'a pattern matching no module is refused'),
    _m('paths-legacy-sow-allowed', 'lift/taps.py',
       '  if frame.functional and module_paths.legacy_sow_methods():',
       '  if False:',
       "Flax's own Module.sow in a functional capture raises, naming install"),
    _m('paths-staged-call-reuses-traces', 'lift/taps.py',
       '    with module_paths.staging() if own_traces else'
       ' contextlib.nullcontext():',
       '    with contextlib.nullcontext():',
       'a stateless module traced in an eager call is named when staged'),
    _m('paths-walk-registry-not-followed', 'lift/module_paths.py',
       '  if sizes != _REGISTRIES:',
       '  if not _REGISTRIES:',
       'a type registered as a pytree after a walk is walked into'),
    _m('taps-hook-taps-subclass-instances', 'lift/taps.py',
       '    if type(self) is not cls or not module_paths.FRAMES.stack:',
       '    if not module_paths.FRAMES.stack:',
       'a super() call into a tapped base class is not sown again'),
    _m('taps-not-in-jit-key', 'lift/taps.py',
       '      tuple(spec.key() for frame in frames for spec in frame.taps)'
       ' or None)',
       '      None)',
       'a jit traced before a tap traces again under it'),
    _m('taps-unrelated-instance-tapped', 'lift/taps.py',
       '  if not module_paths.may_be_a_copy(module):\n    return []',
       '  if False:\n    return []',
       'another instance of a tapped class, closed over, is left alone'),
    _m('taps-deferred-by-ended-taps', 'lift/taps.py',
       '      specs = [s for s in self.specs\n',
       '      specs = [s for s in frame.taps\n',
       'a staged tap of an nnx.jit copy is named after its taps ended'),
    _m('hooks-released-by-the-first-call', 'lift/class_hooks.py',
       '      if hook.calls:\n        continue',
       '      if False:\n        continue',
       'a hook two calls hold stays until the last ends'),
    _m('hooks-added-attribute-kept', 'lift/class_hooks.py',
       '      if hook.own is _ABSENT:\n        type.__delattr__(cls, name)',
       '      if hook.own is _ABSENT:\n        pass',
       'a hook on an inherited method leaves no attribute on the class'),
    _m('hooks-own-attribute-not-restored', 'lift/class_hooks.py',
       '        type.__setattr__(cls, name, hook.own)',
       '        pass',
       "the class's own method is back after the call"),
    # -- capture.py --------------------------------------------------------
    _m('capture-unmatched-unchecked', 'capture.py',
       '  if missing == []:\n    return',
       '  if not missing:\n    return',
       'a selection of nothing by tag is an error'),
    _m('collected-spelling-unread', 'capture.py',
       '    return super().__getitem__(self._name(key))',
       '    raise KeyError(key)',
       "collected['layers.1.h'] reads ('layers', 1, 'h')"),
    _m('capture-runner-ignores-statics', 'capture.py',
       '        static_argnums=info.static_argnums,\n'
       '        static_argnames=info.static_argnames,',
       '        static_argnums=(),\n        static_argnames=(),',
       "capture(jax.jit(f)) keeps f's static arguments static"),
    _m('capture-runner-ignores-selection', 'capture.py',
       '        runner = self.runners[key] = self._make_runner(key[0], key[1])',
       '        runner = self.runners[key] = next(\n'
       '            iter(self.runners.values()), None\n'
       '        ) or self._make_runner(key[0], key[1])',
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
    _m('capture-runner-ignores-module-sow', 'capture.py',
       '    key = (selection, bounds, module_paths.sow_methods())',
       '    key = (selection, bounds, None)',
       'capture(jax.jit(f)) sees Module.sow sites after install'),
    _m('capture-runner-ignores-bounds', 'capture.py',
       '    key = (selection, bounds, module_paths.sow_methods())',
       '    key = (selection, next(iter(self.runners), (0, bounds))[1],\n'
       '           module_paths.sow_methods())',
       'capture(jax.jit(f), max_steps=...) keeps the steps it asks for'),
    _m('capture-unused-bounds-silent', 'capture.py',
       '  if bounds is not None and bounds.by_name:',
       '  if False:',
       'a max_steps name that bounds no loop is an error'),
    # -- capture_grads.py --------------------------------------------------
    _m('capture-grads-backward-order', 'capture_grads.py',
       '      ordered[name] = tuple(reversed(got))',
       '      ordered[name] = tuple(got)',
       'the gradients of a name sown per layer are in the order of the layers'),
    _m('taps-item-one-is-the-whole-output', 'lift/taps.py',
       '    return (self.patterns, self.methods, _typed(self.inputs),\n'
       '            _typed(self.outputs), self.tag, self.mode, self.paths,'
       ' on_output)',
       '    return (self.patterns, self.methods, self.inputs,\n'
       '            self.outputs, self.tag, self.mode, self.paths, on_output)',
       'outputs=1 and outputs=True do not share a trace of an inner jit'),
    _m('discover-step-bytes-with-the-step-axis', 'discover.py',
       '    return jax.ShapeDtypeStruct(shape[:axis] + shape[axis + 1:],'
       ' leaf.dtype)',
       '    return jax.ShapeDtypeStruct(shape, leaf.dtype)',
       'the bytes per step of a while_loop site are those of one step'),
    _m('capture-grads-zero-unmoved', 'capture_grads.py',
       '        moved = jax.tree.map(lambda v: v + zero.astype(v.dtype), value)',
       '        moved = value',
       'the gradient of a site is taken (its value depends on the zero)'),
    # -- activations/ ------------------------------------------------------
    _m('activations-site-always-with-entry', 'activations/export.py',
       '          alone = len(entries) == 1 and len(flat) == 1 and not leaf',
       '          alone = False',
       'a name sown once as one array is stored under the name itself'),
    _m('activations-read-a-pattern', 'activations/dataset.py',
       '    if isinstance(key, names_lib.Pattern) and key.wild:',
       '    if False:',
       'Dataset.read refuses a pattern, which selects a set of sites'),
    _m('activations-replicas-written-twice', 'activations/writer.py',
       '    if shard.replica_id != 0:\n      continue\n',
       '',
       'a replicated shard is written once, by the process of replica 0'),
    _m('activations-commit-ahead', 'activations/writer.py',
       '    self._store.commit(self._process, batch + 1)',
       '    self._store.commit(self._process, batch + 2)',
       'a process commits the batches it has written, no more'),
    _m('activations-queue-unbounded', 'activations/writer.py',
       '    self._queue: queue.Queue = queue.Queue(maxsize=in_flight)',
       '    self._queue: queue.Queue = queue.Queue()',
       'host memory is bounded by in_flight batches, not the dataset'),
    _m('activations-complete-of-any-process', 'activations/store.py',
       '    return min(self.committed(p) for p in present)',
       '    return max(self.committed(p) for p in present)',
       'a batch is complete once every process has committed it'),
    _m('activations-trim-one-more', 'activations/store.py',
       '            exclusive_max=[self.rows(a, batches), *a.shape],\n'
       '            resize_metadata_only=True)',
       '            exclusive_max=[self.rows(a, batches + 1), *a.shape],\n'
       '            resize_metadata_only=True)',
       'a finished store is trimmed to its complete batches'),
    _m('activations-no-expected-processes', 'activations/export.py',
       '    target.expect(processes)\n',
       '',
       'no batch is complete before every process of the run committed it'),
    _m('activations-resume-from-start', 'activations/export.py',
       '  for skipped in itertools.islice(remaining, done):',
       '  for skipped in itertools.islice(remaining, 0):',
       'a rerun continues after the complete batches, skipping them'),
    _m('activations-shapes-unchecked', 'activations/export.py',
       '        step.check(outputs, layout, k)\n',
       '',
       'a batch whose shapes differ from the first\'s is refused'),
    _m('activations-other-layout-accepted', 'activations/export.py',
       '    if difference is not None:',
       '    if False:',
       'a destination holding a store of another layout is refused'),
    _m('activations-progress-always', 'activations/progress.py',
       '      enabled = sys.stderr.isatty()',
       '      enabled = True',
       'the progress bar is drawn only on a terminal unless asked'),
    _m('activations-example-axis-kept', 'activations/reductions.py',
       '    x = jnp.moveaxis(value, axis, 0)',
       '    x = value',
       'a site is stored with its example axis first'),
    _m('activations-positions-ignored', 'activations/reductions.py',
       '      x = x[:, np.asarray(index) if isinstance(index, tuple) else index]',
       '      x = x',
       'positions= slices axis 1 on device'),
    _m('activations-norm-l1', 'activations/reductions.py',
       "      out['norm'] = jnp.sqrt(jnp.sum(jnp.square(f32), axis=-1))",
       "      out['norm'] = jnp.sum(jnp.abs(f32), axis=-1)",
       'the norm statistic is the L2 norm of each row'),
    _m('activations-var-within-batches-only', 'activations/dataset.py',
       '      var = (m2.sum(axis=0) + between) / max(count, 1)',
       '      var = m2.sum(axis=0) / max(count, 1)',
       'the variance combines the batches exactly (their means differ)'),
    _m('activations-carry-dropped', 'activations/dataset.py',
       '        carry = {k: v[perm[full:]] for k, v in chunk.items()}',
       '        carry = None',
       'rows left at a window\'s end start the next window'),
    # -- plant.py ----------------------------------------------------------
    _m('plant-eager-unread-accepted', 'plant.py',
       '  if first is not None:\n    raise interpreter.unread_plant(*first)',
       '  if first is None:\n    raise interpreter.unread_plant(*first)',
       'an eager plant refuses a planted value nothing reads'),
    _m('plant-eager-results-not-read', 'plant.py',
       '    unread.read(graph_nodes.arrays_in(',
       '    unread.read(()) or (graph_nodes.arrays_in(',
       'an eager plant whose value is returned or kept in a Variable runs'),
    _m('plant-eager-pattern-two-keys-accepted', 'plant.py',
       '        if name in self.by:\n',
       '        if False:\n',
       'an eager pattern plant refuses a name two keys select'),
    _m('plant-eager-pattern-unmatched-silent', 'plant.py',
       '      patterns.check()\n',
       '',
       'an eager pattern that selects no sow is an error after the call'),
    _m('plant-pattern-name-spelled', 'plant.py',
       '  return fn(value, index, name)',
       '  return fn(value, index, names_lib.spell(name))',
       'a pattern function gets the name (its int parts ints)'),
    _m('plant-unused-silent', 'plant.py',
       '      planter.check_all_used(tag, lambda: [\n',
       '      (lambda *_: None)(tag, lambda: [\n',
       'plant refuses values for names the function never sows'),
    _m('plant-function-arity-unchecked', 'plant.py',
       '      _check_function(name, entries)\n',
       '',
       "a plant function that cannot take (value, index[, name]) is refused"
       ' before the call, naming the form'),
    _m('plant-not-reported-to-outer', 'plant.py',
       '  inner_calls.took(call, [(name, tag) for name in planter.values])',
       '  del call, planter, tag',
       'a capture around a plant names the plant that took its sows'),
    # -- transform/inner_calls.py and seeing through -----------------------
    _m('inner-calls-not-reported', 'transform/inner_calls.py',
       '        outer.taken.setdefault((name, tag), call.description)',
       '        pass',
       'a capture names the inner capture that took its sows'),
    _m('inner-calls-selection-ignored', 'transform/inner_calls.py',
       "      if outer.matches({'sow_name': name, 'tag': tag}):",
       '      if True:',
       'a capture warns only of the sows it would have selected'),
    _m('see-through-no-copy', 'transform/primitive.py',
       '    for level in range(levels, 0, -1):',
       '    for level in range(0):',
       'capture(see_through=True) collects what an inner capture takes'),
    _m('see-through-copy-unmarked', 'transform/primitive.py',
       '      out = sow_p.bind(*out, **copy, meta=Through(level))',
       '      out = sow_p.bind(*out, **copy)',
       'a see-through copy is taken only by its own capture (the inner one'
       ' does not record it twice)'),
    _m('see-through-level-ignored', 'transform/selection.py',
       '    if primitive.through_level(params) != self.through:',
       '    if False:',
       'an ordinary capture does not take the copies made for a see-through'
       ' one'),
    _m('max-steps-pattern-unmatched', 'transform/steps.py',
       '             if names_lib.matches(k, name)]',
       '             if k == name]',
       'max_steps takes spellings and patterns, as names= does'),
    _m('dataset-name-not-resolved', 'activations/dataset.py',
       '    if len(stored) == 1:\n      return stored[0]',
       '    if False:\n      return stored[0]',
       'Dataset.read takes the name capture prints, for one stored site'),
    _m('plant-too-few-entries', 'transform/planting.py',
       '    if index >= len(entries):\n      raise ValueError(',
       '    if index > len(entries):\n      raise ValueError(',
       'too few planted entries are refused, naming the sow'),
    _m('plant-tag-ignored', 'plant.py',
       "  selection = Selection.make(tag=tag, names=None, where='plant')",
       "  selection = Selection.make(tag=None, names=None, where='plant')",
       'plant(f, values, tag=...) plants only sows with that tag'),
    _m('plant-fn-never-sown-unchecked', 'transform/planting.py',
       '        used = int(self.counters[name].seen)',
       '        used = 1',
       'a fn-planted name the function never sows raises'),
    # -- transform/thread_stack.py -----------------
    _m('thread-stack-innermost-first', 'transform/thread_stack.py',
       '    self.stack.append(item)',
       '    self.stack.insert(0, item)',
       'the innermost capture, frame or refusal is the last one pushed'),
    # -- perturb.py --------------------------------------------------------
    _m('perturb-bwd-not-sown', 'transform/perturbation.py',
       '  sown = primitive.sow_p.bind(',
       '  sown = (lambda *cts, **_: list(cts))(',
       'perturb sows the gradient of the value'),
    _m('perturb-bwd-tag-dropped', 'transform/perturbation.py',
       'sow_name=sow_name, tag=tag,',
       'sow_name=sow_name, tag=None,',
       "perturb's gradient sow carries its tag"),
    _m('perturb-jvp-primal-unmarked', 'transform/perturbation.py',
       '    out = perturb_p.bind(*primals, **params)',
       '    out = list(primals)',
       'reverse mode of a forward-differentiated perturb still sows'),
    _m('perturb-batch-uncounted', 'transform/perturbation.py',
       '      out = _bind_as_batched(prim, *moved, vmapped=vmapped + 1,'
       ' **params)',
       '      out = _bind_as_batched(prim, *moved, vmapped=vmapped,'
       ' **params)',
       'a loop axis goes before the axis of a vmap inside jax.grad'),
    _m('perturb-batch-primal-broadcast', 'transform/perturbation.py',
       '    if not primitive.harvesting.value or'
       ' primitive.keeps_unbatched(dims):',
       '    if not primitive.harvesting.value:',
       'capture(jax.hessian(f)) keeps jacfwd\'s primal unbatched'),
    _m('perturb-zero-cotangents-sown', 'transform/perturbation.py',
       '  if all(type(ct) is ad.Zero for ct in cotangents):',
       '  if False:',
       'nothing is sown where the gradient is symbolically zero'),
    _m('perturb-batched-cond-unrefused', 'transform/perturbation.py',
       '  if in_batched_cond and primitive.harvesting.value:',
       '  if False:',
       "a perturb's gradient under jax.grad(jax.vmap) of a cond whose index"
       ' is batched is refused, not recorded for every example'),
    _m('perturb-batching-rule-marks', 'transform/perturbation.py',
       '  return jex_core.Primitive.bind(prim, *args, **params)',
       '  return prim.bind(*args, **params)',
       'a cond whose index is not batched, reusing the batched branches JAX'
       " cached for one whose index was, still captures a perturb's"
       ' gradient'),
    _m('perturb-int-accepted', 'perturb.py',
       '    if not jnp.issubdtype(leaf.dtype, jnp.inexact):',
       '    if False:',
       'perturb refuses integer values, which have no gradient'),
    # -- tap.py ------------------------------------------------------------
    _m('tap-pattern-part-unchecked', 'tap.py',
       '      if checked is None:\n        break',
       '      if False:\n        break',
       'a tap pattern with a part that is not a str or an int is refused'),
    _m('tap-methods-str-as-chars', 'tap.py',
       '  if isinstance(methods, str):\n    methods = (methods,)\n',
       '',
       "methods='name' taps the method of that name, not its letters"),
    # -- capture_compat/capture.py -----------------------------------------
    _m('compat-decorator-drops-init', COMPAT + 'capture.py',
       '      return capture(\n'
       '          actual_fn, *all_types, init=init,'
       ' method_outputs=method_outputs\n      )',
       '      return capture(\n'
       '          actual_fn, *all_types, method_outputs=method_outputs\n'
       '      )',
       'the decorator form passes init through'),
    # -- capture_compat/call.py --------------------------------------------
    _m('compat-reduce-reversed', COMPAT + 'call.py',
       '      for value in values[key]:\n'
       '        accumulated = info.reduce_fn(accumulated, value)',
       '      for value in reversed(values[key]):\n'
       '        accumulated = info.reduce_fn(accumulated, value)',
       'reduce_fn is applied in call order'),
    _m('compat-init-perturbation-ignored', COMPAT + 'call.py',
       '        _InitPlanter(planted) if planted else None,',
       '        None,',
       'a perturbation given in init is added to the value'),
    # -- capture_compat/frames.py ------------------------------------------
    _m('compat-init-types-ignored', COMPAT + 'frames.py',
       '    return var_type in self.var_types or var_type in'
       ' self.init_types.get(\n        path, ()\n    )',
       '    return var_type in self.var_types',
       "init's types are collected though not returned"),
    _m('compat-frame-id-per-call', COMPAT + 'frames.py',
       "        threading.get_ident(),\n        depth,\n",
       "        threading.get_ident(),\n        object(),\n",
       'a capture run again compiles no jit inside it again'),
    _m('compat-frame-id-shared-by-threads', COMPAT + 'frames.py',
       "        'nnx.capture',\n        threading.get_ident(),\n",
       "        'nnx.capture',\n",
       "threads capturing the same model each get their own values"),
    # -- discover.py --------------------------------------------------------
    _m('discover-sds-static', 'discover.py',
       '  return primitive.is_array(leaf) or isinstance(leaf,'
       ' jax.ShapeDtypeStruct)',
       '  return primitive.is_array(leaf)',
       'jax.ShapeDtypeStruct arguments are traced, not handed to f'),
    _m('discover-staged-sows-taken', 'discover.py',
       '          keep_equations=True,',
       '          keep_equations=False,',
       'every sow has its source line, top-level ones included'),
    _m('discover-tag-of-first', 'discover.py',
       '    if len(self.tags) != 1:',
       '    if not self.tags:',
       'a name sown with several tags has no one .tag'),
    _m('discover-bytes-of-first-entry', 'discover.py',
       '    return render.nbytes(self.entries)',
       '    return render.nbytes(self.entries[:1])',
       'the bytes of a site count every entry'),
    # -- render.py ----------------------------------------------------------
    _m('render-tuple-name-repr', 'transform/names.py',
       "  return '.'.join(map(str, name))",
       '  return str(name)',
       "a tuple name is spelled with '.' between its parts"),
    _m('render-statistics-of-tracers', 'render.py',
       '  if isinstance(leaf, jax.core.Tracer) or not isinstance(leaf,'
       ' jax.Array):',
       '  if not isinstance(leaf, jax.Array):',
       'a traced value is printed by dtype and shape, without reading it'),
    # -- the codemod (scripts/migrate/sow_migrate) ----------------------------
    _m('migrate-holders-by-name-ignored', MIGRATE + 'holders.py',
       '    return any(name in c.imports or wanted[name] & c.imports\n'
       '               for name in c.names & wanted.keys())',
       '    return False',
       'a file whose class holds a class that sows (by name) is analysed'),
    _m('migrate-holders-passed-in-ignored', MIGRATE + 'holders.py',
       '              names_one(c) or c.kept & may_be_module\n',
       '              names_one(c)\n',
       'a file whose Module keeps a module passed in is analysed'),
    _m('migrate-holders-transitive-stops', MIGRATE + 'reading.py',
       "      if (wanted.intersection(fact.bases)\n"
       "          or wanted.intersection(q for q, _ in fact.calls)):",
       "      if False:",
       'the holders of a holder of a class that sows are analysed too'),
    _m('migrate-unread-base-not-suspect', MIGRATE + 'hazards.py',
       "      if _visible(fact, pop) and (project.kind(name) == 'nnx' or (",
       "      if _visible(fact, pop) and (project.kind(name) == 'nnx' and (",
       'a class deriving from an unread class may be the popped object'),
    _m('migrate-unread-root-known', MIGRATE + 'hazards.py',
       '  if not known and pop.root is not None and _unread_name(pop.root):',
       '  if False:',
       'a popped object of an unread library class is a hazard'),
    _m('migrate-any-use-sows-only', MIGRATE + 'calls.py',
       '      if node.value in names and id(node) not in receivers:',
       '      if False:',
       'a module passed to a function that flattens it is a hazard'),
    _m('migrate-any-without-default-no-module', MIGRATE + 'attributes.py',
       '  if default is None:\n    return False',
       '  if default is None:\n    return True',
       'an attribute annotated Any without a default may hold a module'),
    _m('migrate-part-reads-dropped', MIGRATE + 'facts.py',
       '      name = bound.get(name)',
       '      name = None',
       'a read through a name bound to a part of a called model is reported'),
    _m('migrate-may-read-silent', MIGRATE + 'decide.py',
       "    elif (other.code == 'may-read' and by_name.keys() - {None}",
       "    elif (False",
       'getattr with a computed name is reported as may-read'),
    _m('migrate-module-alias-ignored', MIGRATE + 'facts.py',
       '      self.facts.aliases[next(iter(alias))] = sorted(named)[0]',
       '      pass',
       'a module-level alias of nnx.List is an nnx.List'),
    _m('migrate-reason-cut', MIGRATE + 'flags.py',
       "    return head + ' '.join(self.message.split()) + suffix",
       "    return (head + ' '.join(self.message.split()))[:200] + suffix",
       'a flag holds its whole reason'),
    _m('migrate-readers-not-noted', MIGRATE + 'source.py',
       '                              readers if annotate else ())',
       '                              ())',
       '--annotate writes its note at readers too'),
    # -- capture_compat/overlay.py -----------------------------------------
    _m('compat-installed-always', COMPAT + 'overlay.py',
       '  return module_lib.capture is capture\n',
       '  return True\n',
       'is_installed() says whether nnx.capture is the layer\'s'),
    # -- capture_compat/method_outputs.py ----------------------------------
    _m('compat-method-outputs-call-only', COMPAT + 'method_outputs.py',
       '      patterns=None, methods=None, inputs=False, outputs=False,',
       "      patterns=None, methods=('__call__',), inputs=False,"
       ' outputs=False,',
       'method_outputs sows every public method of the classes'),
    # -- capture_compat/module_methods.py ----------------------------------
    _m('compat-keep-last-appends', COMPAT + 'module_methods.py',
       "  return 'clobber' if reduce_fn is keep_last else 'append'",
       "  return 'append'",
       'a keep_last reducer works inside nnx.while_loop'),
    _m('compat-perturb-not-added', COMPAT + 'module_methods.py',
       '      mode=\'append\', meta=info,\n  )\n  return perturbation + value',
       '      mode=\'append\', meta=info,\n  )\n  return value',
       'Module.perturb adds its (planted) perturbation'),
    _m('compat-dropped-returns-true', COMPAT + 'module_methods.py',
       '      )\n    return False',
       '      )\n    return True',
       'Module.sow returns False when the capture does not collect it'),
    # -- capture_compat/replaced.py ----------------------------------------
    _m('compat-replaced-forgotten', COMPAT + 'replaced.py',
       '  return ORIGINALS.get(name)',
       '  return None',
       "Flax's own capture, held from before install, still collects"),
)
