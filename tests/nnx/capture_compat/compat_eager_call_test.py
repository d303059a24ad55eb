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
"""An eager ``nnx.capture`` is a direct call: the function runs on every
call, with the current parameters and inputs."""

import dataclasses
import enum
import sys
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import sow
from flax.nnx.sow.lift import graph_calls

from compat_testing import by_hand, CompatTestCase, FeaturesModel, Net, PerturbedModel, UpdatingModel, X  # pylint: disable=g-multiple-import
import sow_testing


class Kind(enum.Enum):
  """Per layer, like Gemma's ``attention_types``."""

  GLOBAL = 1
  LOCAL = 2


@dataclasses.dataclass
class MLPConfig:  # not frozen: unhashable
  features: list[int]


class ConfiguredMLP(nnx.Module):
  """An MLP whose static configuration holds unhashable values."""

  def __init__(self, config, kinds, rngs):
    self.config = config  # static, unused: only its value matters
    self.kinds = kinds  # static: a list
    self.layers = nnx.List(
        [nnx.Linear(3, 4, rngs=rngs), nnx.Linear(4, 4, rngs=rngs)]
    )

  def __call__(self, x):
    for layer, kind in zip(self.layers, self.kinds):
      h = layer(x)
      x = nnx.relu(h if kind is Kind.GLOBAL else -h)  # a jax.jit function
      self.sow(nnx.Intermediate, 'h', x)
    return x

  @staticmethod
  def by_hand(model, x):
    values = []
    for layer, kind in zip(model.layers, model.kinds):
      h = x @ layer.kernel[...] + layer.bias[...]
      x = jnp.maximum(h if kind is Kind.GLOBAL else -h, 0)
      values.append(x)
    return x, {('h',): values}


_OFFSET = np.float32(0.5)  # a global NumPy scalar, read by Offset


class Offset(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 2, rngs=rngs)

  def __call__(self, x):
    h = self.linear(x) + _OFFSET
    self.sow(nnx.Intermediate, 'h', h)
    return h


