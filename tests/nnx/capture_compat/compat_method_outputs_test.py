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
"""``nnx.capture(..., method_outputs=...)`` on the transform, against Flax
0.12.8's own, and the eager captures it keys."""

import functools
import sys
import threading
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp

from flax import nnx
from flax.nnx import capture_compat

from compat_testing import CompatTestCase, FeaturesModel, flat, X  # pylint: disable=g-multiple-import
import sow_legacy
import sow_testing


X_SEMANTICS = jnp.array([-0.8, 0.4, 1.1], jnp.float32)


class _Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)

  def __call__(self, x):
    y = self.linear(x)
    self.sow(nnx.Intermediate, 'y', y)
    return y


class _Stack(nnx.Module):

  def __init__(self, rngs):
    self.blocks = nnx.List([_Block(rngs), _Block(rngs)])

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    return x


class MethodOutputsTest(CompatTestCase):

  Model = FeaturesModel

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

  def test_a_method_returning_modules_with_rng_keys(self):
    # Found by the NNX fuzzer: a method's output holding an nnx.Dropout, whose
    # RngStream has a PRNG key (an extended dtype, `key<fry>`), raised an
    # internal TypeError from NumPy. Flax 0.12.8 sows it as any pytree.
    class Holder(nnx.Module):

      def __init__(self, rngs):
        self.dropout = nnx.Dropout(0.5, rngs=rngs)

      def parts(self):
        return [self.dropout]

      def __call__(self, x):
        return self.parts()[0](x)

    kwargs = dict(method_outputs=nnx.Intermediate)
    out, state = nnx.capture(Holder(nnx.Rngs(dropout=1)), nnx.Intermediate,
                             **kwargs)(X)
    with sow_legacy.flax_methods():
      out_legacy, state_legacy = sow_legacy.capture(
          Holder(nnx.Rngs(dropout=1)), nnx.Intermediate, **kwargs)(X)
    self.assertTreeEqual(out, out_legacy)
    (held,) = state['parts'].get_value()[0]
    (held_legacy,) = state_legacy['parts'].get_value()[0]
    self.assertTrue(jax.dtypes.issubdtype(held.rngs.key.get_value().dtype,
                                          jax.dtypes.prng_key))
    # The module as the user sees it; Flax 0.12.8's copy also has the
    # `__captures__` it is being captured with (a documented difference).
    self.assertNotIn('__captures__', vars(held))
    self.assertIn('__captures__', vars(held_legacy))
    self.assertEqual(sorted(vars(held)),
                     sorted(set(vars(held_legacy)) - {'__captures__'}))
    keys = lambda m: jax.random.key_data(m.rngs.key.get_value())
    self.assertTreeEqual(keys(held), keys(held_legacy))
    self.assertTreeEqual(held.rngs.count.get_value(),
                         held_legacy.rngs.count.get_value())

  def test_classes_hold_hooks_only_during_the_call(self):
    model = self.Model(nnx.Rngs(0))
    classes = (self.Model, nnx.Linear)
    before = [dict(vars(cls)) for cls in classes]
    during = []

    def forward(model, x):
      during.extend(dict(vars(cls)) for cls in classes)
      return model(x)

    nnx.capture(forward, nnx.Intermediate, method_outputs=nnx.Intermediate)(
        model, X
    )
    # During the call, each class holds a hook on each method it defines,
    # which calls the method; nothing else of the class changes.
    for was, now in zip(before, during):
      self.assertEqual(was.keys(), now.keys())
      for name, attr in was.items():
        if now[name] is not attr:
          self.assertIs(now[name].__wrapped__, attr, name)
    self.assertIsNot(during[0]['__call__'], before[0]['__call__'])
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

  def test_methods_are_watched_through_the_class_not_the_module(self):
    model = self.Model(nnx.Rngs(0))
    inside = []
    call = type(model).__call__

    def forward(model, x):
      inside.append((type(model), nnx.graphdef(model),
                     type(model).__call__))
      return model(x)

    graphdef = nnx.graphdef(model)
    nnx.capture(forward, nnx.Intermediate, method_outputs=nnx.Intermediate)(
        model, X
    )
    cls, graphdef_inside, call_inside = inside[0]
    # Inside the call the module is of its own class, with the graphdef it
    # has outside; the class holds the hook that watches its methods.
    self.assertIs(cls, self.Model)
    self.assertEqual(graphdef_inside, graphdef)
    self.assertIsNot(call_inside, call)
    self.assertIs(call_inside.__wrapped__, call)
    # Outside the call, the class holds no hook.
    self.assertIs(type(model).__call__, call)
    self.assertEqual(nnx.graphdef(model), graphdef)
    self.assertNotIn('__class__', dict(model._pytree__nodes))

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


class MethodOutputsKeyTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.install())
    self.model = _Stack(nnx.Rngs(0))

  def by_hand(self, x):
    ys = []
    for block in self.model.blocks:
      x = x @ block.linear.kernel.get_value() + block.linear.bias.get_value()
      ys.append(x)
    return ys

  def test_eager_capture_keyed_by_method_outputs(self):
    def forward(model, x):
      return model(x)

    _, plain = nnx.capture(forward, nnx.Intermediate)(self.model, X_SEMANTICS)
    _, outputs = nnx.capture(
        forward, nnx.Intermediate, method_outputs=nnx.Intermediate
    )(self.model, X_SEMANTICS)
    self.assertNotIn('__call__', plain['blocks'][0])
    self.assertIn('__call__', outputs['blocks'][0])
    sow_testing.assert_close(
        outputs['blocks'][1]['__call__'].get_value()[0], self.by_hand(X_SEMANTICS)[1]
    )


if __name__ == '__main__':
  absltest.main()
