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
"""Tests of flax.nnx.capture_compat: nnx.capture on the sow transform.

Oracles: Flax 0.12.8's own implementation (``sow_legacy.capture``, where
it works), values recomputed directly from the model's parameters, and
``jax.grad`` of explicit functions.
"""

import dataclasses
import enum
import functools
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from unittest import mock
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

import flax
from flax import nnx
from flax.nnx import capture_compat
from flax.nnx import module as module_lib
from flax.nnx import sow
from flax.nnx.sow.lift import graph_calls
import sow_legacy
import sow_pytree_models
import sow_testing

X = jnp.array([0.5, -1.0, 2.0], jnp.float32)

class Block(nnx.Module):

  def __init__(self, din, dout, rngs):
    self.linear = nnx.Linear(din, dout, rngs=rngs)

  def __call__(self, x):
    h = self.linear(x)
    self.sow(nnx.Intermediate, 'h', h)
    return jnp.tanh(h)


class Net(nnx.Module):

  def __init__(self, rngs, shared=False):
    self.blocks = nnx.List([Block(3, 4, rngs), Block(4, 4, rngs)])
    self.head = nnx.Linear(4, 2, rngs=rngs)
    if shared:
      self.again = self.blocks[1]

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    if hasattr(self, 'again'):
      x = self.again(x)
    out = self.head(x)
    self.sow(nnx.Intermediate, 'out', out)
    return out


def by_hand(net, x):
  """Net's sown values, recomputed from its parameters: {path: [values]}."""
  values = {}
  blocks = list(net.blocks)
  if hasattr(net, 'again'):
    blocks.append(net.again)
  for block in blocks:
    h = x @ block.linear.kernel[...] + block.linear.bias[...]
    path = ('blocks', list(net.blocks).index(block), 'h')
    values.setdefault(path, []).append(h)
    x = jnp.tanh(h)
  out = x @ net.head.kernel[...] + net.head.bias[...]
  values[('out',)] = [out]
  return out, values


flat = sow_testing.flat


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


class Clipped(sow_pytree_models.Clipped):
  """Records its features with ``Module.sow``."""

  def record(self, h):
    self.sow(nnx.Intermediate, 'h', h)
    return h


PYTREES = sow_pytree_models.PYTREES
lo_hi = sow_pytree_models.lo_hi


class CompatTestCase(sow_testing.StateAssertions, parameterized.TestCase):
  """Installs the compat layer for each test and checks it left no residue."""

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.install())

  def tearDown(self):
    self.assertEmpty(capture_compat.frames.FRAMES.stack)
    super().tearDown()

  def assertCollected(self, state, values: dict, var_type=nnx.Intermediate):
    """``state`` holds exactly ``values`` ({path: [value, ...]}) as tuples."""
    got = flat(state)
    self.assertEqual(sorted(p for p, _, _ in got), sorted(values))
    for path, t, value in got:
      self.assertIs(t, var_type)
      self.assertIsInstance(value, tuple)
      self.assertTreeClose(value, tuple(values[path]))


class FormsTest(CompatTestCase):
  """Flax 0.12.8's calling conventions, against the legacy implementation."""

  def test_function_form(self):
    net = Net(nnx.Rngs(0))

    def forward(model, x):
      return model(x)

    out, state = nnx.capture(forward, nnx.Intermediate)(net, X)
    out_legacy, state_legacy = sow_legacy.capture(
        forward, nnx.Intermediate
    )(net, X)
    self.assertStatesEqual(state, state_legacy)
    expected_out, expected = by_hand(net, X)
    self.assertCollected(state, expected)
    self.assertTreeClose(out, expected_out)
    self.assertTreeClose(out_legacy, expected_out)

  def test_bound_method_and_module_forms(self):
    net = Net(nnx.Rngs(0))
    _, expected = by_hand(net, X)
    for fn in (net, net.__call__):
      with self.subTest(type(fn).__name__):
        out, state = nnx.capture(fn, nnx.Intermediate)(X)
        _, state_legacy = sow_legacy.capture(fn, nnx.Intermediate)(X)
        self.assertStatesEqual(state, state_legacy)
        self.assertCollected(state, expected)
        self.assertTreeClose(out, by_hand(net, X)[0])

  def test_decorator_form(self):
    net = Net(nnx.Rngs(0))

    @nnx.capture(nnx.Intermediate)
    def forward(model, x):
      return model(x)

    @sow_legacy.capture(nnx.Intermediate)
    def forward_legacy(model, x):
      return model(x)

    _, state = forward(net, X)
    _, state_legacy = forward_legacy(net, X)
    self.assertStatesEqual(state, state_legacy)
    self.assertEqual(forward.__name__, 'forward')

  def test_number_of_types(self):

    class Stat(nnx.Variable):
      pass

    class Two(nnx.Module):

      def __call__(self, x):
        self.sow(nnx.Intermediate, 'a', x + 1)
        self.sow(Stat, 'b', x * 2)
        return x.sum()

    model = Two()
    out = nnx.capture(model)(X)
    self.assertTreeClose(out, X.sum())
    for types in [(nnx.Intermediate,), (Stat,), (Stat, nnx.Intermediate)]:
      with self.subTest(types):
        got = nnx.capture(model, *types)(X)
        want = sow_legacy.capture(model, *types)(X)
        self.assertLen(got, 1 + len(types))
        for state, state_legacy in zip(got[1:], want[1:]):
          self.assertStatesEqual(state, state_legacy)
    _, stat, inter = nnx.capture(model, Stat, nnx.Intermediate)(X)
    self.assertCollected(stat, {('b',): [X * 2]}, Stat)
    self.assertCollected(inter, {('a',): [X + 1]})

  def test_calls_are_tuples_in_call_order(self):
    block = Block(3, 3, nnx.Rngs(1))

    def thrice(block, x):
      return block(block(block(x)))

    _, state = nnx.capture(thrice, nnx.Intermediate)(block, X)
    _, state_legacy = sow_legacy.capture(thrice, nnx.Intermediate)(
        block, X
    )
    self.assertStatesEqual(state, state_legacy)
    w, b = block.linear.kernel[...], block.linear.bias[...]
    h1 = X @ w + b
    h2 = jnp.tanh(h1) @ w + b
    h3 = jnp.tanh(h2) @ w + b
    self.assertCollected(state, {('h',): [h1, h2, h3]})

  def test_custom_reduce_and_init(self):

    class Stats(nnx.Module):

      def __call__(self, x):
        self.sow(nnx.Intermediate, 'sum', x, init_fn=lambda: 0,
                 reduce_fn=lambda total, v: total + v)
        self.sow(nnx.Intermediate, 'max', x, init_fn=lambda: -jnp.inf,
                 reduce_fn=jnp.maximum)
        self.sow(nnx.Intermediate, 'last', x,
                 reduce_fn=lambda previous, v: v)
        self.sow(nnx.Intermediate, 'count', x, init_fn=lambda: 0,
                 reduce_fn=lambda n, v: n + 1)
        return x * 2 - 3

    model = Stats()

    def run(model, x):
      return model(model(model(x)))

    _, state = nnx.capture(run, nnx.Intermediate)(model, X)
    _, state_legacy = sow_legacy.capture(run, nnx.Intermediate)(model, X)
    self.assertStatesEqual(state, state_legacy)
    xs = [X, X * 2 - 3, (X * 2 - 3) * 2 - 3]
    self.assertTreeClose(state['sum'].get_value(), xs[0] + xs[1] + xs[2])
    self.assertTreeClose(
        state['max'].get_value(), np.maximum(np.maximum(xs[0], xs[1]), xs[2])
    )
    self.assertTreeClose(state['last'].get_value(), xs[2])
    self.assertEqual(state['count'].get_value(), 3)

  def test_variable_type_by_name(self):

    class Named(nnx.Module):

      def __call__(self, x):
        self.sow('my_stats', 's', x + 1)
        return x

    model = Named()
    stats_type = nnx.variablelib.variable_type_from_name(
        'my_stats', allow_register=True
    )
    _, state = nnx.capture(model, stats_type)(X)
    _, state_legacy = sow_legacy.capture(model, stats_type)(X)
    self.assertStatesEqual(state, state_legacy)
    self.assertCollected(state, {('s',): [X + 1]}, stats_type)

  def test_shared_submodule_uses_first_path(self):
    net = Net(nnx.Rngs(0), shared=True)
    paths = [p for p, m in nnx.iter_modules(net) if m is net.blocks[1]]
    self.assertEqual(paths, [('again',)] if paths[0] == ('again',) else
                     [('blocks', 1)])
    _, state = nnx.capture(net, nnx.Intermediate)(X)
    _, state_legacy = sow_legacy.capture(net, nnx.Intermediate)(X)
    self.assertStatesEqual(state, state_legacy)
    _, expected = by_hand(net, X)
    first = paths[0]
    expected = {
        (first + ('h',) if p == ('blocks', 1, 'h') else p): v
        for p, v in expected.items()
    }
    self.assertCollected(state, expected)

  def test_sow_return_value(self):
    results = {}

    class Reports(nnx.Module):

      def __call__(self, x):
        results['intermediate'] = self.sow(nnx.Intermediate, 'a', x)
        results['perturbation'] = self.sow(nnx.Perturbation, 'b', x)
        return x

    model = Reports()
    for capture in (nnx.capture, sow_legacy.capture):
      with self.subTest(capture.__module__):
        results.clear()
        capture(model, nnx.Intermediate)(X)
        self.assertEqual(
            results, {'intermediate': True, 'perturbation': False}
        )

  def test_non_array_values_like_legacy(self):
    # A Python number passed as a non-traced argument stays a Python number.
    class Scale(nnx.Module):

      def __call__(self, x, factor):
        self.sow(nnx.Intermediate, 'factor', factor * 2)
        return x * factor

    model = Scale()
    _, state = nnx.capture(model, nnx.Intermediate)(X, 1.5)
    _, state_legacy = sow_legacy.capture(model, nnx.Intermediate)(X, 1.5)
    self.assertEqual(flat(state), flat(state_legacy))
    self.assertEqual(state['factor'].get_value(), (3.0,))

  def test_non_array_values_raise(self):

    class Labels(nnx.Module):

      def __call__(self, x):
        self.sow(nnx.Intermediate, 'label', 'positive')
        return x

    with self.assertRaisesRegex(TypeError, 'every leaf must be an array'):
      nnx.capture(Labels(), nnx.Intermediate)(X)
    _, state_legacy = sow_legacy.capture(Labels(), nnx.Intermediate)(X)
    self.assertEqual(state_legacy['label'].get_value(), ('positive',))

  def test_modules_outside_the_root_use_the_deprecated_path(self):
    net = Net(nnx.Rngs(0))

    def forward(net, other, x):
      return net(other(x[:2]))

    for capture in (nnx.capture, sow_legacy.capture):
      with self.subTest(capture.__module__):
        other = Block(2, 3, nnx.Rngs(1))
        with self.assertWarns(DeprecationWarning):
          _, state = capture(forward, nnx.Intermediate)(net, other, X)
        self.assertEqual(
            sorted(p for p, _, _ in flat(state)),
            [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('out',)],
        )
        h = X[:2] @ other.linear.kernel[...] + other.linear.bias[...]
        self.assertTreeClose(other.h.get_value(), (h,))
    # A module the captured function closes over is none of the capture's:
    # eagerly, as in Flax 0.12.8, its sow takes the deprecated path and
    # writes to it.
    for capture in (nnx.capture, sow_legacy.capture):
      with self.subTest(f'closed over, {capture.__module__}'):
        closed_over = Block(2, 3, nnx.Rngs(1))
        with self.assertWarns(DeprecationWarning):
          capture(lambda net, x: net(closed_over(x[:2])), nnx.Intermediate)(
              net, X
          )
        h = X[:2] @ closed_over.linear.kernel[...] + (
            closed_over.linear.bias[...])
        self.assertTreeClose(closed_over.h.get_value(), (h,))
    # Staged (under a jit), it cannot be written to from inside the trace.
    closed_over = Block(2, 3, nnx.Rngs(1))
    with self.assertRaises(flax.errors.TraceContextError) as e:
      jax.jit(lambda x: nnx.capture(
          lambda net, x: net(closed_over(x[:2])), nnx.Intermediate
      )(net, x))(X)
    self.assertIn('not reachable', '\n'.join(e.exception.__notes__))

  def test_values_are_concrete_eagerly(self):
    # As in Flax 0.12.8 and a direct call: Python control flow on values.
    net = Net(nnx.Rngs(0))

    def forward(net, x):
      out = net(x)
      return out if float(out.sum()) > 0 else -out  # needs a concrete value

    expected_out, expected = by_hand(net, X)
    expected_out = expected_out if expected_out.sum() > 0 else -expected_out
    for capture in (nnx.capture, sow_legacy.capture):
      with self.subTest(capture.__module__):
        out, state = capture(forward, nnx.Intermediate)(net, X)
        self.assertTreeClose(out, expected_out)
        self.assertCollected(state, expected)
    # Under a jit, the call is staged and its values traced.
    with self.assertRaises(jax.errors.ConcretizationTypeError):
      jax.jit(lambda x: nnx.capture(forward, nnx.Intermediate)(net, x))(X)

  def test_mha_sow_weights(self):
    mha = nnx.MultiHeadAttention(
        num_heads=2, in_features=4, qkv_features=4, decode=False,
        rngs=nnx.Rngs(0),
    )
    x = jax.random.normal(jax.random.key(1), (3, 4))
    out, state = nnx.capture(
        lambda m, x: m(x, sow_weights=True), nnx.Intermediate
    )(mha, x)
    out_legacy, state_legacy = sow_legacy.capture(
        lambda m, x: m(x, sow_weights=True), nnx.Intermediate
    )(mha, x)
    self.assertStatesEqual(state, state_legacy)
    self.assertTreeEqual(out, out_legacy)
    # Recompute the weights from the projections.
    q, k = mha.query(x), mha.key(x)
    logits = jnp.einsum('qhd,khd->hqk', q, k) / jnp.sqrt(q.shape[-1])
    self.assertCollected(
        state, {('attention_weights',): [jax.nn.softmax(logits)]}
    )

  def test_signature_of_legacy(self):
    self.assertEqual(
        inspect.signature(sow_legacy.capture).parameters.keys(),
        inspect.signature(sow_legacy.flax_capture()).parameters.keys(),
    )
    self.assertEqual(
        inspect.signature(capture_compat.capture).parameters.keys(),
        inspect.signature(sow_legacy.flax_capture()).parameters.keys(),
    )