class EagerCallTest(CompatTestCase):
  """An eager capture is a direct call: the function runs on every call.

  As in Flax 0.12.8, whatever the arguments, their structure or what the
  function reads besides them. The oracle for each call: the values
  recomputed from the current parameters and inputs, and a direct call on a
  twin for Variable updates. (``eager_external_values_test`` compares the same with
  Flax 0.12.8's own ``nnx.capture``.)
  """

  def count_traces(self):
    traces = []

    def forward(net, x):
      traces.append(None)
      return net(x)

    return forward, traces

  def test_runs_on_every_call(self):
    net = Net(nnx.Rngs(0))
    forward, traces = self.count_traces()
    for i in range(3):
      out, state = nnx.capture(forward, nnx.Intermediate)(net, X + i)
      expected_out, expected = by_hand(net, X + i)
      self.assertTreeClose(out, expected_out)
      self.assertCollected(state, expected)
    self.assertLen(traces, 3)

  def test_new_parameter_values_are_used(self):
    net = Net(nnx.Rngs(0))
    forward, traces = self.count_traces()
    nnx.capture(forward, nnx.Intermediate)(net, X)
    net.head.kernel.set_value(2 * net.head.kernel.get_value())
    out, state = nnx.capture(forward, nnx.Intermediate)(net, X)
    expected_out, expected = by_hand(net, X)
    self.assertTreeClose(out, expected_out)
    self.assertCollected(state, expected)
    self.assertLen(traces, 2)

  def test_another_model_of_the_same_structure(self):
    model = UpdatingModel(nnx.Rngs(0))
    other = UpdatingModel(nnx.Rngs(1))
    other_twin = nnx.clone(other)
    x = jnp.stack([X, X * 2, -X])
    traces = []

    def forward(m, x):
      traces.append(None)
      return m(x)

    def snapshot(m):
      values = []
      for _, var in nnx.to_flat_state(nnx.state(m)):
        value = var.get_value()
        if jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
          value = jax.random.key_data(value)
        values.append(np.asarray(value))
      return values

    nnx.capture(forward, nnx.Intermediate)(model, x)
    model_state = snapshot(model)
    out, state = nnx.capture(forward, nnx.Intermediate)(other, x)
    self.assertLen(traces, 2)
    with self.assertWarns(DeprecationWarning):  # a direct call sows
      expected_out = other_twin(x)
    self.assertTreeClose(out, expected_out)
    # The updates went to `other`, and only to it.
    self.assertEqual(other.calls.get_value(), 1)
    self.assertEqual(model.calls.get_value(), 1)
    np.testing.assert_array_equal(
        other.norm.mean.get_value(), other_twin.norm.mean.get_value()
    )
    for after, before in zip(snapshot(model), model_state, strict=True):
      np.testing.assert_array_equal(after, before)
    self.assertTreeClose(state['h'].get_value()[0],
                         other_twin.h.get_value()[0])

  def test_another_structure(self):
    net = Net(nnx.Rngs(0))
    forward, traces = self.count_traces()
    nnx.capture(forward, nnx.Intermediate)(net, X)
    nnx.capture(forward, nnx.Intermediate)(net, jnp.stack([X, X]))
    nnx.capture(forward, nnx.Intermediate, nnx.Perturbation)(net, X)
    net.head = nnx.Linear(4, 5, rngs=nnx.Rngs(2))
    out, state = nnx.capture(forward, nnx.Intermediate)(net, X)
    self.assertLen(traces, 4)
    expected_out, expected = by_hand(net, X)
    self.assertEqual(out.shape, (5,))
    self.assertTreeClose(out, expected_out)
    self.assertCollected(state, expected)

  def test_other_static_arguments(self):
    net = Net(nnx.Rngs(0))
    traces = []

    def forward(net, x, scale):
      traces.append(scale)
      return net(scale * x)

    for scale in (1.0, 2.0, 2.0):
      out, state = nnx.capture(forward, nnx.Intermediate)(net, X, scale)
      expected_out, expected = by_hand(net, scale * X)
      self.assertTreeClose(out, expected_out)
      self.assertCollected(state, expected)
    self.assertEqual(traces, [1.0, 2.0, 2.0])

  def test_unhashable_static_arguments(self):
    class Scale:  # compared by value, so not hashable
      __hash__ = None

      def __init__(self, value):
        self.value = value

      def __eq__(self, other):
        return isinstance(other, Scale) and other.value == self.value

    net = Net(nnx.Rngs(0))
    traces = []

    def forward(net, x, scale):
      traces.append(scale.value)
      return net(scale.value * x)

    def check(scale):
      out, state = nnx.capture(forward, nnx.Intermediate)(net, X, scale)
      expected_out, expected = by_hand(net, scale.value * X)
      self.assertTreeClose(out, expected_out)
      self.assertCollected(state, expected)

    for value in (1.0, 2.0, 2.0):
      check(Scale(value))
    self.assertEqual(traces, [1.0, 2.0, 2.0])
    # The same object changed in place.
    scale = Scale(3.0)
    check(scale)
    scale.value = 4.0
    check(scale)
    self.assertEqual(traces, [1.0, 2.0, 2.0, 3.0, 4.0])

  def test_uncopyable_unhashable_static_arguments(self):
    class Opaque:  # unhashable, and no copy of it is equal to it
      __hash__ = None

      def __init__(self, value):
        self.value = value

      def __deepcopy__(self, memo):
        raise TypeError('not copyable')

    net = Net(nnx.Rngs(0))
    traces = []

    def forward(net, x, opaque):
      traces.append(opaque.value)
      return net(opaque.value * x)

    opaque = Opaque(2.0)
    for _ in range(2):
      out, state = nnx.capture(forward, nnx.Intermediate)(net, X, opaque)
      expected_out, expected = by_hand(net, 2.0 * X)
      self.assertTreeClose(out, expected_out)
      self.assertCollected(state, expected)
    self.assertEqual(traces, [2.0, 2.0])

  @parameterized.named_parameters(
      ('list', lambda: [4, 4]),
      ('dict', lambda: {'features': [4, 4], 'dropout': None}),
      ('dataclass', lambda: MLPConfig(features=[4, 4])),
      ('nested', lambda: {'blocks': [MLPConfig([4]), MLPConfig([4])]}),
  )
  def test_unhashable_static_configuration_compiles_once(self, config):
    # A list, a dict or a dataclass in a module's static configuration: the
    # jits inside keep their compiled programs, as in Flax 0.12.8 (a cache
    # of traces keyed by the configuration once re-traced and recompiled
    # them on every call).
    model = ConfiguredMLP(config(), [Kind.GLOBAL, Kind.LOCAL], nnx.Rngs(0))
    with self.assertRaises(TypeError):
      hash(nnx.graphdef(model))  # what the test is about
    forward, traces = self.count_traces()
    jax.clear_caches()  # so that the first capture compiles what it runs
    xs = [X + i for i in range(3)]
    results = []
    # Only the captures are counted: the oracle's own first operations
    # would compile too, whatever ran before this test.
    with sow_testing.count_compiles() as compiles:
      for i, x in enumerate(xs):
        results.append(nnx.capture(forward, nnx.Intermediate)(model, x))
        if i == 0:
          first = len(compiles)
    self.assertGreater(first, 0)  # the first call compiles its jits
    self.assertLen(compiles, first)  # and later calls nothing
    self.assertLen(traces, 3)
    for x, (out, state) in zip(xs, results):
      expected_out, expected = ConfiguredMLP.by_hand(model, x)
      self.assertTreeClose(out, expected_out)
      self.assertCollected(state, expected)

  def test_static_configuration_changed_in_place(self):
    model = ConfiguredMLP([4, 4], [Kind.GLOBAL, Kind.GLOBAL], nnx.Rngs(0))
    forward, traces = self.count_traces()
    for kinds in ([Kind.GLOBAL, Kind.GLOBAL], [Kind.GLOBAL, Kind.LOCAL]):
      model.kinds[:] = kinds  # the same list, changed in place
      for _ in range(2):
        out, state = nnx.capture(forward, nnx.Intermediate)(model, X)
        expected_out, expected = ConfiguredMLP.by_hand(model, X)
        self.assertTreeClose(out, expected_out)
        self.assertCollected(state, expected)
    self.assertLen(traces, 4)

  def test_closed_over_arrays_are_read_on_every_call(self):
    # A direct call reads the current weights of a module the function
    # closes over.
    net = Net(nnx.Rngs(0))
    head = nnx.Linear(2, 2, rngs=nnx.Rngs(3))
    traces = []

    def forward(net, x):
      traces.append(None)
      return head(net(x))

    for scale in (1.0, 3.0):
      head.kernel.set_value(scale * head.kernel.get_value())
      out, state = nnx.capture(forward, nnx.Intermediate)(net, X)
      net_out, expected = by_hand(net, X)
      self.assertTreeClose(out, head(net_out))
      self.assertCollected(state, expected)
    self.assertLen(traces, 2)

  @parameterized.named_parameters(('nnx_capture', True), ('capture', False))
  def test_closed_over_global_arrays_compile_nothing_again(self, compat):
    # The notebook pattern (issue 19): a function closing over global
    # arrays (positions, a mask) with jitted parts inside. Every later call
    # must hit every compiled program of the first: 8 XLA compiles per call
    # on a 3-layer Gemma once, none with Flax 0.12.8.
    net = Net(nnx.Rngs(0))
    scale = jnp.array([1.0, 2.0, 3.0])  # closed over, as `pos`/`mask` are
    mask = jnp.array([True, False, True])
    jitted_block = nnx.jit(lambda block, x: block(x))
    head = jax.jit(lambda x, m: jnp.where(m[:2], x, 0.0))

    def forward(net, x):
      h = jitted_block(net.blocks[0], x * scale)
      h = net.blocks[1](h)
      return head(net.head(h), mask)

    def call(x):
      if compat:
        return nnx.capture(forward, nnx.Intermediate)(net, x)
      return sow.capture(forward)(net, x)

    def by_hand_out(x):
      h = x * scale
      for block in net.blocks:
        h = jnp.tanh(h @ block.linear.kernel[...] + block.linear.bias[...])
      out = h @ net.head.kernel[...] + net.head.bias[...]
      return jnp.where(mask[:2], out, 0.0)

    xs = [X + i for i in range(5)]
    expected = [by_hand_out(x) for x in xs]  # compiled before counting
    call(xs[0])
    with sow_testing.count_compiles() as compiles:
      results = [call(x) for x in xs[1:]]
    self.assertEmpty(compiles)
    for (out, _), want in zip(results, expected[1:]):
      self.assertTreeClose(out, want)

  def test_closed_over_numpy_scalars_are_read_on_every_call(self):
    # JAX inlines a NumPy scalar or 0-d array as a literal of a jaxpr: a
    # reused trace would keep the value it was traced with.
    model = Offset(nnx.Rngs(0))
    scale = np.float32(2.0)  # a closure cell, rebound below
    table = np.array(1.0, np.float32)  # a 0-d array, changed in place
    traces = []

    def forward(m, x):
      traces.append(None)
      return m(x) * scale + table

    def check():
      out, state = nnx.capture(forward, nnx.Intermediate)(model, X)
      # A direct call, with the values as they are now.
      h = X @ model.linear.kernel[...] + model.linear.bias[...] + _OFFSET
      self.assertTreeClose(out, h * scale + table)
      self.assertCollected(state, {('h',): [h]})

    check()
    check()
    self.assertLen(traces, 2)
    scale = np.float32(3.0)
    check()
    self.assertLen(traces, 3)
    table[...] = 4.0
    check()
    self.assertLen(traces, 4)
    # A global the module's method reads.
    with mock.patch.object(sys.modules[__name__], '_OFFSET',
                           np.float32(-1.5)):
      check()
      check()
    self.assertLen(traces, 6)

  def test_method_outputs_and_init_without_a_trace(self):
    # The sites of the watched methods and the perturbations given in `init`
    # are found as the call runs: each call collects its own values, and no
    # call is staged.
    trace = self.enter_context(mock.patch.object(
        graph_calls.Prepared, 'trace', autospec=True,
        side_effect=graph_calls.Prepared.trace,
    ))
    model = FeaturesModel(nnx.Rngs(0))
    for i in range(3):
      x = X + i
      _, state = nnx.capture(
          model, nnx.Intermediate, method_outputs=nnx.Intermediate
      )(x)
      features = x @ model.linear.kernel[...] + model.linear.bias[...]
      self.assertCollected(state, {
          ('__call__',): [(features + 1).sum()],
          ('features',): [features],
          ('linear', '__call__'): [features],
      })
    model = PerturbedModel(nnx.Rngs(0))
    _, perturbations = nnx.capture(model, nnx.Perturbation)(X)
    for i in range(3):
      shift = jnp.full(3, float(i), jnp.float32)  # the perturbed dtype
      perturbations['h'].set_value(shift)
      out, sowed = nnx.capture(model, nnx.Intermediate,
                               init=perturbations)(X)
      h = X @ model.a.kernel[...] + model.a.bias[...] + shift
      expected = jnp.sum((jnp.tanh(h) @ model.b.kernel[...]
                          + model.b.bias[...]) ** 2)
      self.assertTreeClose(out, expected)
      self.assertCollected(sowed, {('h',): [h]})
    self.assertEqual(trace.call_count, 0)

  def test_staged_under_a_transform(self):
    net = Net(nnx.Rngs(0))
    forward, traces = self.count_traces()

    def loss(x):
      out, _ = nnx.capture(forward, nnx.Intermediate)(net, x)
      return out.sum()

    def loss_by_hand(x):
      return by_hand(net, x)[0].sum()

    for i in range(2):
      self.assertTreeClose(jax.grad(loss)(X + i),
                           jax.grad(loss_by_hand)(X + i))
    self.assertLen(traces, 2)  # the enclosing grad is what gets traced


if __name__ == '__main__':
  absltest.main()
