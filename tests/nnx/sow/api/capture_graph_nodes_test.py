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
"""``capture`` over NNX graph nodes: ``f`` runs on copies of its modules and
Variables (staged) or on them (eagerly), and the caller's objects end up as
a direct call of ``f`` leaves them (``lift/graph_calls.py``).
"""

import threading

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import capture
from flax.nnx.sow import sow

import sow_testing


X = jnp.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], jnp.float32)


class Model(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)
    self.norm = nnx.BatchNorm(3, rngs=rngs)
    self.dropout = nnx.Dropout(0.5, rngs=rngs)
    self.calls = nnx.Variable(jnp.zeros((), jnp.int32))
    # A pytree value (a reference can only hold an array).
    self.history = nnx.Variable({'last': jnp.zeros(3)}, ref=False)

  def __call__(self, x):
    self.calls.set_value(self.calls.get_value() + 1)
    h = self.norm(self.linear(x))
    sow(h, name='h', tag='features')
    self.history.set_value({'last': h[0]})
    return self.dropout(h)

  def features(self, x):
    return sow(self.linear(x), name='features')


X_SEMANTICS = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


class _Nested(nnx.Module):
  """Holds nested immutable pytrees of arrays; a call updates one leaf."""

  def __init__(self):
    self.pair = nnx.data(((jnp.zeros(3), jnp.ones(3)), jnp.full(3, 2.0)))

  def __call__(self, x):
    (a, b), c = self.pair
    self.pair = nnx.data(((a + x, b), c))
    return sow(a * b + c, name='h')


class _Counted(nnx.Module):

  def __init__(self):
    self.calls = nnx.BatchStat(jnp.array(0))
    self.w = nnx.Param(jnp.full(3, 2.0))

  def __call__(self, x):
    self.calls[...] += 1
    return sow(x * self.w[...], name='h')


