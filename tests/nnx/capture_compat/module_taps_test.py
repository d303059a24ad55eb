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
"""``tap`` on models whose modules sow: the inputs and outputs of submodule
calls sown by module path, read and planted, through NNX transforms and
threads; the model and its classes untouched."""

import threading
import warnings

from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import capture_compat
from flax.nnx.sow import capture
from flax.nnx.sow import plant
from flax.nnx.sow import tap

from module_models import (  # pylint: disable=g-multiple-import
    LAYERS,
    MEMBERS,
    Block,
    Model,
    forward,
    linear_of,
    model_oracle,
    make_ensemble,
    Stack,
    X_MODULES,
    ModulesTestCase,
)
import sow_testing


assert_close = sow_testing.assert_close
X = X_MODULES


class TapTest(ModulesTestCase):

  def test_reads_inputs_and_outputs(self):
    before = self.snapshot(self.model)
    tapped = tap(forward, ('blocks', '*', 'linear'))
    out, collected = capture(tapped)(self.model, X)
    pres, hs = model_oracle(self.model, X)
    inputs = [X, hs[0]]
    for i in range(2):
      name = ('blocks', i, 'linear', '__call__')
      (args, kwargs), = collected[(*name, 'inputs')]
      self.assertEqual(kwargs, {})
      assert_close(args[0], inputs[i])
      assert_close(collected[(*name, 'output')][0], pres[i])
    self.assertNotIn(('blocks', 0, '__call__', 'output'), collected)
    assert_close(out, hs[-1])
    self.assert_untouched(self.model, *before)

  def test_one_method_named_by_a_str(self):
    # methods='__call__' is that method, not the letters of its name.
    tapped = tap(
        forward, ('blocks', 1), methods='__call__', inputs=False, tag='tap'
    )
    _, collected = capture(tapped, tag='tap')(self.model, X)
    _, hs = model_oracle(self.model, X)
    self.assertEqual(list(collected), [('blocks', 1, '__call__', 'output')])
    assert_close(collected[('blocks', 1, '__call__', 'output')][0], hs[1])

  def test_root_pattern_and_tapped_module(self):
    _, collected = capture(tap(self.model, (), inputs=False))(X)
    _, hs = model_oracle(self.model, X)
    assert_close(collected[('__call__', 'output')][0], hs[-1])
    self.assertIs(type(self.model), Model)

  def test_plant_output_as_hand_edited_model(self):
    value = jnp.array([0.25, -0.5, 1.0], X.dtype)  # what the sow has
    name = ('blocks', 0, 'linear', '__call__', 'output')
    tapped = tap(forward, ('blocks', 0, 'linear'), inputs=False)
    got = plant(tapped, {name: (value,)})(self.model, X)
    # The hand-edited model: block 0's linear returns `value` for any input.
    edited = nnx.clone(self.model)
    linear = edited.blocks[0].linear
    linear.kernel[...] = jnp.zeros_like(linear.kernel[...])
    linear.bias[...] = value.astype(linear.bias.dtype)
    with capture_compat.uninstall(), warnings.catch_warnings():
      warnings.simplefilter('ignore', DeprecationWarning)
      want = edited(X)
    assert_close(got, want)

  def test_plant_inputs(self):
    value = jnp.array([0.1, 0.2, 0.3])
    tapped = tap(forward, ('blocks', 1), outputs=False)
    got = plant(
        tapped, {('blocks', 1, '__call__', 'inputs'): (((value,), {}),)}
    )(self.model, X)
    want = jnp.tanh(linear_of(self.model.blocks[1].linear, value))
    assert_close(got, want)

  @parameterized.named_parameters(
      ('nnx_jit', lambda f: nnx.jit(f)),
      ('nnx_remat', lambda f: nnx.remat(f)),
  )
  def test_through_transforms(self, transform):
    def f(model, x):
      return transform(forward)(model, x)

    tapped = tap(f, ('blocks', '*', 'linear'), inputs=False)
    _, collected = capture(tapped)(self.model, X)
    pres, _ = model_oracle(self.model, X)
    for i in range(2):
      assert_close(
          collected[('blocks', i, 'linear', '__call__', 'output')][0], pres[i]
      )
    value = jnp.ones(3)
    got = plant(
        tapped, {('blocks', 1, 'linear', '__call__', 'output'): (value,)}
    )(self.model, X)
    assert_close(got, jnp.tanh(value))
    self.assertIs(type(self.model.blocks[1].linear), nnx.Linear)

  def test_through_nnx_vmap(self):
    ensemble = make_ensemble(nnx.Rngs(0))

    def f(ensemble, x):
      return nnx.vmap(lambda b, x: b(x), in_axes=(0, None))(ensemble, x)

    tapped = tap(f, ('linear',), inputs=False)
    _, collected = capture(tapped)(ensemble, X)
    kernel, bias = ensemble.linear.kernel[...], ensemble.linear.bias[...]
    want = jnp.stack([X @ kernel[i] + bias[i] for i in range(MEMBERS)])
    assert_close(collected[('linear', '__call__', 'output')][0], want)
    self.assertIs(type(ensemble.linear), nnx.Linear)

  def test_through_nnx_scan(self):
    stack = Stack(nnx.Rngs(0))
    tapped = tap(forward, ('layers', 'linear'))
    _, collected = capture(tapped)(stack, X)
    kernel = stack.layers.linear.kernel[...]
    bias = stack.layers.linear.bias[...]
    x, inputs, outputs = X, [], []
    for i in range(LAYERS):
      inputs.append(x)
      outputs.append(x @ kernel[i] + bias[i])
      x = jnp.tanh(outputs[-1])
    (args, _), = collected[('layers', 'linear', '__call__', 'inputs')]
    assert_close(args[0], jnp.stack(inputs))
    assert_close(
        collected[('layers', 'linear', '__call__', 'output')][0],
        jnp.stack(outputs),
    )

  def test_pattern_matching_nothing_is_refused(self):
    tapped = tap(forward, ('blocks', '*', 'mlp'))
    with self.assertRaisesRegex(
        ValueError, r"pattern \('blocks', '\*', 'mlp'\) matches no module"
    ):
      capture(tapped)(self.model, X)
    with self.assertRaisesRegex(ValueError, r"\('blocks', 2\) matches no"):
      capture(tap(forward, ('blocks', 2)))(self.model, X)

  def test_bad_patterns_and_methods_are_refused(self):
    with self.assertRaisesRegex(TypeError, 'a pattern is a tuple'):
      tap(forward, ['blocks'])
    # A part must be a str or an int: not a bool (True == 1 would match
    # block 1) nor a float.
    for part in (True, 1.0, None):
      with self.subTest(part=part):
        with self.assertRaisesRegex(TypeError, 'a pattern is a tuple'):
          tap(forward, ('blocks', part))
    with self.assertRaisesRegex(TypeError, "no method 'attend'"):
      capture(tap(forward, ('blocks', 0), methods=('attend',)))(
          self.model, X)

  def test_classes_restored_after_an_exception(self):
    def failing(model, x):
      model(x)
      raise RuntimeError('inside f')

    before = self.snapshot(self.model)
    with self.assertRaisesRegex(RuntimeError, 'inside f'):
      capture(tap(failing, ('blocks', '*')))(self.model, X)
    self.assert_untouched(self.model, *before)
    self.assertIs(type(self.model.blocks[0].linear), nnx.Linear)

  def test_returned_copies_get_their_class_back(self):
    def f(model, x):
      model(x)
      return nnx.clone(model.blocks[0])

    returned, _ = capture(tap(f, ('blocks', 0)))(self.model, X)
    self.assertIs(type(returned), Block)
    self.assertNotIn('_pytree__sow_paths', vars(returned))

  def test_outside_any_capture_just_calls(self):
    tapped = tap(forward, ('blocks', '*'))
    with capture_compat.uninstall(), warnings.catch_warnings():
      warnings.simplefilter('ignore', DeprecationWarning)
      np.testing.assert_array_equal(
          tapped(nnx.clone(self.model), X), forward(nnx.clone(self.model), X)
      )
    self.assertIs(type(self.model.blocks[0]), Block)

  def test_threads(self):
    models = [Model(nnx.Rngs(seed)) for seed in range(4)]
    tapped = tap(forward, ('blocks', '*', 'linear'), inputs=False)
    results = [None] * 4
    errors = []

    def run(i):
      try:
        for _ in range(3):
          results[i] = capture(tapped)(models[i], X)[1]
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    self.assertEqual(errors, [])
    for model, collected in zip(models, results):
      pres, _ = model_oracle(model, X)
      for i in range(2):
        assert_close(
            collected[('blocks', i, 'linear', '__call__', 'output')][0],
            pres[i],
        )
      self.assertIs(type(model.blocks[0].linear), nnx.Linear)

  def test_threads_tapping_the_same_model(self):
    # An eager tap watches the caller's own modules: A enters, B enters, A
    # exits, and B's calls are still watched; both see every call, and the
    # classes come back once both have returned.
    a_in, b_in, a_out = (threading.Event() for _ in range(3))
    results, errors = {}, []

    def wait(event):
      if not event.wait(60):
        raise AssertionError('timed out: the other thread never got there')

    def forward_a(model, x):
      a_in.set()
      wait(b_in)  # B's capture is running
      return model(x)

    def forward_b(model, x):
      b_in.set()
      wait(a_out)  # A's capture has returned
      return model(x)

    def run(name, f, before=None, after=None):
      try:
        if before is not None:
          wait(before)
        results[name] = capture(tap(f, ('blocks', '*', 'linear'),
                                    inputs=False))(self.model, X)[1]
      except Exception as e:  # pylint: disable=broad-except
        errors.append(e)
        b_in.set()
      finally:
        if after is not None:
          after.set()

    threads = [
        threading.Thread(target=run, args=('a', forward_a, None, a_out)),
        threading.Thread(target=run, args=('b', forward_b, a_in)),
    ]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join(120)
    self.assertEqual(errors, [])
    pres, _ = model_oracle(self.model, X)
    for name in ('a', 'b'):
      for i in range(2):
        assert_close(
            results[name][('blocks', i, 'linear', '__call__', 'output')][0],
            pres[i],
        )
    for block in self.model.blocks:
      self.assertIs(type(block.linear), nnx.Linear)


if __name__ == '__main__':
  absltest.main()
