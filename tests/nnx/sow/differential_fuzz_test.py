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
"""Differential fuzzing of the capture interpreter against an oracle.

Random programs (``sow_fuzz_programs``) mix Python loops, ``jit``, ``scan``,
``fori_loop``, ``cond``/``switch``, ``checkpoint``, ``vmap``, ``grad`` with
``perturb``, ``custom_vjp``, ``while_loop`` and nested ``capture`` with tags
and name filters, with sows of random pytrees at random points. Each is run
through ``capture`` (eagerly or under ``jax.jit``) and by the oracle, an eager
Python evaluator that records every sow itself; names, order, structures,
shapes, dtypes and values must agree bitwise, and ``plant`` with the captured
values must give back exactly the output of the program.

The hypothesis profile ``ci`` (the default, see conftest.py) runs 200
programs; ``pytest --hypothesis-profile=long`` runs 5,000.

Below the property test, each bug the fuzzer found has a named regression
test.
"""

import warnings

from absl.testing import absltest
import hypothesis
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import plant
from flax.nnx.sow import sow
from flax.nnx.sow.transform import inner_calls
import sow_fuzz_programs as fp
import sow_testing

# Gradients (the values `perturb` sows) are the only values the oracle
# computes by another method: it differentiates the unrolled eager program
# with respect to added zero perturbations, while capture differentiates the
# program with scans, jit and custom_vjp in it. The maths is the same but the
# float operations are not (order of cotangent accumulation, transposed
# scans), so they are compared to float rounding (sow_testing.assert_close);
# every other value is computed by the same operations: bitwise.


def check_leaf(test, where, got, leaf: fp.Leaf):
  got = np.asarray(got)
  shaped = [v for v in leaf.cands.values() if v.shape == got.shape]
  test.assertTrue(
      shaped,
      f'{where}: shape {got.shape}, expected one of'
      f' {[v.shape for v in leaf.cands.values()]}',
  )
  errors = []
  for want in shaped:
    if got.dtype != want.dtype:
      errors.append(f'dtype {got.dtype} != {want.dtype}')
      continue
    try:
      if leaf.approx:
        sow_testing.assert_close(got, want)
      else:
        np.testing.assert_array_equal(got, want)
      return
    except AssertionError as e:
      errors.append(str(e))
  test.fail(f'{where}: ' + '\n'.join(errors))


def check_against_oracle(test, program, shape, *, jit: bool):
  x = fp.input_for(shape)
  seen = {}
  fn = fp.build(program, seen)
  run = capture(fn, **fp.capture_bounds(program))
  if jit:
    run = jax.jit(run)
  oracle = fp.Oracle()
  try:
    want_out, records = oracle.run(program, x)
  except fp.SelectsNothing as e:
    _event('a capture selecting nothing')
    with test.assertRaisesRegex(ValueError, 'selected no sow', msg=str(e)), \
        warnings.catch_warnings():
      warnings.simplefilter('ignore', inner_calls.TakenByInnerCall)
      run(x)
    return
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always', inner_calls.TakenByInnerCall)
    out, collected = run(x)
  expected = fp.collect(records)
  # A capture warns of the names an inner capture took from it: only where
  # a nested capture took some, and never of a name it collected.
  for warning in caught:
    test.assertIsInstance(warning.message, inner_calls.TakenByInnerCall)
    test.assertTrue(any(seen.values()), str(warning.message))
    for name in collected:
      test.assertNotIn(f'{name!r} was taken', str(warning.message))

  np.testing.assert_array_equal(out, want_out, err_msg='output')
  test.assertEqual(list(collected), list(expected), 'names in order')
  for name, entries in expected.items():
    got_entries = collected[name]
    test.assertIsInstance(got_entries, tuple)
    test.assertLen(got_entries, len(entries), f'entries of {name!r}')
    for i, (got, rec) in enumerate(zip(got_entries, entries)):
      got_leaves, got_tree = jax.tree_util.tree_flatten(got)
      test.assertEqual(got_tree, rec.tree, f'structure of {name!r}[{i}]')
      for j, (g, leaf) in enumerate(zip(got_leaves, rec.leaves)):
        check_leaf(test, f'{name!r}[{i}] leaf {j}', g, leaf)
  test.assertEqual(seen, oracle.capture_names, 'nested captures')

  # plant round trip, for every name it accepts: not clobbered anywhere
  # (there is one value per name, not per sow) nor sown in a while_loop,
  # and every sow of it read (plant refuses a sow whose result is unused).
  refused = _clobbered_names(program) | _unread_names(program)
  values = {n: v for n, v in collected.items() if n not in refused}
  if 'ShardMap' in _node_kinds(program):
    return  # planting into a shard_map is refused (not implemented)
  if values:
    planted = plant(fn, values)(x)
    np.testing.assert_array_equal(planted, fn(x), err_msg='plant round trip')
    np.testing.assert_array_equal(planted, want_out, err_msg='plant output')
  # Function plants of the same names, checked against the oracle planting
  # by itself (plant_fn depends on the value and its execution index), under
  # jit or not, and under jax.vmap of the planted function. Not through a
  # nested capture (it would collect what the plant replaced).
  if values and 'Capture' not in _node_kinds(program):
    check_function_plants(test, program, fn, x, sorted(values, key=repr),
                          jit=jit)


