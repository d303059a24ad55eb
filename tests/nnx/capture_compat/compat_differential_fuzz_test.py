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
"""Differential fuzzing of the compat layer against Flax 0.12.8.

Random NNX models and calls (``sow_fuzz_models``) run on identical clones
under Flax 0.12.8's own ``nnx.capture`` (``sow_legacy``, the oracle) and
under the compat layer's. Where both run, the result (outputs, captured
State, gradients) and the model state after the call are compared bitwise,
as ``parity_test.py`` compares its models. Where 0.12.8 fails, the failure
must be one the behavior-changes guide lists, and the new implementation
must either run (a documented improvement) or raise an error that names
``capture`` and says why; it may not fail in another way.

Either way the new ``nnx.capture`` must agree with the functional
``flax.nnx.sow.capture`` of the same call, as the guide states: each State
path ``(*module_path, name)`` holds the values the functional capture
collects under that name (tagged with the sown Variable type), reduced by
the sow's ``reduce_fn``/``init_fn``.

The hypothesis profile ``ci`` (the default, see conftest.py) runs 200 models;
``scripts/fuzz/run_fuzzers.py --minutes N`` runs the long search.
"""

from __future__ import annotations

import functools
import re
import typing as tp

from absl.testing import absltest
import hypothesis
import numpy as np
from flax import nnx

from flax.nnx import capture_compat
from flax.nnx import sow as functional
from flax.nnx.sow import tap
import parity_test
import sow_fuzz_models as fm
import sow_legacy
import sow_layout
import sow_testing

# Flax 0.12.8's failures that the behavior-changes guide lists (its table
# "Failures of 0.12.8 that the new implementation fixes"), as the errors it
# raises.
LEGACY_FAILURES = {
    'the loop carry changes structure (nnx.fori_loop, nnx.while_loop)':
        r'same (pytree|reference and pytree) structure',
    'sorting the keys of an nnx.List (nnx.remat, nnx.cond, nnx.switch)':
        r'Comparator raised exception while sorting pytree dictionary keys'
        r"|'<' not supported between instances",
    'an nnx.Dict iterated inside the capture yields __captures__':
        r"'tuple' object is not callable",
}

# The new implementation's refusals, as the guide documents them.
NEW_REFUSALS = {
    'an appending reducer in a while_loop':
        r"capture: a while_loop \(at .*\) sows .* with mode='append'",
    'a module whose every Variable is updated before it sows, inside a'
    ' transform':
        r'none of the Variables it reads there comes from an input',
    'a module without Variables that sows inside a transform':
        r'holds no Variable whose value comes from the capture',
}


# Inside a traced nnx.cond or nnx.switch, Flax 0.12.8 accumulates two things
# inside the branch that the new nnx.capture accumulates after it: the
# values of a summing reducer (these names), and the cotangents of a
# perturbation added more than once (and so those of the parameters it
# flows into). Those are equal to float rounding; the rest bitwise (the
# behavior-changes guide, "Other differences").
ROUNDED_REDUCERS = tuple(
    name for name, reducer in fm.NAME_REDUCERS.items() if reducer == 'sum')


def _accumulated_in_a_branch(path: str, call: fm.CallSpec) -> bool:
  """Whether the value at ``path`` of a result may be accumulated in another
  order than Flax 0.12.8's: a sum, or a gradient (``fm.run``'s ``grads``
  and ``perturbation_grads``: a perturbation added more than once in a
  branch changes the order in which cotangents are added, for the
  parameters it flows into too)."""
  if any(f"['{name}']" in path for name in ROUNDED_REDUCERS):
    return True
  return call.grad and path.startswith(('[0]', '[1]'))


def _reduced_in_a_branch(spec) -> bool:
  if isinstance(spec, fm.BlockSpec):
    return spec.wrap in ('cond', 'switch') or any(
        map(_reduced_in_a_branch, spec.children))
  return False


def _taps_apply(spec, call: fm.CallSpec) -> bool:
  """Whether the model's calls are plain Python calls of its modules (no
  NNX transform inside, whose copies a tap names as the transform sees
  them), run eagerly: where a tap and ``method_outputs`` see the same."""
  if call.outer != 'eager' or call.grad:
    return False

  def plain(node) -> bool:
    if isinstance(node, fm.StackSpec):
      return False
    if isinstance(node, fm.BlockSpec):
      return node.wrap == 'none' and all(map(plain, node.children))
    return True

  return plain(spec)