class MethodOutputsTest(CompatTestCase):

  class Model(nnx.Module):

    def __init__(self, rngs):
      self.linear = nnx.Linear(3, 2, rngs=rngs)

    def features(self, x):
      return self.linear(x)

    def _private(self, x):
      return x + 1

    def __call__(self, x):
      return self._private(self.features(x)).sum()

  def test_like_legacy(self):
    model = self.Model(nnx.Rngs(0))
    kwargs = dict(method_outputs=nnx.Intermediate)
    out, state = nnx.capture(model, nnx.Intermediate, **kwargs)(X)
    out_legacy, state_legacy = sow_legacy.capture(
        model, nnx.Intermediate, **kwargs
    )(X)
    self.assertStatesEqual(state, state_legacy)
    features = X @ model.linear.kernel[...] + model.linear.bias[...]
    self.assertCollected(state, {
        ('__call__',): [(features + 1).sum()],
        ('features',): [features],
        ('linear', '__call__'): [features],
    })
    self.assertTreeEqual(out, out_legacy)

  def test_no_class_is_modified(self):
    model = self.Model(nnx.Rngs(0))
    classes = (self.Model, nnx.Linear)
    before = [dict(vars(cls)) for cls in classes]

    def forward(model, x):
      during = [dict(vars(cls)) for cls in classes]
      self.assertEqual(during, before)
      return model(x)

    nnx.capture(forward, nnx.Intermediate, method_outputs=nnx.Intermediate)(
        model, X
    )
    self.assertEqual([dict(vars(cls)) for cls in classes], before)

  def test_other_instances_are_not_affected(self):
    model = self.Model(nnx.Rngs(0))
    other = self.Model(nnx.Rngs(1))

    def forward(model, x):
      return model(x) + other(x)

    with warnings.catch_warnings():
      warnings.simplefilter('error')  # legacy would warn here
      _, state = nnx.capture(
          forward, nnx.Intermediate, method_outputs=nnx.Intermediate
      )(model, X)
    self.assertNotIn('features', vars(other))
    self.assertEqual(
        sorted(p for p, _, _ in flat(state)),
        [('__call__',), ('features',), ('linear', '__call__')],
    )
    # Legacy wraps the class, so `other` goes through the deprecated path,
    # which fails on the method's own name.
    with self.assertRaisesRegex(ValueError, 'to be a Variable, got method'):
      sow_legacy.capture(
          forward, nnx.Intermediate, method_outputs=nnx.Intermediate
      )(model, X)

  def test_concurrent_instance_of_the_same_class(self):
    model = self.Model(nnx.Rngs(0))
    other = self.Model(nnx.Rngs(1))
    started, release = threading.Event(), threading.Event()
    errors = []

    def forward(model, x):
      started.set()
      release.wait(30)
      return model(x)

    def capture_thread():
      try:
        nnx.capture(forward, nnx.Intermediate,
                    method_outputs=nnx.Intermediate)(model, X)
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)

    thread = threading.Thread(target=capture_thread)
    thread.start()
    started.wait(30)
    with warnings.catch_warnings():
      warnings.simplefilter('error')
      out = other(X)  # runs while the capture is being traced
    release.set()
    thread.join(60)
    self.assertEmpty(errors)
    self.assertNotIn('features', vars(other))
    expected = ((X @ other.linear.kernel[...] + other.linear.bias[...]) + 1)
    self.assertTreeClose(out, expected.sum())

  def test_methods_sharing_a_decorator(self):
    # Every method a `functools.wraps` decorator returns runs the code of its
    # one wrapper: each must still be sown under its own name.

    def logged(method):
      @functools.wraps(method)
      def wrapper(self, *args, **kwargs):
        return method(self, *args, **kwargs)

      return wrapper

    class Decorated(nnx.Module):

      def __init__(self, rngs):
        self.linear = nnx.Linear(3, 3, rngs=rngs)

      @logged
      def double(self, x):
        return 2 * self.linear(x)

      @logged
      def shift(self, x):
        return x + 1

      def __call__(self, x):
        return self.shift(self.double(x)).sum()

    model = Decorated(nnx.Rngs(0))
    kwargs = dict(method_outputs=nnx.Intermediate)
    out, state = nnx.capture(model, nnx.Intermediate, **kwargs)(X)
    out_legacy, state_legacy = sow_legacy.capture(
        model, nnx.Intermediate, **kwargs
    )(X)
    self.assertStatesEqual(state, state_legacy)
    self.assertTreeEqual(out, out_legacy)
    double = 2 * (X @ model.linear.kernel[...] + model.linear.bias[...])
    self.assertCollected(state, {
        ('double',): [double],
        ('shift',): [double + 1],
        ('__call__',): [(double + 1).sum()],
        ('linear', '__call__'): [double / 2],
    })

  @parameterized.parameters(True, False)
  def test_remat_and_jit_methods(self, graph):
    with nnx.set_graph_mode(graph):

      class Transformed(nnx.Module):

        def __init__(self, rngs):
          self.linear = nnx.Linear(3, 3, rngs=rngs)

        @nnx.remat
        def rematerialized(self, x):
          return jnp.sin(self.linear(x))

        @nnx.jit
        def compiled(self, x):
          return jnp.cos(x) * 2

        @nnx.remat
        def other(self, x):  # shares `rematerialized`'s wrapper code
          return x * 3

        def __call__(self, x):
          return self.other(self.compiled(self.rematerialized(x)))

      model = Transformed(nnx.Rngs(0))
      kwargs = dict(method_outputs=nnx.Intermediate)
      out, state = nnx.capture(model, nnx.Intermediate, **kwargs)(X)
      out_legacy, state_legacy = sow_legacy.capture(
          model, nnx.Intermediate, **kwargs
      )(X)
    self.assertStatesEqual(state, state_legacy)
    self.assertTreeEqual(out, out_legacy)
    linear = X @ model.linear.kernel[...] + model.linear.bias[...]
    h = jnp.sin(linear)
    c = jnp.cos(h) * 2
    self.assertCollected(state, {
        ('linear', '__call__'): [linear],
        ('rematerialized',): [h],
        ('compiled',): [c],
        ('other',): [c * 3],
        ('__call__',): [c * 3],
    })

  def test_a_profiler_keeps_running(self):
    # Method outputs are not watched through the interpreter's profile hook:
    # a profiler (cProfile, a debugger) set before the capture sees the call.
    model = self.Model(nnx.Rngs(0))
    seen = []

    def forward(model, x):
      seen.append(sys.getprofile())
      return model(x)

    def profiler(py_frame, event, arg):
      del arg
      if event == 'call' and py_frame.f_code is forward.__code__:
        seen.append('called')

    previous = sys.getprofile()
    sys.setprofile(profiler)
    try:
      _, state = nnx.capture(
          forward, nnx.Intermediate, method_outputs=nnx.Intermediate
      )(model, X)
    finally:
      sys.setprofile(previous)
    self.assertEqual(seen, ['called', profiler])
    self.assertIn(('features',), [p for p, _, _ in flat(state)])

  def test_copies_watch_methods_in_a_subclass_of_their_own(self):
    model = self.Model(nnx.Rngs(0))
    inside = []

    def forward(model, x):
      inside.append(type(model))
      return model(x)

    graphdef = nnx.graphdef(model)
    nnx.capture(forward, nnx.Intermediate, method_outputs=nnx.Intermediate)(
        model, X
    )
    cls = inside[0]
    self.assertIsNot(cls, self.Model)
    self.assertTrue(issubclass(cls, self.Model))
    self.assertEqual(cls.__qualname__, self.Model.__qualname__)
    # Outside the call, every module has its own class again.
    self.assertIs(type(model), self.Model)
    self.assertEqual(nnx.graphdef(model), graphdef)
    self.assertNotIn('__class__', dict(model._pytree__nodes))
    # One subclass per class, whatever the number of captures (another
    # shape, so that the call is traced again).
    nnx.capture(forward, nnx.Intermediate, method_outputs=nnx.Intermediate)(
        model, X[None]
    )
    self.assertIs(inside[1], cls)

  def test_method_that_raises_is_not_sown(self):

    class Fragile(nnx.Module):

      def risky(self, x, fail):
        if fail:
          raise ValueError('no')
        return x

      def __call__(self, x):
        try:
          self.risky(x, True)
        except ValueError:
          pass
        return self.risky(x, False)

    _, state = nnx.capture(
        Fragile(), nnx.Intermediate, method_outputs=nnx.Intermediate
    )(X)
    _, state_legacy = sow_legacy.capture(
        Fragile(), nnx.Intermediate, method_outputs=nnx.Intermediate
    )(X)
    self.assertStatesEqual(state, state_legacy)
    self.assertCollected(state, {('risky',): [X], ('__call__',): [X]})