def _event(text: str) -> None:
  """A statistic of the property test (the regression tests run outside)."""
  if hypothesis.control.currently_in_test_context():
    hypothesis.event(text)


def check_function_plants(test, program, fn, x, names, *, jit: bool):
  _event('function plants')
  plants = {name: fp.plant_fn for name in names}
  planted = plant(fn, plants)
  got = (jax.jit(planted) if jit else planted)(x)
  want, _ = fp.Oracle(plants).run(program, x)
  np.testing.assert_array_equal(got, want, err_msg=f'function plants {names}')
  if 'Cond' in _node_kinds(program):
    return  # a cond's index from the state is refused under vmap
  _event('vmap of function plants')
  xs = jnp.stack([x, jnp.sin(x)])
  got = jax.vmap(planted)(xs)
  want = np.stack([fp.Oracle(plants).run(program, xs[k])[0]
                   for k in range(2)])
  np.testing.assert_array_equal(got, want,
                                err_msg=f'vmap of function plants {names}')


def _clobbered_names(node) -> set:
  names = set()
  if isinstance(node, fp.Sow) and node.mode == 'clobber':
    names.add(node.name)
  if isinstance(node, fp.While):
    names.add(node.name)
  for child in _children(node):
    names |= _clobbered_names(child)
  return names


def _unread_names(node) -> set:
  """Names of sows whose result the built program drops."""
  names = set()
  if isinstance(node, fp.Sow) and not node.threaded:
    names.add(node.name)
  if isinstance(node, fp.Capture):
    names.add(('cap', node.ident))
  for child in _children(node):
    names |= _unread_names(child)
  return names


def _node_kinds(node) -> set:
  kinds = {type(node).__name__}
  for child in _children(node):
    kinds |= _node_kinds(child)
  return kinds


def _children(node):
  if isinstance(node, fp.Seq):
    return node.children
  if isinstance(node, fp.Cond):
    return node.branches
  body = getattr(node, 'body', None)
  return () if body is None else (body,)


class DifferentialFuzzTest(absltest.TestCase):

  @hypothesis.given(fp.programs(), hypothesis.strategies.booleans())
  def test_capture_matches_oracle(self, program_and_shape, jit):
    program, shape = program_and_shape
    for kind in sorted(_node_kinds(program)):
      hypothesis.event(kind)  # shown by --hypothesis-show-statistics
    bounds = fp.capture_bounds(program)
    if bounds:
      hypothesis.event(f"bounded while, on_overflow={bounds['on_overflow']}")
    check_against_oracle(self, program, shape, jit=jit)


X = jnp.array([0.7, -1.3, 0.4], jnp.float32)