class GraphNodesTest(sow_testing.StateAssertions, parameterized.TestCase):

  @parameterized.parameters(True, False)
  def test_forms_and_updates_like_a_direct_call(self, graph):
    with nnx.set_graph_mode(graph):
      calls = {
          'module': lambda m: (m, (X,), {}),
          'bound method': lambda m: (m.__call__, (X,), {}),
          'argument': lambda m: (lambda m, x: m(x), (m, X), {}),
          'keyword': lambda m: (lambda x, *, m: m(x), (X,), {'m': m}),
          'nested': lambda m: (lambda d, x: d['m'][0](x), ({'m': [m]}, X), {}),
      }
      for name, make in calls.items():
        with self.subTest(name):
          model = Model(nnx.Rngs(0))
          twin = nnx.clone(model)
          graphdef = nnx.graphdef(model)
          f, args, kwargs = make(model)
          with jax.checking_leaks():
            out, collected = capture(f)(*args, **kwargs)
          expected_out = twin(X)  # a direct call, sows ignored
          np.testing.assert_array_equal(out, expected_out)
          self.assertSameState(model, twin)
          self.assertEqual(nnx.graphdef(model), graphdef)
          self.assertEqual(list(collected), ['h'])
          self.assertEqual(int(model.calls.get_value()), 1)

  def test_unchanged_variables_are_not_written(self):
    model = Model(nnx.Rngs(0))
    model.eval()
    kernel = model.linear.kernel.get_raw_value()
    mean = model.norm.mean.get_raw_value()
    out, collected = capture(model.features)(X)
    self.assertIs(model.linear.kernel.get_raw_value(), kernel)
    self.assertIs(model.norm.mean.get_raw_value(), mean)
    expected = X @ kernel + model.linear.bias[None]
    sow_testing.assert_close(out, expected)
    sow_testing.assert_close(collected['features'][0], expected)

  def test_shared_references(self):
    model = Model(nnx.Rngs(0))
    model.tied = model.linear  # shared submodule

    def f(a, b, x):
      self.assertIs(a, b)
      self.assertIs(a.tied, a.linear)
      a.linear.kernel.set_value(a.linear.kernel.get_value() * 2)
      return b.tied(x)

    kernel = model.linear.kernel.get_value()
    out, _ = capture(f)(model, model, X)
    np.testing.assert_array_equal(model.tied.kernel.get_value(), kernel * 2)
    self.assertIs(model.tied, model.linear)
    sow_testing.assert_close(out, X @ (kernel * 2) + model.linear.bias[None])

  def test_returned_nodes(self):
    model = Model(nnx.Rngs(0))
    model.eval()

    def f(m, x):
      y = m(x)
      return m, m.linear.kernel, nnx.State({'y': nnx.Intermediate(y)}), y

    (m, kernel, state, y), _ = capture(f)(model, X)
    self.assertIs(m, model)
    self.assertIs(kernel, model.linear.kernel)
    np.testing.assert_array_equal(state['y'].get_value(), y)
    self.assertIsInstance(state['y'].get_value(), jax.Array)

  def test_new_node_referencing_an_input(self):
    model = Model(nnx.Rngs(0))

    def f(m, x):
      return nnx.Sequential(m.linear, jnp.tanh)

    sequential, _ = capture(f)(model, X)
    self.assertIs(sequential.layers[0], model.linear)

  def test_structural_change_is_written_back(self):
    model = Model(nnx.Rngs(0))

    def f(m, x):
      m.extra = nnx.Variable(x.sum())
      return x

    with jax.checking_leaks():
      capture(f)(model, X)
    np.testing.assert_array_equal(model.extra.get_value(), X.sum())

  def test_tree_mode_refuses_what_nnx_jit_refuses(self):
    # The oracle: nnx.jit in tree mode refuses the same calls; in graph mode
    # (the default) both accept them.
    def tied(a, b, x):
      return b(x)

    def returns_input(m, x):
      return m, m(x)

    def adds_attribute(m, x):
      m.extra = nnx.Variable(x.sum())
      return x

    cases = [
        ('shared', tied, 'shared references'),
        ('returned', returns_input, 'returned a graph node or Variable'),
        ('structure', adds_attribute, 'changed the structure'),
    ]
    for name, f, message in cases:
      with self.subTest(name):
        linear = nnx.Linear(3, 3, rngs=nnx.Rngs(0))
        args = (linear, linear, X) if f is tied else (linear, X)
        graphdef = nnx.graphdef(linear)
        kernel = linear.kernel.get_raw_value()
        with nnx.set_graph_mode(False):
          if f is not adds_attribute:  # tree-mode nnx.jit drops it silently
            with self.assertRaises(ValueError):
              nnx.jit(f)(*args)
          # Staged (here under jax.jit), the call runs on copies.
          with self.assertRaisesRegex(ValueError, 'capture.*' + message):
            jax.jit(lambda x, f=f, args=args: capture(f)(*args[:-1], x))(X)
        # Nothing was written.
        self.assertEqual(nnx.graphdef(linear), graphdef)
        self.assertIs(linear.kernel.get_raw_value(), kernel)
        with nnx.set_graph_mode(False):
          # Eagerly, a direct call, which tree mode does not constrain.
          twin = nnx.clone(linear)
          twin_args = (twin, twin, X) if f is tied else (twin, X)
          out, _ = capture(f)(*args)
          expected = f(*twin_args)
          jax.tree.map(np.testing.assert_array_equal,
                       jax.tree.leaves(out), jax.tree.leaves(expected))
          self.assertEqual(nnx.graphdef(linear), nnx.graphdef(twin))
        with nnx.set_graph_mode(True):
          capture(f)(*args)
          nnx.jit(f)(*args)

  def test_tree_mode_updates_like_a_direct_call(self):
    model = Model(nnx.Rngs(0))
    twin = nnx.clone(model)
    with nnx.set_graph_mode(False):
      out, collected = capture(model)(X)
    np.testing.assert_array_equal(out, twin(X))
    self.assertSameState(model, twin)
    self.assertEqual(list(collected), ['h'])

  def test_static_outputs_are_returned_as_is(self):
    out, _ = capture(lambda m, x: ('label', 3, None, m.linear(x)))(
        Model(nnx.Rngs(0)), X
    )
    self.assertEqual(out[:3], ('label', 3, None))

  def test_a_variable_argument(self):
    counter = nnx.Variable(jnp.zeros(()))

    def f(counter, x):
      counter.set_value(counter.get_value() + x.sum())
      return counter.get_value()

    out, _ = capture(f)(counter, X)
    np.testing.assert_array_equal(counter.get_value(), X.sum())
    np.testing.assert_array_equal(out, X.sum())

  def test_inside_jit(self):
    model = Model(nnx.Rngs(0))
    twin = nnx.clone(model)

    @nnx.jit
    def step(m, x):
      out, collected = capture(m)(x)
      return out, collected['h'][0]

    direct = nnx.jit(lambda m, x: m(x))  # same compiled arithmetic
    for _ in range(2):
      out, h = step(model, X)
      np.testing.assert_array_equal(out, direct(twin, X))
    self.assertSameState(model, twin)
    self.assertEqual(h.shape, (2, 3))

  @parameterized.parameters(dict(hijax=True), dict(ref=True))
  def test_hijax_and_ref_variables(self, **defaults):

    class Normed(nnx.Module):

      def __init__(self, rngs):
        self.model = Model(rngs)
        self.layer_norm = nnx.LayerNorm(3, rngs=rngs)

      def __call__(self, x):
        return self.layer_norm(self.model(x))

    with nnx.var_defaults(**defaults):
      model = Normed(nnx.Rngs(0))
      twin = Normed(nnx.Rngs(0))
    graphdef = nnx.graphdef(model)
    for _ in range(2):
      with jax.checking_leaks():
        out, collected = capture(model)(X)
      expected = twin(X)  # a direct call
      np.testing.assert_array_equal(out, expected)
      self.assertSameState(model, twin)
      self.assertEqual(nnx.graphdef(model), graphdef)
    self.assertEqual(int(model.model.calls.get_value()), 2)
    self.assertEqual(collected['h'][0].shape, (2, 3))

  def test_an_exception_leaves_what_a_direct_call_leaves(self):
    # Eagerly the call is a direct call: the updates made before the error
    # stay, as in `f(twin, X)`, and nothing of the capture's (a path mark).
    model = Model(nnx.Rngs(0))
    twin = nnx.clone(model)

    def f(m, x):
      m(x)
      raise RuntimeError('boom')

    with self.assertRaisesRegex(RuntimeError, 'boom'):
      capture(f)(model, X)
    with self.assertRaisesRegex(RuntimeError, 'boom'):
      f(twin, X)
    self.assertSameState(model, twin)
    self.assertEqual(nnx.graphdef(model), nnx.graphdef(twin))
    self.assertEqual(model.calls.get_value(), 1)

  def test_hijax_variables_are_ordinary_copies_when_staged(self):
    # Staged, the call runs on copies whose Hijax Variables are ordinary
    # ones: Flax 0.12.8's LayerNorm reads `.size`, which a Hijax Variable
    # does not support under a trace. Eagerly, the model's own.
    with nnx.var_defaults(hijax=True):
      model = nnx.Sequential(nnx.Linear(3, 3, rngs=nnx.Rngs(0)),
                             nnx.LayerNorm(3, rngs=nnx.Rngs(0)))
    f = lambda m, x: sow(m(x), name='y')
    expected = model(X)
    out, collected = jax.jit(lambda x: capture(f)(model, x))(X)
    sow_testing.assert_close(out, expected)
    sow_testing.assert_close(collected['y'][0], expected)
    out, collected = capture(f)(model, X)
    np.testing.assert_array_equal(out, expected)  # the same operations

  def test_an_exception_in_a_staged_call_writes_nothing(self):
    # Under a trace the call runs on copies, written back once it succeeded.
    model = Model(nnx.Rngs(0))
    before = nnx.clone(model)

    def f(m, x):
      m(x)
      raise RuntimeError('boom')

    with self.assertRaisesRegex(RuntimeError, 'boom'):
      jax.jit(lambda x: capture(f)(model, x))(X)
    self.assertSameState(model, before)
    self.assertEqual(nnx.graphdef(model), nnx.graphdef(before))

  def test_threads_staging_the_same_model(self):
    model = Model(nnx.Rngs(0))
    model.eval()
    kernel = model.linear.kernel.get_raw_value()
    n = 4
    barrier = threading.Barrier(n)
    results, errors = {}, []

    def f(m, x):
      barrier.wait(60)
      return m.features(x)

    def worker(i):
      try:
        results[i] = capture(f)(model, X * i)
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
      t.start()
    for t in threads:
      t.join(120)
    self.assertEmpty(errors)
    self.assertIs(model.linear.kernel.get_raw_value(), kernel)
    for i in range(n):
      expected = (X * i) @ kernel + model.linear.bias[None]
      sow_testing.assert_close(results[i][0], expected)
      sow_testing.assert_close(results[i][1]['features'][0], expected)