class PerturbTest(CompatTestCase):

  class Model(nnx.Module):

    def __init__(self, rngs):
      self.a = nnx.Linear(3, 3, rngs=rngs)
      self.b = nnx.Linear(3, 1, rngs=rngs)

    def __call__(self, x):
      h = self.a(x)
      h = self.perturb('h', h)
      self.sow(nnx.Intermediate, 'h', h)
      return jnp.sum(self.b(jnp.tanh(h)) ** 2)

  def test_two_phase_workflow(self):
    model = self.Model(nnx.Rngs(0))
    results = {}
    for name, capture in (('new', nnx.capture),
                          ('legacy', sow_legacy.capture)):
      _, perturbations = capture(model, nnx.Perturbation)(X)

      def loss(model, perturbations, x, capture=capture):
        return capture(model, nnx.Intermediate, init=perturbations)(x)

      (grads, perturb_grads), sowed = nnx.grad(
          loss, argnums=(0, 1), has_aux=True
      )(model, perturbations, X)
      results[name] = (perturbations, grads, perturb_grads, sowed)
    for new, old in zip(results['new'], results['legacy']):
      self.assertStatesEqual(new, old)
    perturbations, grads, perturb_grads, sowed = results['new']
    self.assertTreeClose(perturbations['h'].get_value(), jnp.zeros(3))
    # Oracle: the gradient of the loss as an explicit function of h.
    kernel, bias = model.b.kernel[...], model.b.bias[...]
    h = X @ model.a.kernel[...] + model.a.bias[...]
    dh = jax.grad(lambda h: jnp.sum((jnp.tanh(h) @ kernel + bias) ** 2))(h)
    self.assertTreeClose(perturb_grads['h'].get_value(), dh)
    self.assertCollected(sowed, {('h',): [h]})

  def test_perturbation_under_its_own_type(self):
    model = self.Model(nnx.Rngs(0))
    h = X @ model.a.kernel[...] + model.a.bias[...]
    _, inter, pert = nnx.capture(model, nnx.Intermediate, nnx.Perturbation)(X)
    self.assertCollected(inter, {('h',): [h]})
    self.assertEqual(
        [(p, t) for p, t, _ in flat(pert)], [(('h',), nnx.Perturbation)]
    )
    self.assertTreeClose(pert['h'].get_value(), jnp.zeros(3))
    # Flax 0.12.8 files the perturbation under Intermediate (behavior change).
    _, inter_legacy, pert_legacy = sow_legacy.capture(
        model, nnx.Intermediate, nnx.Perturbation
    )(X)
    self.assertEqual(
        [(p, t) for p, t, _ in flat(inter_legacy)],
        [(('h',), nnx.Perturbation)],
    )
    self.assertEmpty(flat(pert_legacy))

  def test_init_types_not_in_var_types(self):
    model = self.Model(nnx.Rngs(0))
    _, perturbations = nnx.capture(model, nnx.Perturbation)(X)
    shifted = jax.tree.map(lambda v: v + 1.0, perturbations)
    out = nnx.capture(model, init=shifted)(X)
    out_legacy = sow_legacy.capture(model, init=shifted)(X)
    self.assertTreeEqual(out, out_legacy)
    h = X @ model.a.kernel[...] + model.a.bias[...] + 1.0
    self.assertTreeClose(
        out, jnp.sum((jnp.tanh(h) @ model.b.kernel[...]
                      + model.b.bias[...]) ** 2)
    )
    _, state = nnx.capture(model, nnx.Intermediate, init=shifted)(X)
    _, state_legacy = sow_legacy.capture(
        model, nnx.Intermediate, init=shifted
    )(X)
    self.assertStatesEqual(state, state_legacy)
    self.assertCollected(state, {('h',): [h]})
    # Returned as a type of their own, init values come back unchanged.
    _, returned = nnx.capture(model, nnx.Perturbation, init=shifted)(X)
    _, returned_legacy = sow_legacy.capture(
        model, nnx.Perturbation, init=shifted
    )(X)
    self.assertStatesEqual(returned, returned_legacy)
    self.assertStatesEqual(returned, shifted)

  def test_perturb_without_capture_type_is_identity(self):
    model = self.Model(nnx.Rngs(0))
    out, state = nnx.capture(model, nnx.Intermediate)(X)
    h = X @ model.a.kernel[...] + model.a.bias[...]
    self.assertCollected(state, {('h',): [h]})
    self.assertTreeClose(
        out, jnp.sum((jnp.tanh(h) @ model.b.kernel[...]
                      + model.b.bias[...]) ** 2)
    )

  def test_transform_capture_harvests_module_sows(self):
    # An enclosing flax.nnx.sow.capture sees what nnx.capture leaves.
    model = self.Model(nnx.Rngs(0))
    (out, pert), collected = sow.capture(
        nnx.capture(model, nnx.Perturbation), tag=nnx.Intermediate
    )(X)
    h = X @ model.a.kernel[...] + model.a.bias[...]
    self.assertEqual(list(collected), [('h',)])
    self.assertTreeClose(collected[('h',)], (h,))
    self.assertTreeClose(pert['h'].get_value(), jnp.zeros(3))