def _legacy_failure(error: BaseException) -> str | None:
  for why, pattern in LEGACY_FAILURES.items():
    if re.search(pattern, str(error)):
      return why
  return None


def _refusal(error: BaseException) -> str | None:
  for why, pattern in NEW_REFUSALS.items():
    if re.search(pattern, str(error), re.DOTALL):
      return why
  return None


def execute(spec, call: fm.CallSpec, implementation: str):
  """Builds a fresh clone and runs ``call`` on it; (result, model state)."""
  if implementation == 'legacy':
    routing, capture = sow_legacy.flax_methods(), sow_legacy.capture
  else:
    routing, capture = sow_layout.overlay(), capture_compat.capture
  with routing:
    model = fm.build(spec, nnx.Rngs(0, dropout=1))
    result = fm.run(capture, model, fm.input_for(), call)
    return result, nnx.state(model)


def _reduce(name: str, values: tuple[tp.Any, ...]):
  reducer = fm.REDUCERS[fm.NAME_REDUCERS[name]]
  if not reducer:
    return values
  init = reducer.get('init_fn', tuple)
  return functools.reduce(reducer['reduce_fn'], values, init())


def functional_state(spec, call: fm.CallSpec):
  """The new ``nnx.capture``'s States as the guide derives them from the
  functional capture of the same forward call (under the same outer
  ``nnx.jit``, on a fresh clone): one per captured type."""
  with sow_layout.overlay():
    states = []
    for var_type in (fm.VAR_TYPES[t] for t in call.types):
      # A fresh clone per call (Dropout's stream advances on each call).
      model = fm.build(spec, nnx.Rngs(0, dropout=1))
      if call.train:
        model.train()
      else:
        model.eval()
      # nnx.capture selects each type exactly (not its subclasses).
      forward = functional.capture(lambda m, x: m(x), tag=var_type)
      if call.outer == 'jit':
        forward = nnx.jit(forward)
      elif call.outer == 'jit_tree':
        forward = nnx.jit(forward, graph=False)
      try:
        _, collected = forward(model, fm.input_for())
      except ValueError as e:
        # A type the model does not sow: the functional capture says so
        # (the guide's derivation gives an empty State then).
        if f'capture(tag={var_type!r}) selected no sow' not in str(e):
          raise
        collected = {}
      expected = {}
      for name, values in collected.items():
        expected[name] = var_type(_reduce(name[-1], values))
      states.append(nnx.from_flat_state(expected))
  return tuple(states)


