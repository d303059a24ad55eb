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
"""A call over NNX graph nodes, staged on copies and written back
(``lift/graph_calls.py``), evaluated here by JAX itself, with no capture."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow.lift import graph_calls
from flax.nnx.sow.lift import module_paths
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform import staged_sows
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.selection import Selection

X = jnp.array([0.5, -1.0, 2.0], jnp.float32)


class Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)

  def __call__(self, x):
    return jnp.tanh(self.linear(x))


class Model(nnx.Module):

  def __init__(self, rngs):
    self.blocks = nnx.List([Block(rngs), Block(rngs)])
    self.calls = nnx.BatchStat(jnp.zeros((), jnp.int32))

  def __call__(self, x):
    self.calls[...] += 1
    for block in self.blocks:
      x = block(x)
    return x


def evaluate(staged):
  """What the interpreter would do, with no sow to handle: JAX's own."""
  closed = staged.jaxpr
  return jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *staged.inputs)


class StagedTest(absltest.TestCase):

  def test_f_runs_on_copies_whose_updates_are_written_back(self):
    model, twin = Model(nnx.Rngs(0)), Model(nnx.Rngs(0))
    seen = []

    def f(m, x, label):
      seen.append((m, label))
      return m(x)

    calls = model.calls
    with graph_calls.staged(f, (model, X, 'a label'), {}) as staged:
      self.assertEqual(int(model.calls[...]), 0)  # nothing written yet
      out = staged.unflatten_out(evaluate(staged))
    ((copy, label),) = seen
    self.assertIsNot(copy, model)
    self.assertEqual(label, 'a label')  # not an array: reaches f as it is
    np.testing.assert_array_equal(out, twin(X))  # a direct call
    self.assertIs(model.calls, calls)
    self.assertEqual(int(model.calls[...]), 1)
    self.assertLen(staged.inputs, len(jax.tree.leaves(nnx.state(model))) + 1)

  def test_nothing_is_written_unless_the_outputs_are(self):
    model = Model(nnx.Rngs(0))
    with graph_calls.staged(lambda m: m(X), (model,), {}):
      pass  # as when evaluating the jaxpr fails
    self.assertEqual(int(model.calls[...]), 0)

  def test_a_returned_graph_node_is_the_callers(self):
    model = Model(nnx.Rngs(0))
    with graph_calls.staged(lambda m: (m(X), m.blocks[1]), (model,),
                            {}) as staged:
      _, block = staged.unflatten_out(evaluate(staged))
    self.assertIs(block, model.blocks[1])

  def test_the_copies_have_their_paths_while_f_runs(self):
    model = Model(nnx.Rngs(0))
    paths = []

    def f(m, x):
      frame = module_paths.innermost_functional()
      paths.append([frame.path_of(b) for b in m.blocks])
      return m(x)

    with graph_calls.staged(f, (model,), {'x': X}) as staged:
      staged.unflatten_out(evaluate(staged))
    self.assertEqual(paths, [[('blocks', 0), ('blocks', 1)]])
    self.assertEqual(module_paths.FRAMES.stack, [])
    # Only the copies were marked with their paths.
    self.assertNotIn('_pytree__sow_paths', vars(model.blocks[0]))

  def test_sows_are_staged_for_the_interpreter_or_taken(self):
    def f(m, x):
      return primitive.sow(m(x), name='out')

    model = Model(nnx.Rngs(0))
    with graph_calls.staged(f, (model, X), {}) as staged:
      names = [e.params['sow_name']
               for e in primitive.sow_equations(staged.jaxpr.jaxpr)]
      self.assertEqual(names, ['out'])
      self.assertIsNone(staged.harvested)
    request = Request(Selection())
    with graph_calls.staged(f, (model, X), {}, request) as staged:
      self.assertEqual(list(primitive.sow_equations(staged.jaxpr.jaxpr)), [])
      self.assertIsInstance(staged.harvested, staged_sows.Harvested)
      self.assertEqual([s.site.name for s in staged.harvested.sows], ['out'])
      outs = evaluate(staged)
      # The taken sow's value is the last output, after f's own.
      np.testing.assert_array_equal(outs[-1], outs[0])


class CallDirectlyTest(absltest.TestCase):

  def test_f_runs_on_the_callers_objects_in_a_frame(self):
    model, twin = Model(nnx.Rngs(0)), Model(nnx.Rngs(0))
    seen = []

    def f(m, x):
      seen.append((m, module_paths.innermost_functional().path_of(
          m.blocks[1])))
      return m(x)

    out = graph_calls.call_directly(f, (model, X), {})
    self.assertEqual(seen, [(model, ('blocks', 1))])
    np.testing.assert_array_equal(out, twin(X))
    self.assertEqual(int(model.calls[...]), 1)
    self.assertEqual(module_paths.FRAMES.stack, [])


if __name__ == '__main__':
  absltest.main()