class DeprecatedPathTest(CompatTestCase):
  """Outside any capture, sow and perturb behave exactly as in 0.12.8."""

  class Model(nnx.Module):

    def __call__(self, x):
      self.sow(nnx.Intermediate, 'h', x)
      return self.perturb('p', x)

  def run_twice(self):
    model = self.Model()
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      out = model(X)
      model(X)
    self.assertLen(caught, 4)
    for w in caught:
      self.assertIs(w.category, DeprecationWarning)
      self.assertEqual(w.filename, __file__)
    return model, out, [(str(w.message), w.lineno) for w in caught]

  def test_like_legacy(self):
    model, out, messages = self.run_twice()
    with sow_legacy.flax_methods():
      model_legacy, out_legacy, messages_legacy = self.run_twice()
    self.assertEqual(messages, messages_legacy)
    self.assertEqual(nnx.graphdef(model), nnx.graphdef(model_legacy))
    self.assertStatesEqual(nnx.state(model), nnx.state(model_legacy))
    self.assertTreeEqual(out, out_legacy)
    self.assertTreeClose(model.h.get_value(), (X, X))
    self.assertTreeClose(model.p.get_value(), jnp.zeros(3))

  def test_errors_like_legacy(self):
    for installed in (True, False):
      with self.subTest(installed=installed):
        with (capture_compat.install() if installed
              else capture_compat.uninstall()):
          model = self.Model()
          model.h = 3
          with self.assertRaisesRegex(
              ValueError, "Expected 'h' to be a Variable, got int"
          ):
            model(X)
          model = self.Model()
          model.h = nnx.Param(X)
          with self.assertRaisesRegex(
              ValueError, "Expected 'h' to be of type 'Intermediate', got"
              " 'Param'"
          ):
            model(X)


class VariableUpdatesTest(CompatTestCase):
  """Variable updates inside the capture are visible as after a direct call.
  """

  class Model(nnx.Module):

    def __init__(self, rngs):
      self.linear = nnx.Linear(3, 3, rngs=rngs)
      self.norm = nnx.BatchNorm(3, rngs=rngs)
      self.dropout = nnx.Dropout(0.5, rngs=rngs)
      self.calls = nnx.Variable(jnp.zeros((), jnp.int32))

    def __call__(self, x):
      self.calls.set_value(self.calls.get_value() + 1)
      h = self.norm(self.linear(x))
      self.sow(nnx.Intermediate, 'h', h)
      return self.dropout(h)

  def test_updates_like_a_direct_call(self):
    model = self.Model(nnx.Rngs(0))
    twin = nnx.clone(model)
    x = jnp.stack([X, X * 2, -X])
    graphdef = nnx.graphdef(model)

    def forward(m, x):
      # An eager call runs on the model itself, marked with its path (a
      # static attribute, part of its graph definition, removed after the
      # call) where Flax 0.12.8 adds `__captures__`.
      self.assertIs(m, model)
      self.assertIn('_nnx_capture_paths', vars(m))
      self.assertNotIn('__captures__', vars(m))
      return m(x)

    with jax.checking_leaks():
      out, state = nnx.capture(forward, nnx.Intermediate)(model, x)
    # Flax 0.12.8 adds __captures__ to every module while it runs.
    during = []
    sow_legacy.capture(
        lambda m, x: during.append(nnx.graphdef(m)) or m(x), nnx.Intermediate
    )(nnx.clone(model), x)
    self.assertNotEqual(during[0], graphdef)
    with self.assertWarns(DeprecationWarning):  # a direct call sows
      expected_out = twin(x)
    self.assertTreeClose(out, expected_out)
    self.assertEqual(nnx.graphdef(model), graphdef)
    twin_state = nnx.state(twin, nnx.Not(nnx.Intermediate))
    self.assertLen(nnx.to_flat_state(twin_state),
                   len(nnx.to_flat_state(nnx.state(model))))
    for (path, a), (_, b) in zip(
        nnx.to_flat_state(nnx.state(model)), nnx.to_flat_state(twin_state)
    ):
      a, b = a.get_value(), b.get_value()
      if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
        a, b = jax.random.key_data(a), jax.random.key_data(b)
      np.testing.assert_array_equal(a, b, err_msg=str(path))
    self.assertEqual(model.calls.get_value(), 1)
    self.assertFalse(np.allclose(model.norm.mean.get_value(), 0))
    self.assertLen(state['h'].get_value(), 1)


class PathMarksTest(CompatTestCase):
  """The static mark by which a module copy knows its path stays inside."""

  def unmarked(self, node):
    return all(
        '_nnx_capture_paths' not in vars(m)
        for _, m in nnx.iter_graph(node)
        if isinstance(m, nnx.Module)
    )

  def test_returned_modules_carry_no_mark(self):
    net = Net(nnx.Rngs(0))
    graphdef = nnx.graphdef(net)

    def forward(m, x):
      return m, nnx.clone(m), Net(nnx.Rngs(1)), m(x)

    (same, clone, new, _), state = nnx.capture(forward, nnx.Intermediate)(
        net, X
    )
    self.assertIs(same, net)
    for node in (same, clone, new):
      self.assertTrue(self.unmarked(node))
    self.assertEqual(nnx.graphdef(clone), graphdef)
    self.assertLen(flat(state), 3)

  def test_nested_capture_returns_modules_marked_for_the_outer_one(self):
    net = Net(nnx.Rngs(0))

    def inner(m, x):
      return nnx.clone(m), m(x)

    def outer(m, x):
      (clone, _), inner_state = nnx.capture(inner, nnx.Intermediate)(m, x)
      # Still inside the outer capture: the clone sows under its path.
      self.assertFalse(self.unmarked(clone))
      return clone(x), inner_state

    (_, inner_state), state = nnx.capture(outer, nnx.Intermediate)(net, X)
    self.assertEqual([p for p, _, _ in flat(inner_state)],
                     [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('out',)])
    self.assertEqual(
        [p for p, _, _ in flat(state)],
        [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('out',)],
    )
    # The inner capture collects its own sows; the outer one gets the
    # clone's, under the paths of the module it was cloned from.
    self.assertStatesEqual(state, inner_state)
    self.assertTrue(self.unmarked(net))