class RegressionTest(absltest.TestCase):
  """One named test per bug the fuzzer found."""

  def test_literal_values_come_back_as_jax_arrays(self):
    # Eager capture read constant sows and constant outputs straight from
    # jaxpr literals, as JAX's internal TypedInt/TypedFloat/TypedNdArray or a
    # plain bool: np.asarray(TypedInt(3)) is int64, not the int32 that sow
    # returns. Oracle: what sow and f return outside capture.
    value = {'i': 3, 'f': 1.5, 'n': np.int32(7), 'b': True}

    def f(x):
      c = sow(value, name='c')
      return x, jnp.int32(3), sow(2.5, name='out'), c

    direct_value, direct_out = sow(value, name='c'), f(X)
    runs = {
        'eager': capture(f),
        'jit': jax.jit(capture(f)),
        'plant': lambda x: (plant(f, {'c': (value,)})(x), None),
    }
    for label, run in runs.items():
      with self.subTest(label):
        out, collected = run(X)
        sown = [] if collected is None else [collected['c'][0]]
        for got, want in zip(jax.tree.leaves([out, *sown]),
                             jax.tree.leaves([direct_out, *[direct_value]])):
          self.assertIsInstance(got, jax.Array)
          self.assertEqual(got.dtype, want.dtype)
          self.assertEqual(got.weak_type, want.weak_type)
          np.testing.assert_array_equal(got, want)

  def test_literal_sown_inside_a_body_comes_back_as_a_jax_array(self):
    # The same, through a rule: an eager checkpoint (as JAX's remat does)
    # returns a literal output of its body raw, and capture recorded it so.
    value = {'i': 3, 'f': 1.5, 'n': np.int32(7), 'b': True}
    block = jax.checkpoint(lambda x: (sow(value, name='c'), x)[1])
    scanned = lambda x: lax.scan(
        lambda c, _: ((sow(value, name='c', mode='clobber'), c)[1], None), x,
        None, length=2)[0]
    direct = sow(value, name='c')
    for f in (block, scanned):
      _, collected = capture(f)(X)
      for key, want in direct.items():
        got = collected['c'][0][key]
        self.assertIsInstance(got, jax.Array)
        self.assertEqual(got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)

  def test_vmap_of_cond_with_batched_index_is_refused(self):
    # JAX's batching rule for a cond whose index is batched runs every branch
    # on every example and selects the outputs. capture(jax.vmap(f)) then
    # returned two entries for one sow site, one per branch, each holding
    # that branch's value for *every* example, including the examples that
    # took the other branch: values the program never computed.
    def f(v):
      return lax.cond(v[0] > 0, lambda u: sow(u * 2, name='b'),
                      lambda u: sow(u * 3, name='b'), v)

    xs = jnp.stack([X, -X])
    with self.assertRaisesRegex(
        NotImplementedError,
        r"jax.vmap of a cond/switch whose index depends on the mapped"
        r" inputs .*\('b'\).*jax.vmap\(capture\(f\)\)"):
      capture(jax.vmap(f))(xs)
    with self.assertRaisesRegex(NotImplementedError, 'jax.vmap of a cond'):
      plant(jax.vmap(f), {'b': (xs,)})(xs)
    # The way the error points to is exact. Oracle: each example by hand.
    out, collected = jax.vmap(capture(f))(xs)
    expected = np.stack([x * 2 if x[0] > 0 else x * 3 for x in np.asarray(xs)])
    self.assertLen(collected['b'], 1)
    np.testing.assert_array_equal(collected['b'][0], expected)
    np.testing.assert_array_equal(out, expected)
    # An index that does not depend on the mapped inputs is still captured.
    g = lambda v: lax.switch(1, [lambda u: sow(u * 2, name='b'),
                                 lambda u: sow(u * 3, name='b')], v)
    _, collected = capture(jax.vmap(g))(xs)
    np.testing.assert_array_equal(collected['b'][0], np.asarray(xs) * 3)
    # A batched cond without sows inside is not affected.
    h = lambda v: sow(lax.cond(v[0] > 0, lambda u: u * 2, lambda u: u * 3, v),
                      name='b')
    _, collected = capture(jax.vmap(h))(xs)
    np.testing.assert_array_equal(collected['b'][0], expected)

  def test_perturb_under_vmap_of_grad_inside_a_loop(self):
    # Found by the long profile (seed 20261201): a perturb's gradient, sown
    # by its custom_vjp's backward rule under vmap(grad(...)) inside a loop,
    # came back with the loop axis last, (2, 3, n) instead of (n, 2, 3):
    # JAX's name stack of that rule repeats the vmap around the grad, so the
    # vmap was counted twice, once as outside the loop. Its relatives: the
    # same under a checkpoint (partial evaluation repeats the stack too).
    # Oracle: the eager evaluator, which unrolls the loops.
    perturb_node = fp.Perturb(name='a', tag=None)
    vmapped = lambda body: fp.Vmap(size=2, axis=0, body=fp.Grad(body=body))
    bodies = {
        'perturb': perturb_node,
        'checkpoint': fp.Checkpoint(
            body=perturb_node, policy='none', prevent_cse=True),
        'custom_vjp': fp.CustomVjp(body=perturb_node),
    }
    for n in (0, 1, 2):
      for label, body in bodies.items():
        for loop in (fp.Fori(n=n, body=vmapped(body)),
                     fp.Scan(length=n, reverse=False, body=vmapped(body))):
          for jit in (False, True):
            with self.subTest(n=n, body=label, loop=type(loop).__name__,
                              jit=jit):
              check_against_oracle(self, loop, (3,), jit=jit)

  def test_function_plant_of_a_name_a_perturb_sows_too(self):
    # Found by the long profile with function plants (round seed
    # 3929725690): the oracle did not count the perturb's sow, which runs in
    # the backward pass of the Grad before the later sow of the same name,
    # so its index was one off. plant counts it, as documented: the
    # executions of the name in the order they run.
    program = fp.Seq((
        fp.Grad(fp.Perturb(name='a', tag=None)),
        fp.Sow(name='a', tag=None, mode='append', kind='x', threaded=True),
    ))
    for jit in (False, True):
      check_against_oracle(self, program, (3,), jit=jit)
    seen = {}
    fn = fp.build(program, seen)
    x = fp.input_for((3,))
    indices = []
    record = lambda v, i: (indices.append(i), v)[1]
    plant(fn, {'a': record})(x)
    self.assertEqual(indices, [0, 1])  # the perturb's, then the sow's


if __name__ == '__main__':
  absltest.main()