class CompatDifferentialFuzzTest(parity_test.ComparingTestCase):

  def setUp(self):
    super().setUp()
    if not sow_legacy.is_available():
      self.skipTest(sow_legacy.SKIP_REASON)

  def check(self, spec, call: fm.CallSpec):
    try:
      legacy = execute(spec, call, 'legacy')
      legacy_error = None
    except Exception as e:  # pylint: disable=broad-exception-caught
      legacy, legacy_error = None, e
    try:
      new = execute(spec, call, 'new')
      new_error = None
    except Exception as e:  # pylint: disable=broad-exception-caught
      new, new_error = None, e

    if legacy_error is not None:
      why = _legacy_failure(legacy_error)
      hypothesis.note(f'Flax 0.12.8 fails: {legacy_error!r:.300}')
      if new_error is not None and _legacy_failure(new_error) is None and (
          type(new_error) is type(legacy_error)
          and str(new_error) == str(legacy_error)):
        return  # the same error, of Flax or JAX, not of the capture
      self.assertIsNotNone(
          why, f'Flax 0.12.8 fails in a way the guide does not list:'
          f' {legacy_error!r}')
      hypothesis.event(f'legacy fails: {why}')
    if new_error is not None:
      refusal = _refusal(new_error)
      if refusal is None:
        raise AssertionError(
            f'the new nnx.capture fails where Flax 0.12.8'
            f' {"also fails" if legacy_error else "runs"}') from new_error
      hypothesis.event(f'new refuses: {refusal}')
      return

    result, state = new
    if (legacy is not None and call.method_outputs
        and 'intermediate' in call.types and _taps_apply(spec, call)):
      # method_outputs=nnx.Intermediate: in the State of that type.
      self.check_taps(
          spec, call, legacy[0][1 + call.types.index('intermediate')])
    if legacy is not None:
      hypothesis.event('compared with Flax 0.12.8')
      rounded = _reduced_in_a_branch(spec)
      # Under an eager nnx.grad the new nnx.capture interprets a program
      # staged under the grad's trace, in which JAX inlines jax.numpy's own
      # jits (`jnp.mean`'s reduce and divide), which Flax 0.12.8 runs as one
      # compiled program each: another program, equal to float rounding
      # (JAX 0.10.0's XLA rounds that fused mean 1 ulp apart).
      inlined = call.grad and call.outer == 'eager'
      self.assert_same(result, legacy[0], 'result',
                       bitwise=not (rounded or inlined))
      self.assert_same(state, legacy[1], 'updated model state')
      if rounded and not inlined:  # bitwise, but what a branch accumulates
        for (path, _, a), (_, _, b) in zip(parity_test._flat(result),  # pylint: disable=protected-access
                                           parity_test._flat(legacy[0])):  # pylint: disable=protected-access
          if not _accumulated_in_a_branch(path, call):
            np.testing.assert_array_equal(a, b, err_msg=f'result at {path}')
    if not call.grad and not call.method_outputs:
      sown = result[1:]  # a State per captured type
      expected = functional_state(spec, call)
      # The values are computed by the same operations: bitwise. A sum is
      # added eagerly here, and inside the compiled program by nnx.capture
      # under nnx.jit: equal to float rounding there.
      self.assert_same(sown, expected, 'State vs the functional capture',
                       bitwise=False)
      for (path, _, a), (_, _, b) in zip(parity_test._flat(sown),  # pylint: disable=protected-access
                                         parity_test._flat(expected)):  # pylint: disable=protected-access
        if call.outer == 'eager' or not any(
            f"['{n}']" in path for n in ROUNDED_REDUCERS):
          np.testing.assert_array_equal(
              a, b, err_msg=f'State vs the functional capture at {path}')

  def check_taps(self, spec, call: fm.CallSpec, legacy_outputs) -> None:
    """``tap`` of every module that Flax 0.12.8's ``method_outputs`` saw
    called: the outputs of its calls, in call order, bitwise equal.

    A tap's pattern is the module's path, or (where several modules
    answer) that path with one component replaced by ``'*'``.
    """
    hypothesis.event('taps compared with method_outputs')
    calls = {path[:-1]: value
             for path, _, value in sow_testing.flat(legacy_outputs)
             if path[-1] == '__call__'}
    patterns = sorted(calls, key=repr)
    self.assertNotEmpty(patterns, 'method_outputs saw no __call__')
    with sow_layout.overlay():
      model = fm.build(spec, nnx.Rngs(0, dropout=1))
      if call.train:
        model.train()
      else:
        model.eval()
      tapped = tap(lambda m, x: m(x), *patterns, inputs=False)
      _, collected = functional.capture(tapped)(model, fm.input_for())
    for path in patterns:
      got = collected[(*path, '__call__', 'output')]
      want = calls[path]
      self.assertLen(got, len(want), f'calls of {path}')
      for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b, err_msg=f'tap of {path}')
    # One wildcard: the modules that answer it, each with its own calls.
    for path in patterns:
      for i in range(len(path)):
        wild = (*path[:i], '*', *path[i + 1:])
        matched = [p for p in patterns if len(p) == len(path) and all(
            w == '*' or w == c for w, c in zip(wild, p))]
        with sow_layout.overlay():
          model = fm.build(spec, nnx.Rngs(0, dropout=1))
          model.train() if call.train else model.eval()
          tapped = tap(lambda m, x: m(x), wild, inputs=False)
          _, wild_collected = functional.capture(tapped)(
              model, fm.input_for())
        outputs = {name[:-2] for name in wild_collected}
        # Modules without a __call__ output in legacy (never called) are
        # absent from both; every one legacy saw is tapped.
        self.assertContainsSubset(matched, outputs, f'pattern {wild}')
        return  # one wildcard per model keeps the check short

  @hypothesis.given(fm.models())
  def test_new_capture_matches_flax_0_12_8(self, spec_and_call):
    spec, call = spec_and_call
    self.check(spec, call)

  @hypothesis.given(fm.plain_models())
  def test_taps_match_method_outputs(self, spec_and_call):
    # The same check, on models where it also compares taps (check_taps).
    spec, call = spec_and_call
    self.check(spec, call)


if __name__ == '__main__':
  absltest.main()
