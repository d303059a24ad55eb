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
"""The interpreter over plain jaxprs: ``interpreter.evaluate`` and its plan.

Jaxprs traced here as ``capture`` traces them (``harvesting`` on) are
evaluated in a ``Scope`` of a ``Request``, with no ``capture`` and no rule
for any higher-order primitive (``rules/`` adds those): records in program
order, unselected sows kept or dropped, the refusal of a higher-order
primitive that holds a sow and has no rule, the one-call rewrite under a
staging trace (``rewrite.py``) and the sows collected as they are staged
(``staged_sows.py``).
"""

from absl.testing import absltest
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import staged_sows
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.selection import Selection


sow = primitive.sow
X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)
EVERYTHING = Request(Selection())


def f(x):
  y = sow(jnp.sin(x), name='a')
  z = sow(y * 2, name='b', tag='t')
  sow(z + y, name='a')
  return z + 1


def traced(fun, *args):
  """``fun``'s jaxpr as a capture traces it."""
  with primitive.harvesting(True):
    return jax.make_jaxpr(fun)(*args)


def evaluate(closed, args, request=EVERYTHING, staged=None):
  scope = Scope(request)
  outs = interpreter.evaluate(closed.jaxpr, closed.consts, args, scope,
                              staged)
  return outs, scope


def named(scope):
  return [site.name for site, _ in scope.records]


def sow_names(jaxpr):
  return [e.params['sow_name'] for e in primitive.sow_equations(jaxpr)]


class EvaluateTest(absltest.TestCase):

  def test_outputs_and_records_in_program_order(self):
    (out,), scope = evaluate(traced(f, X), [X])
    np.testing.assert_array_equal(out, f(X))
    self.assertEqual(named(scope), ['a', 'b', 'a'])
    y = jnp.sin(X)
    for (_, got), want in zip(scope.records, (y, y * 2, y * 2 + y)):
      np.testing.assert_array_equal(got[0], want)

  def test_an_unselected_sow_is_bound_again_or_dropped(self):
    closed = traced(f, X)
    kept = Request(Selection(tag='t'))
    dropped = Request(Selection(tag='t'), rebind_unhandled=False)
    for request, left in ((kept, ['a', 'a']), (dropped, [])):
      with self.subTest(rebind=request.rebind_unhandled):
        outer = jax.make_jaxpr(
            lambda x, r=request: evaluate(closed, [x], r)[0])(X)
        self.assertEqual(sow_names(outer.jaxpr), left)
        _, scope = evaluate(closed, [X], request)
        self.assertEqual(named(scope), ['b'])

  def test_literals_are_recorded_as_arrays(self):
    (_,), scope = evaluate(traced(lambda x: sow(2.0, name='c') + x, X), [X])
    ((_, (value,)),) = scope.records
    self.assertIsInstance(value, jax.Array)
    self.assertEqual(float(value), 2.0)

  def test_a_higher_order_primitive_with_a_sow_and_no_rule_is_refused(self):
    def solve(b):
      return lax.custom_linear_solve(
          lambda v: sow(v * 2, name='v'), b, lambda mv, r: r / 2,
          symmetric=True)

    closed = traced(solve, X)
    with self.assertRaisesRegex(
        NotImplementedError,
        r"primitive 'custom_linear_solve' \(at .*interpreter_test.py.*\)"
        r" contains sows 'v' and has no capture rule"):
      evaluate(closed, [X])
    # Not if the request leaves its sows alone.
    (out,), scope = evaluate(closed, [X], Request(Selection(tag='other')))
    np.testing.assert_array_equal(out, X / 2)
    self.assertEqual(scope.records, [])

  def test_the_plan_is_made_once_per_jaxpr_and_request(self):
    jaxpr = traced(f, X).jaxpr
    plan = interpreter.plan(jaxpr, EVERYTHING)
    self.assertIs(interpreter.plan(jaxpr, Request(Selection())), plan)
    self.assertEqual(
        [rule is interpreter.handle_sow for rule in plan],
        [e.primitive is primitive.sow_p for e in jaxpr.eqns])
    self.assertTrue(interpreter.contains(jaxpr, EVERYTHING))
    self.assertFalse(interpreter.contains(jaxpr, Request(Selection(tag='x'))))


class StagedTest(absltest.TestCase):
  """Under a staging trace (``jit``)."""

  def test_first_order_sows_become_outputs_of_one_call(self):
    closed = traced(f, X)

    def run(x):
      (out,), scope = evaluate(closed, [x])
      return out, [leaves for _, leaves in scope.records]

    outer = jax.make_jaxpr(run)(X)
    self.assertEqual([e.primitive.name for e in outer.eqns], ['closed_call'])
    self.assertEqual(sow_names(outer.jaxpr), [])
    out, records = jax.jit(run)(X)
    np.testing.assert_array_equal(out, f(X))
    np.testing.assert_array_equal(records[1][0], jnp.sin(X) * 2)

  def test_sows_taken_as_they_are_staged(self):
    def g(x):
      y = sow(jnp.sin(x), name='a')
      w = sow(y + 1, name='c', mode='clobber')  # stays an equation
      return sow(w * 2, name='b')

    harvested = []

    def collecting_g(x):
      with staged_sows.collecting(EVERYTHING) as taking:
        out = g(x)
        harvested.append(taking.finish())
        return [out, *taking.leaves()]

    self.assertTrue(staged_sows.eligible(EVERYTHING))
    closed = traced(collecting_g, X)
    (done,) = harvested
    self.assertEqual([s.site.name for s in done.sows], ['a', 'b'])
    self.assertEqual(done.marked, 1)
    self.assertEqual(sow_names(closed.jaxpr), ['c'])
    outs, scope = evaluate(closed, [X], staged=done)
    self.assertLen(outs, 1)
    np.testing.assert_array_equal(outs[0], g(X))
    # Put back in program order among the equations that stayed.
    self.assertEqual(named(scope), ['a', 'c', 'b'])

  def test_what_is_not_taken_at_staging(self):
    self.assertFalse(staged_sows.eligible(
        Request(Selection(names=lambda n: True))))
    self.assertFalse(staged_sows.eligible(
        Request(Selection(), planted=Selection())))
    self.assertFalse(staged_sows.eligible(Request(Selection(),
                                                  collect=False)))


class DeadAfterTest(absltest.TestCase):

  def test_each_variable_dies_once_at_its_last_read(self):
    def f(x, unused):
      del unused
      a = jnp.sin(x)
      b = a * 2.0
      return b + a, x

    closed = jax.make_jaxpr(f)(1.0, 2.0)
    jaxpr = closed.jaxpr
    dead = interpreter.dead_after(jaxpr)
    x, unused = jaxpr.invars
    sin, mul, add = jaxpr.eqns
    a, (b,) = sin.outvars[0], mul.outvars
    self.assertLen(dead, len(jaxpr.eqns) + 1)
    self.assertEqual(dead[0], (unused,))  # read by nothing
    self.assertEqual(dead[1], ())  # x is returned; a read again below
    self.assertEqual(dead[2], ())
    self.assertCountEqual(dead[3], (a, b))  # both last read by the add
    self.assertNotIn(add.outvars[0], {v for vs in dead for v in vs})
    self.assertNotIn(x, {v for vs in dead for v in vs})


if __name__ == '__main__':
  absltest.main()