class WriteBackTest(absltest.TestCase):
  """After a capture, the caller's objects are as after a direct call."""

  def test_a_leaf_of_nested_immutable_pytrees(self):
    model, twin = _Nested(), _Nested()
    for _ in range(2):
      out, collected = capture(model)(X_SEMANTICS)
      np.testing.assert_array_equal(out, twin(X_SEMANTICS))
    for got, want in zip(jax.tree.leaves(model.pair),
                         jax.tree.leaves(twin.pair)):
      np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(model.pair[0][0], 2 * np.asarray(X_SEMANTICS))

  def test_reference_variables_under_jit(self):
    with nnx.var_defaults(ref=True):
      model = _Counted()

    @jax.jit
    def run(model, x):
      return capture(model)(x)

    for i in range(1, 3):
      out, collected = run(model, X_SEMANTICS)
      self.assertEqual(int(model.calls[...]), i)
      np.testing.assert_array_equal(out, np.asarray(X_SEMANTICS) * np.float32(2))
      np.testing.assert_array_equal(collected['h'][0], out)


  def test_a_reference_created_inside_comes_out_as_in_a_direct_call(self):
    class MakesReferences(nnx.Module):

      def __init__(self):
        self.cache = nnx.Cache(jnp.zeros(3))

      def __call__(self, x):
        self.cache.set_raw_value(jax.new_ref(x * 2))
        self.held = nnx.data(jax.new_ref(x + 1))
        return sow(x * 3, name='h')

    model, twin = MakesReferences(), MakesReferences()
    out, _ = capture(model)(X_SEMANTICS)
    np.testing.assert_array_equal(out, twin(X_SEMANTICS))
    for got, want in ((model.cache.get_raw_value(), twin.cache.get_raw_value()),
                      (model.held, twin.held)):
      self.assertIs(type(got), type(want))
      np.testing.assert_array_equal(got[...], want[...])


if __name__ == '__main__':
  absltest.main()