class EagerCallTest(CompatTestCase):
  """An eager capture is a direct call: the function runs on every call.

  As in Flax 0.12.8, whatever the arguments, their structure or what the
  function reads besides them. The oracle for each call: the values
  recomputed from the current parameters and inputs, and a direct call on a
  twin for Variable updates. (``capture_eager_test`` compares the same with
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
    model = VariableUpdatesTest.Model(nnx.Rngs(0))
    other = VariableUpdatesTest.Model(nnx.Rngs(1))
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
    model = MethodOutputsTest.Model(nnx.Rngs(0))
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
    model = PerturbTest.Model(nnx.Rngs(0))
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


class TransformsTest(CompatTestCase):
  """Inside and around NNX transforms, in graph and tree mode."""

  @parameterized.parameters(True, False)
  def test_jit_inside_per_block_and_around(self, graph):
    with nnx.set_graph_mode(graph):
      net = Net(nnx.Rngs(0))
      step = nnx.jit(lambda block, x: block(x))

      def forward(net, x):
        for block in net.blocks:
          x = step(block, x)
        return net.head(x)

      _, expected = by_hand(net, X)
      expected.pop(('out',))
      for _ in range(2):  # the second time, the traces are cached
        for x in (X, X + 1):
          _, state = nnx.capture(forward, nnx.Intermediate)(net, x)
          self.assertCollected(
              state, {p: v for p, v in by_hand(net, x)[1].items()
                      if p != ('out',)}
          )
      around = nnx.jit(lambda net, x: nnx.capture(net, nnx.Intermediate)(x))
      _, state = around(net, X)
      self.assertCollected(state, by_hand(net, X)[1])
      _, state_legacy = sow_legacy.capture(forward, nnx.Intermediate)(
          net, X
      )
      self.assertCollected(state_legacy, expected)

  def test_jit_inside_is_traced_once_per_capture_structure(self):
    # Sow names hold module paths, which JAX's caches do not see: while a
    # capture traces, the jitted function is traced once per module. The
    # capture's own trace is then reused, so later calls trace nothing.
    net = Net(nnx.Rngs(0))
    traces = []

    @nnx.jit
    def block_step(block, x):
      traces.append(None)
      return block(x)

    def forward(net, x):
      return net.head(block_step(net.blocks[1], block_step(net.blocks[0], x)))

    for i in range(3):
      _, state = nnx.capture(forward, nnx.Intermediate)(net, X + i)
      expected = by_hand(net, X + i)[1]
      expected.pop(('out',))
      self.assertCollected(state, expected)
    self.assertLen(traces, 2)  # once per block, in the first capture
    traces.clear()
    for _ in range(2):
      sow_legacy.capture(forward, nnx.Intermediate)(net, X)
    self.assertLen(traces, 2)  # once per block structure

  def test_jit_around_is_traced_once(self):
    net = Net(nnx.Rngs(0))
    traces = []

    @nnx.jit
    def train_step(net, x):
      traces.append(None)
      out, state = nnx.capture(net, nnx.Intermediate)(x)
      return out, state

    for i in range(3):
      _, state = train_step(net, X + i)
      self.assertCollected(state, by_hand(net, X + i)[1])
    self.assertLen(traces, 1)

  @parameterized.parameters(True, False)
  def test_jax_jit_inside(self, graph):
    with nnx.set_graph_mode(graph):
      net = Net(nnx.Rngs(0))
      _, state = nnx.capture(
          lambda net, x: jax.jit(lambda net, x: net(x))(net, x),
          nnx.Intermediate,
      )(net, X)
      self.assertCollected(state, by_hand(net, X)[1])
      # Flax 0.12.8 loses them.
      _, state_legacy = sow_legacy.capture(
          lambda net, x: jax.jit(lambda net, x: net(x))(net, x),
          nnx.Intermediate,
      )(net, X)
      self.assertEmpty(flat(state_legacy))

  def stacked(self):

    class Stack(nnx.Module):

      def __init__(self, rngs):
        @nnx.split_rngs(splits=3)
        @nnx.vmap(in_axes=0, out_axes=0)
        def make(rngs):
          return Block(3, 3, rngs)

        self.blocks = make(rngs)

      def __call__(self, x, axes):
        @nnx.scan(in_axes=(axes, nnx.Carry), out_axes=nnx.Carry)
        def body(block, x):
          return block(x)

        return body(self.blocks, x)

    return Stack(nnx.Rngs(0))

  @parameterized.parameters(
      (0,), (nnx.StateAxes({nnx.Intermediate: 0, ...: 0}),)
  )
  def test_scan_over_layers(self, axes):
    stack = self.stacked()
    _, state = nnx.capture(stack, nnx.Intermediate)(X, axes)
    _, state_legacy = sow_legacy.capture(stack, nnx.Intermediate)(X, axes)
    self.assertStatesEqual(state, state_legacy)
    linear = stack.blocks.linear
    kernels, biases = linear.kernel[...], linear.bias[...]
    x, hs = X, []
    for w, b in zip(kernels, biases):
      hs.append(x @ w + b)
      x = jnp.tanh(hs[-1])
    self.assertCollected(state, {('blocks', 'h'): [jnp.stack(hs)]})

  @parameterized.parameters(
      (None,), (nnx.StateAxes({nnx.Intermediate: 0, ...: None}),)
  )
  def test_scan_with_the_module_broadcast(self, axes):
    block = Block(3, 3, nnx.Rngs(0))
    xs = jnp.stack([X, X * 2, X * 3, X * 4])

    def forward(block, xs):
      @nnx.scan(in_axes=(axes, nnx.Carry, 0), out_axes=(nnx.Carry, 0))
      def body(block, carry, x):
        return carry + 1.0, block(x + carry)

      return body(block, 0.0, xs)

    _, state = nnx.capture(forward, nnx.Intermediate)(block, xs)
    w, b = block.linear.kernel[...], block.linear.bias[...]
    hs = [(x + i) @ w + b for i, x in enumerate(xs)]
    self.assertCollected(state, {('h',): [jnp.stack(hs)]})
    _, state_legacy = sow_legacy.capture(forward, nnx.Intermediate)(
        block, xs
    )
    if axes is None:  # Flax 0.12.8 returns nothing, silently
      self.assertEmpty(flat(state_legacy))
    else:
      self.assertStatesEqual(state, state_legacy)

  @parameterized.parameters(True, False)
  def test_vmap_broadcast_and_stacked(self, graph):
    with nnx.set_graph_mode(graph):
      net = Net(nnx.Rngs(0))
      xs = jnp.stack([X, X * 2])
      _, state = nnx.capture(
          lambda net, xs: nnx.vmap(lambda n, x: n(x), in_axes=(None, 0))(
              net, xs
          ),
          nnx.Intermediate,
      )(net, xs)
      per_example = [by_hand(net, x)[1] for x in xs]
      self.assertCollected(state, {
          p: [jnp.stack([e[p][0] for e in per_example])]
          for p in per_example[0]
      })
      # Flax 0.12.8 fails: on the nnx.List in graph mode, on the broadcast
      # __captures__ in tree mode.
      with self.assertRaisesRegex(
          ValueError, 'sorting' if graph else 'axis spec None'
      ):
        sow_legacy.capture(
            lambda net, xs: nnx.vmap(lambda n, x: n(x), in_axes=(None, 0))(
                net, xs
            ),
            nnx.Intermediate,
        )(net, xs)
    stack = self.stacked()
    _, state = nnx.capture(
        lambda s, x: nnx.vmap(lambda b, x: b(x), in_axes=(0, None))(
            s.blocks, x
        ),
        nnx.Intermediate,
    )(stack, X)
    linear = stack.blocks.linear
    kernels, biases = linear.kernel[...], linear.bias[...]
    self.assertCollected(
        state, {('blocks', 'h'): [jnp.einsum('i,lij->lj', X, kernels)
                                  + biases]}
    )

  @parameterized.parameters(True, False)
  def test_remat_over_a_list(self, graph):
    with nnx.set_graph_mode(graph):
      net = Net(nnx.Rngs(0))
      forward = nnx.remat(lambda net, x: net(x))
      out, state = nnx.capture(forward, nnx.Intermediate)(net, X)
      expected_out, expected = by_hand(net, X)
      self.assertCollected(state, expected)
      self.assertTreeClose(out, expected_out)
      # And its gradient, through the rematerialized body.
      grads = nnx.capture(
          lambda net, x: nnx.grad(lambda n: forward(n, x).sum())(net),
          nnx.Intermediate,
      )(net, X)[0]
      with self.assertWarns(DeprecationWarning):  # a direct call sows
        expected_grads = nnx.grad(lambda n: n(X).sum())(nnx.clone(net))
      self.assertTreeClose(
          nnx.state(grads),
          nnx.state(expected_grads, nnx.Not(nnx.Intermediate)),
      )
    if graph:  # Flax 0.12.8 fails on the nnx.List
      with self.assertRaisesRegex(ValueError, 'sorting'):
        sow_legacy.capture(forward, nnx.Intermediate)(net, X)

  def test_cond_and_switch(self):
    net = Net(nnx.Rngs(0))

    def with_cond(net, x):
      return nnx.cond(
          x.sum() > 0, lambda n, x: n(x), lambda n, x: n(-x), net, x
      )

    def with_switch(net, x, i):
      return nnx.switch(
          i, [lambda n, x: n(x), lambda n, x: n(2 * x),
              lambda n, x: n(-x)], net, x
      )

    for x in (X, -X):
      _, state = nnx.capture(with_cond, nnx.Intermediate)(net, x)
      self.assertCollected(state, by_hand(net, x if x.sum() > 0 else -x)[1])
    for i, scale in enumerate((1, 2, -1)):
      _, state = nnx.capture(with_switch, nnx.Intermediate)(
          net, X, jnp.asarray(i)
      )
      self.assertCollected(state, by_hand(net, scale * X)[1])
    # Flax 0.12.8 fails on the nnx.List.
    with self.assertRaisesRegex(ValueError, 'sorting'):
      sow_legacy.capture(with_cond, nnx.Intermediate)(net, X)

  class Cell(nnx.Module):

    def __init__(self, reduce_fn):
      self.reduce_fn = reduce_fn
      self.w = nnx.Param(jnp.array([1.5, -0.5, 2.0], jnp.float32))

    def __call__(self, x):
      y = jnp.sin(self.w * x)
      if self.reduce_fn is None:
        self.sow(nnx.Intermediate, 'y', y)
      else:
        self.sow(nnx.Intermediate, 'y', y, reduce_fn=self.reduce_fn)
      return y

  def test_fori_loop_with_static_bounds_stacks(self):
    cell = self.Cell(None)

    def forward(cell, x):
      return nnx.fori_loop(0, 3, lambda i, c: (c[0], c[0](c[1])), (cell, x))

    _, state = nnx.capture(forward, nnx.Intermediate)(cell, X)
    ys, x = [], X
    for _ in range(3):
      x = jnp.sin(cell.w[...] * x)
      ys.append(x)
    self.assertCollected(state, {('y',): [jnp.stack(ys)]})
    # Flax 0.12.8's __captures__ changes the loop carry.
    with self.assertRaisesRegex(TypeError, 'same pytree structure'):
      sow_legacy.capture(forward, nnx.Intermediate)(cell, X)

  @parameterized.parameters('while_loop', 'fori_loop')
  def test_keep_last_in_a_while_loop_clobbers(self, loop):
    for reduce_fn in (capture_compat.keep_last,):
      cell = self.Cell(reduce_fn)

      def forward(cell, x, n):
        x = cell(x)  # sows 'y' once before the loop
        if loop == 'while_loop':
          return nnx.while_loop(
              lambda c: c[2] < n, lambda c: (c[0], c[0](c[1]), c[2] + 1),
              (cell, x, 0),
          )[1]
        return nnx.fori_loop(
            0, n, lambda i, c: (c[0], c[0](c[1])), (cell, x)
        )[1]

      for n in (0, 3):
        out, state = nnx.capture(forward, nnx.Intermediate)(
            cell, X, jnp.asarray(n)
        )
        x = X
        for _ in range(n + 1):
          x = jnp.sin(cell.w[...] * x)
        self.assertTreeClose(out, x)
        self.assertEqual(flat(state)[0][0], ('y',))
        self.assertTreeClose(state['y'].get_value(), x)

  def test_while_loop_clear_errors(self):
    def forward(cell, x, n):
      return nnx.while_loop(
          lambda c: c[2] < n, lambda c: (c[0], c[0](c[1]), c[2] + 1),
          (cell, x, 0),
      )[1]

    with self.assertRaisesRegex(NotImplementedError, "mode='append'") as e:
      nnx.capture(forward, nnx.Intermediate)(self.Cell(None), X,
                                            jnp.asarray(2))
    self.assertIn('keep_last', '\n'.join(e.exception.__notes__))
    # Keeping the last value is asked for explicitly: a reducer is never
    # called while tracing, nor is its code inspected, so a lambda that
    # returns its second argument appends like any other reducer.
    with self.assertRaisesRegex(NotImplementedError, "mode='append'") as e:
      nnx.capture(forward, nnx.Intermediate)(
          self.Cell(lambda previous, y: y), X, jnp.asarray(2)
      )
    self.assertIn('reduce_fn=capture_compat.keep_last',
                  '\n'.join(e.exception.__notes__))
    with self.assertRaisesRegex(NotImplementedError, 'zero times'):
      nnx.capture(forward, nnx.Intermediate)(
          self.Cell(capture_compat.keep_last), X, jnp.asarray(2)
      )
    # Flax 0.12.8's __captures__ changes the loop carry.
    with self.assertRaisesRegex(ValueError, 'same reference and pytree'):
      sow_legacy.capture(forward, nnx.Intermediate)(
          self.Cell(capture_compat.keep_last), X, 2
      )

  def test_grad_and_value_and_grad(self):
    net = Net(nnx.Rngs(0))

    def loss(net, x):
      return jnp.sum(net(x) ** 2)

    with self.assertWarns(DeprecationWarning):  # a direct call sows
      expected_grads = jax.grad(
          lambda params, x: jnp.sum(
              nnx.merge(nnx.graphdef(net), params)(x) ** 2
          )
      )(nnx.state(net), X)
    _, expected = by_hand(net, X)
    # Inside.
    grads, state = nnx.capture(
        lambda net, x: nnx.grad(loss)(net, x), nnx.Intermediate
    )(net, X)
    self.assertCollected(state, expected)
    self.assertTreeClose(nnx.state(grads), expected_grads)
    (value, grads), state = nnx.capture(
        lambda net, x: nnx.value_and_grad(loss)(net, x), nnx.Intermediate
    )(net, X)
    self.assertTreeClose(value, jnp.sum(by_hand(net, X)[0] ** 2))
    self.assertCollected(state, expected)
    # Flax 0.12.8 fails on the nnx.List (and leaves __captures__ behind).
    with self.assertRaisesRegex(TypeError, "'<' not supported"):
      sow_legacy.capture(
          lambda net, x: nnx.grad(loss)(net, x), nnx.Intermediate
      )(nnx.clone(net), X)
    # Around.
    grads, state = nnx.grad(
        lambda net, x: nnx.capture(loss, nnx.Intermediate)(net, x),
        has_aux=True,
    )(net, X)
    self.assertTreeClose(nnx.state(grads), expected_grads)
    self.assertCollected(state, expected)
    (value, state), grads = nnx.value_and_grad(
        lambda net, x: nnx.capture(loss, nnx.Intermediate)(net, x),
        has_aux=True,
    )(net, X)
    self.assertTreeClose(nnx.state(grads), expected_grads)
    self.assertCollected(state, expected)

  def test_sow_inside_custom_vjp_under_grad(self):

    class Custom(nnx.Module):

      def __init__(self):
        self.w = nnx.Param(jnp.array([1.0, 2.0, 3.0]))

      def __call__(self, x):
        module = self

        @jax.custom_vjp
        def f(x):
          return jnp.sin(x)

        def fwd(x):
          y = jnp.sin(x)
          module.sow(nnx.Intermediate, 'forward', y)
          return y, jnp.cos(x)

        def bwd(cos_x, g):
          module.sow(nnx.Intermediate, 'backward', cos_x * g)
          return (cos_x * g,)

        f.defvjp(fwd, bwd)
        return jnp.sum(f(self.w[...] * x))

    def grad_x(m, x):
      return jax.grad(lambda x: m(x))(x)

    def grad_model(m, x):
      return nnx.grad(lambda m, x: m(x))(m, x)

    model = Custom()
    w = model.w[...]
    expected = {('forward',): [jnp.sin(w * X)],
                ('backward',): [jnp.cos(w * X)]}
    grads, state = nnx.capture(grad_x, nnx.Intermediate)(model, X)
    self.assertTreeClose(grads, w * jnp.cos(w * X))
    self.assertCollected(state, expected)
    grads, state = nnx.capture(grad_model, nnx.Intermediate)(model, X)
    self.assertTreeClose(grads.w.get_value(), X * jnp.cos(w * X))
    self.assertCollected(state, expected)
    # Flax 0.12.8 loses the backward sow under nnx.grad, silently.
    _, state_legacy = sow_legacy.capture(grad_model, nnx.Intermediate)(
        model, X
    )
    self.assertEqual([p for p, _, _ in flat(state_legacy)], [('forward',)])

  def test_rnn_with_an_lstm_cell(self):

    class SowingLSTM(nnx.LSTMCell):

      def __call__(self, carry, x):
        carry, y = super().__call__(carry, x)
        self.sow(nnx.Intermediate, 'y', y)
        return carry, y

    cell = SowingLSTM(3, 2, rngs=nnx.Rngs(0))
    rnn = nnx.RNN(cell)
    xs = jax.random.normal(jax.random.key(0), (2, 5, 3))  # batch, time, in
    carry0 = (jnp.zeros((2, 2)), jnp.zeros((2, 2)))
    out, state = nnx.capture(rnn, nnx.Intermediate)(xs, initial_carry=carry0)
    # Oracle: the plain cell stepped by hand over time.
    plain = nnx.LSTMCell(3, 2, rngs=nnx.Rngs(0))
    carry = carry0
    ys = []
    for t in range(5):
      carry, y = plain(carry, xs[:, t])
      ys.append(y)
    self.assertTreeClose(out, jnp.stack(ys, axis=1))
    self.assertCollected(state, {('cell', 'y'): [jnp.stack(ys)]})

  @parameterized.parameters(dict(hijax=True), dict(ref=True))
  def test_hijax_and_ref_variables(self, **defaults):

    class Counter(nnx.Module):

      def __init__(self, rngs):
        self.net = Net(rngs)
        self.norm = nnx.LayerNorm(2, rngs=rngs)
        self.count = nnx.Variable(jnp.zeros(()))

      def __call__(self, x):
        self.count[...] += 1
        return self.norm(self.net(x))

    with nnx.var_defaults(**defaults):
      model = Counter(nnx.Rngs(0))
    plain = Counter(nnx.Rngs(0))
    _, expected = by_hand(plain.net, X)
    expected = {('net', *p): v for p, v in expected.items()}
    for _ in range(2):
      out, state = nnx.capture(model, nnx.Intermediate)(X)
      self.assertCollected(state, expected)
      self.assertTreeClose(out, plain.norm(by_hand(plain.net, X)[0]))
    # Eagerly, the call runs on the model's own Variables, as a direct call;
    # staged (under a jit), on copies where Hijax Variables are ordinary
    # ones holding the same values.
    inside = []
    nnx.capture(
        lambda m, x: inside.append(m.count.hijax) or m(x), nnx.Intermediate
    )(model, X)
    self.assertEqual(inside, [defaults.get('hijax', False)])
    self.assertEqual(model.count.hijax, defaults.get('hijax', False))
    self.assertEqual(model.count[...], 3)
    model.count[...] = jnp.asarray(2.0)
    self.assertEqual(model.count[...], 2)
    with nnx.var_defaults(**defaults):
      out, state = nnx.capture(model, nnx.Intermediate)(X)
      self.assertCollected(state, expected)
      if 'hijax' in defaults:  # Flax 0.12.8 returns nothing, silently
        _, state_legacy = sow_legacy.capture(model, nnx.Intermediate)(X)
        self.assertEmpty(flat(state_legacy))
      else:  # Flax 0.12.8 fails
        with self.assertRaisesRegex(TypeError, 'new_ref'):
          sow_legacy.capture(model, nnx.Intermediate)(X)
    # Flax 0.12.8 failed before calling the model with ref=True.
    self.assertEqual(model.count[...], 4 if 'hijax' in defaults else 3)


class ConcurrencyAndFailureTest(CompatTestCase):

  def test_threads_get_their_own_values(self):
    net = Net(nnx.Rngs(0))
    n = 6
    barrier = threading.Barrier(n)
    results, errors = {}, []

    def forward(net, x):
      barrier.wait(60)  # every thread is inside its capture at once
      return net(x)

    def worker(i):
      try:
        results[i] = nnx.capture(forward, nnx.Intermediate)(net, X * (i + 1))
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
      t.start()
    for t in threads:
      t.join(120)
    self.assertEmpty(errors)
    for i in range(n):
      out, state = results[i]
      expected_out, expected = by_hand(net, X * (i + 1))
      self.assertTreeClose(out, expected_out)
      self.assertCollected(state, expected)

  def test_interleaved_threads(self):
    # Thread A sows, then B runs a whole capture of the same model, then A
    # finishes: each must get exactly its own values.
    for name, capture in (('new', nnx.capture),
                          ('legacy', sow_legacy.capture)):
      net = Net(nnx.Rngs(0))
      a_sowed, b_done = threading.Event(), threading.Event()
      results, errors = {}, []

      def forward_a(net, x):
        out = net(x)
        a_sowed.set()
        b_done.wait(60)
        return out

      def thread_a(capture=capture):
        try:
          results['a'] = capture(forward_a, nnx.Intermediate)(net, X)
        except Exception as e:  # pylint: disable=broad-except
          errors.append(e)

      thread = threading.Thread(target=thread_a)
      thread.start()
      a_sowed.wait(60)
      try:
        results['b'] = capture(net, nnx.Intermediate)(2 * X)
      finally:
        b_done.set()
        thread.join(60)
      self.assertEmpty(errors)
      self.assertCollected(results['b'][1], by_hand(net, 2 * X)[1])
      if name == 'new':
        self.assertCollected(results['a'][1], by_hand(net, X)[1])
      else:  # B's capture replaced and then removed A's __captures__
        self.assertEmpty(flat(results['a'][1]))

  def test_an_exception_leaves_nothing_behind(self):
    net = Net(nnx.Rngs(0))
    graphdef, state = nnx.split(net)

    def failing(net, x):
      net(x)
      raise RuntimeError('boom')

    with self.assertRaisesRegex(RuntimeError, 'boom'):
      nnx.capture(failing, nnx.Intermediate, method_outputs=nnx.Intermediate)(
          net, X
      )
    self.assertEqual(nnx.graphdef(net), graphdef)
    self.assertStatesEqual(nnx.state(net), state)
    for _, module in nnx.iter_modules(net):
      self.assertNotIn('__captures__', vars(module))
    self.assertEmpty(capture_compat.frames.FRAMES.stack)
    _, state = nnx.capture(net, nnx.Intermediate)(X)
    self.assertCollected(state, by_hand(net, X)[1])
    # Flax 0.12.8 leaves its __captures__ on every module.
    with self.assertRaisesRegex(RuntimeError, 'boom'):
      sow_legacy.capture(failing, nnx.Intermediate)(net, X)
    self.assertIn('__captures__', vars(net.blocks[0]))

  def test_nested_captures_on_the_same_model(self):
    net = Net(nnx.Rngs(0))

    def outer(net, x, capture=nnx.capture):
      first = net(x)
      _, inner_state = capture(net, nnx.Intermediate)(2 * x)
      return first, inner_state

    (_, inner_state), outer_state = nnx.capture(outer, nnx.Intermediate)(
        net, X
    )
    self.assertCollected(outer_state, by_hand(net, X)[1])
    self.assertCollected(inner_state, by_hand(net, 2 * X)[1])
    # Flax 0.12.8: the inner capture empties the outer one.
    (_, inner_legacy), outer_legacy = sow_legacy.capture(
        outer, nnx.Intermediate
    )(net, X, sow_legacy.capture)
    self.assertCollected(inner_legacy, by_hand(net, 2 * X)[1])
    self.assertEmpty(flat(outer_legacy))

  def test_nested_captures_on_the_same_model_staged(self):
    # Under nnx.jit both captures are staged: each collects the sows of its
    # own frame from the one program.
    net = Net(nnx.Rngs(0))

    def outer(net, x):
      first = net(x)
      _, inner_state = nnx.capture(net, nnx.Intermediate)(2 * x)
      return first, inner_state

    step = nnx.jit(
        lambda net, x: nnx.capture(outer, nnx.Intermediate)(net, x))
    (_, inner_state), outer_state = step(net, X)
    self.assertCollected(outer_state, by_hand(net, X)[1])
    self.assertCollected(inner_state, by_hand(net, 2 * X)[1])

  def test_nested_captures_of_different_types(self):

    class Both(nnx.Module):

      def __init__(self, rngs):
        self.block = Block(3, 3, rngs)

      def __call__(self, x):
        h = self.block(x)
        self.sow(nnx.Perturbation, 'p', h * 2)
        return h

    model = Both(nnx.Rngs(0))

    def outer(model, x):
      return nnx.capture(model, nnx.Perturbation)(x)

    (_, inner), outer_state = nnx.capture(outer, nnx.Intermediate)(model, X)
    h = X @ model.block.linear.kernel[...] + model.block.linear.bias[...]
    self.assertCollected(outer_state, {('block', 'h'): [h]})
    self.assertCollected(inner, {('p',): [jnp.tanh(h) * 2]},
                         nnx.Perturbation)


class ImmutablePytreesTest(CompatTestCase):
  """Modules holding an immutable pytree of arrays, through NNX transforms.

  A transform returns new arrays for the pytree, which cannot be set in it:
  it is rebuilt, as a direct call of the transform does. The oracles: that
  direct call on a clone, and the sown values recomputed from the weights.
  """

  def assertLikeTwin(self, model, twin):
    values = nnx.to_flat_state(nnx.state(model))
    twin_values = nnx.to_flat_state(nnx.state(twin, nnx.Not(nnx.Intermediate)))
    self.assertEqual([p for p, _ in values], [p for p, _ in twin_values])
    self.assertTreeEqual(
        [v.get_value() if isinstance(v, nnx.Variable) else v
         for _, v in values],
        [v.get_value() if isinstance(v, nnx.Variable) else v
         for _, v in twin_values],
    )
    self.assertIs(type(model.bounds), type(twin.bounds))

  def by_hand(self, model, x, lo, hi):
    return jnp.clip(
        x @ model.linear.kernel[...] + model.linear.bias[...], lo, hi
    )

  @parameterized.product(kind=tuple(PYTREES), transform=('jit', 'remat'))
  def test_as_argument_and_as_callable(self, kind, transform):
    forms = {
        'argument': lambda m: (getattr(nnx, transform)(lambda m, x: m(x)),
                               (m, X)),
        'callable': lambda m: (m, (X,)),
        'bound method': lambda m: (m.__call__, (X,)),
    }
    for form, make in forms.items():
      with self.subTest(form):
        transform_inside = None if form == 'argument' else transform
        model = Clipped(kind, nnx.Rngs(0), transform=transform_inside)
        twin = nnx.clone(model)
        lo, hi = lo_hi(model.bounds)
        f, args = make(model)
        for step in range(2):  # the second call starts from the update
          out, state = nnx.capture(f, nnx.Intermediate)(*args)
          g, twin_args = make(twin)
          with self.assertWarns(DeprecationWarning):  # a direct call sows
            expected_out = g(*twin_args)
          self.assertTreeClose(out, expected_out)
          self.assertLikeTwin(model, twin)
          self.assertCollected(state, {('h',): [self.by_hand(
              model, X, lo - 0.25 * step, hi + 0.25 * step
          )]})
        self.assertTreeEqual(lo_hi(model.bounds)[0], lo - 0.5)

  @parameterized.parameters(*PYTREES)
  def test_through_scan(self, kind):
    @nnx.vmap(in_axes=0, out_axes=0)
    def make_layers(key):
      return Clipped(kind, nnx.Rngs(key))

    @nnx.scan(in_axes=(0, nnx.Carry), out_axes=nnx.Carry)
    def over_layers(layer, x):
      return layer(x)

    layers = make_layers(jax.random.split(jax.random.key(0), 3))
    kernels, biases = layers.linear.kernel[...], layers.linear.bias[...]
    out, state = nnx.capture(over_layers, nnx.Intermediate)(layers, X)
    # By hand: each layer clips to [-0.5, 0.5], then widens its bounds.
    x, expected = X, []
    for kernel, bias in zip(kernels, biases):
      x = jnp.clip(x @ kernel + bias, -0.5, 0.5)
      expected.append(x)
    self.assertTreeClose(out, x)
    self.assertCollected(state, {('h',): [jnp.stack(expected)]})
    self.assertIs(type(layers.bounds), type(PYTREES[kind](0, 0)))
    self.assertTreeEqual(lo_hi(layers.bounds)[0], jnp.full((3, 3), -0.75))

    # The module broadcast to every iteration (where it cannot update).
    @nnx.scan(in_axes=(None, nnx.Carry, 0), out_axes=(nnx.Carry, 0))
    def over_inputs(layer, carry, x):
      return carry, layer(x)

    layer = Clipped(kind, nnx.Rngs(1), update=False)
    xs = jnp.stack([X, 2 * X])
    (_, out), state = nnx.capture(over_inputs, nnx.Intermediate)(
        layer, 0.0, xs
    )
    expected = jax.vmap(lambda x: self.by_hand(layer, x, -0.5, 0.5))(xs)
    self.assertTreeClose(out, expected)
    self.assertCollected(state, {('h',): [expected]})
    self.assertIs(type(layer.bounds), type(PYTREES[kind](0, 0)))


class InstallTest(sow_testing.StateAssertions, parameterized.TestCase):
  """Each test starts with the layer off, whatever the process had, and
  leaves the process as it found it (also where the layer was installed at
  import, as a Flax tree with the integration does)."""

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.uninstall())
    # Flax 0.12.8's own, as the layer found them.
    self.flax_capture = module_lib.capture
    self.flax_sow = nnx.Module.sow
    self.flax_perturb = nnx.Module.perturb

  def test_install_uninstall(self):
    self.assertFalse(capture_compat.is_installed())
    self.assertIsNot(nnx.capture, capture_compat.capture)
    self.assertIs(nnx.capture, self.flax_capture)
    with capture_compat.install():
      capture_compat.install()  # idempotent
      self.assertTrue(capture_compat.is_installed())
      for namespace in (nnx, flax.nnx, module_lib):
        self.assertIs(namespace.capture, capture_compat.capture)
      self.assertIs(nnx.Module.sow, capture_compat.sow)
      self.assertIs(nnx.Module.perturb, capture_compat.perturb)
      with capture_compat.uninstall():
        capture_compat.uninstall()  # idempotent
        self.assertFalse(capture_compat.is_installed())
        self.assertIs(module_lib.capture, self.flax_capture)
        self.assertIs(nnx.Module.sow, self.flax_sow)
      self.assertTrue(capture_compat.is_installed())
    self.assertFalse(capture_compat.is_installed())
    self.assertIs(nnx.Module.perturb, self.flax_perturb)
    capture_compat.install()
    capture_compat.uninstall()
    self.assertFalse(capture_compat.is_installed())

  def test_delegates(self):
    self.assertTrue(capture_compat.delegates(capture_compat.capture))

    def handing_over(f, *args, **kwargs):
      return capture_compat.capture(f, *args, **kwargs)

    self.assertTrue(capture_compat.delegates(handing_over))
    self.assertFalse(capture_compat.delegates(lambda f: f))
    self.assertFalse(capture_compat.delegates(len))  # no code object
    # Flax's own capture hands over exactly where its source names us
    # (Flax with the patch series), not in a release such as 0.12.8.
    self.assertEqual(
        capture_compat.delegates(self.flax_capture),
        'capture_compat' in inspect.getsource(self.flax_capture),
    )

  def test_capture_collects_what_module_sow_routes_to_it(self):
    # No check of who installed whom: capture collects what reaches
    # capture_compat.sow, whether Module.sow is it (install), delegates to
    # it (Flax with this change), or is Flax 0.12.8's (nothing reaches it:
    # each sow takes the deprecated path on the call's copies, and warns).
    # A trace is reused only under the Module.sow it was traced with.
    net = Net(nnx.Rngs(0))
    with capture_compat.install():
      _, installed = capture_compat.capture(net, nnx.Intermediate)(X)
    self.assertEqual([p for p, _, _ in flat(installed)],
                     [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('out',)])
    if sow_legacy.is_available():
      with self.assertWarnsRegex(DeprecationWarning, 'outside of'):
        _, state = capture_compat.capture(net, nnx.Intermediate)(X)
      self.assertEmpty(flat(state))
    else:  # Flax's own Module.sow delegates
      _, state = capture_compat.capture(net, nnx.Intermediate)(X)
      self.assertStatesEqual(state, installed)

    def delegating_sow(self, *args, **kwargs):
      return capture_compat.sow(self, *args, **kwargs)

    with mock.patch.object(nnx.Module, 'sow', delegating_sow):
      _, state = capture_compat.capture(net, nnx.Intermediate)(X)
    self.assertStatesEqual(state, installed)
    with capture_compat.install():
      _, again = capture_compat.capture(net, nnx.Intermediate)(X)
    self.assertStatesEqual(again, installed)

  def test_importable_from_flax_nnx_init(self):
    # In Flax itself, flax/nnx/__init__.py imports the layer while flax.nnx
    # is being initialized: the import must not need flax.nnx to be done.
    # A copy of the installed Flax with this tree's files, imported in a
    # fresh interpreter.
    ours = os.path.dirname(os.path.dirname(capture_compat.__file__))
    with tempfile.TemporaryDirectory() as tmp:
      nnx_copy = os.path.join(tmp, 'flax', 'nnx')
      shutil.copytree(
          os.path.dirname(flax.__file__), os.path.join(tmp, 'flax'),
          ignore=shutil.ignore_patterns('__pycache__', 'sow',
                                        'capture_compat*'),
      )
      for package in ('sow', 'capture_compat'):
        shutil.copytree(
            os.path.join(ours, package), os.path.join(nnx_copy, package),
            ignore=shutil.ignore_patterns('__pycache__'),
        )
      init = os.path.join(nnx_copy, '__init__.py')
      with open(init) as f:
        text = f.read()
      anchor = 'from .module import capture as capture\n'
      self.assertIn(anchor, text)
      with open(init, 'w') as f:
        f.write(text.replace(
            anchor,
            anchor + 'from . import capture_compat as capture_compat\n',
        ))
      program = (
          'import jax.numpy as jnp\n'
          'from flax import nnx\n'
          'assert nnx.capture_compat.__file__.startswith(%r)\n'
          'class M(nnx.Module):\n'
          '  def __call__(self, x):\n'
          "    self.sow(nnx.Intermediate, 'y', 2 * x)\n"
          '    return x\n'
          'with nnx.capture_compat.install():\n'
          '  _, state = nnx.capture(M(), nnx.Intermediate)(jnp.ones(()))\n'
          "print(float(state['y'].get_value()[0]))\n"
      ) % tmp
      env = dict(os.environ, PYTHONPATH=tmp)
      result = subprocess.run(
          [sys.executable, '-P', '-c', program], cwd=tmp, env=env,
          capture_output=True, text=True, timeout=300, check=False,
      )
    self.assertEqual(result.returncode, 0, result.stderr)
    self.assertEqual(result.stdout.strip(), '2.0')

  def test_legacy_is_reachable_and_unchanged(self):
    net = Net(nnx.Rngs(0))
    _, before = sow_legacy.capture(net, nnx.Intermediate)(X)
    with capture_compat.install():
      _, during = sow_legacy.capture(net, nnx.Intermediate)(X)
    _, direct = self.flax_capture(net, nnx.Intermediate)(X)
    self.assertEqual(flat(before)[0][0], ('blocks', 0, 'h'))
    for state in (during, direct):
      self.assertEqual(
          [(p, t) for p, t, _ in flat(state)],
          [(p, t) for p, t, _ in flat(before)],
      )


if __name__ == '__main__':
  absltest.main()
