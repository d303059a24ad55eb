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
"""Capture and steer real samplers' decode loops, step by step.

Flax's ``examples/gemma/sampler.py`` and tunix's ``generate/sampler.py``
decode in a ``jax.lax.while_loop`` under ``jax.jit``, with their own models
(tiny configurations, random weights). The models are instrumented from
here, never edited: each decoder layer is wrapped in a module that sows its
output residual stream with the functional ``sow``, and a subclass of the
transformer sows its logits. Then ``capture(sampler, max_steps=N)`` returns
every decoding step's residual stream and logits as ``Steps``, and
``plant`` with a function of the step steers chosen steps, in the compiled
loop.

The oracle is the same sampler with its decode loop unrolled in Python:
the sampler's own step function called until the loop condition (as the
sampler writes it) is false, each call captured eagerly. Its values are
computed by another program (op by op rather than one compiled loop), so
they are equal to float32 rounding (``sow_testing.assert_close``).

The samplers come from checkouts given with ``FLAX_SOW_MODELS_FROM=PATH``
(``PATH/flax``, ``PATH/tunix``; see ``sow_external_models.py``); without
them these tests skip.
"""

import contextlib
import os

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import capture_compat
from flax.nnx.sow import capture
from flax.nnx.sow import plant
from flax.nnx.sow import Steps

import sow_external_models as external
import sow_layout
import sow_testing

assert_close = sow_testing.assert_close
MODELS_FROM_ENV = 'FLAX_SOW_MODELS_FROM'
RESIDUAL = ('layers', 1, 'residual')
NAMES = [('layers', 0, 'residual'), RESIDUAL, 'logits']
STEER = 0.5  # added to every feature of RESIDUAL at the steered steps
STEERED = (2, 3)  # the executions of RESIDUAL that are steered


def _source(key: str) -> external.Source:
  root = os.environ.get(MODELS_FROM_ENV)
  if not root:
    raise absltest.SkipTest(
        f'the samplers run with {MODELS_FROM_ENV}=PATH (checkouts of flax'
        ' and tunix)')
  try:
    return external.source(key, root)
  except external.MissingSource as e:
    raise absltest.SkipTest(str(e)) from None


def steering(value, index):
  """Adds ``STEER`` at the executions ``STEERED`` of the sow (the first is
  the prompt's, for a sampler that prefills)."""
  hit = (index >= STEERED[0]) & (index <= STEERED[1])
  return jnp.where(hit, value + STEER, value)


class SamplerTestCase(absltest.TestCase):
  """What both samplers are checked for; subclasses say how to build and
  unroll them."""

  # The capture's bound: more than any decode here runs.
  MAX_STEPS = 12

  def make(self):
    """Returns ``(sampler, run)``: ``run()`` samples the prompts."""
    raise NotImplementedError

  # The sampler's attribute holding its jitted decode loop.
  DECODE_ATTR = ''

  def decode_fn(self, sampler):
    """The sampler's decode loop, unjitted."""
    raise NotImplementedError

  def step_fn(self, sampler):
    """One step of the loop: ``step(*args, state) -> state``."""
    raise NotImplementedError

  def running(self, state) -> bool:
    """The loop's condition, as the sampler writes it."""
    raise NotImplementedError

  @contextlib.contextmanager
  def decoding_with(self, sampler, decode):
    """The sampler with ``decode`` as its compiled decode loop (this
    instance only)."""
    compiled = getattr(sampler, self.DECODE_ATTR)
    setattr(sampler, self.DECODE_ATTR, decode)
    try:
      yield
    finally:
      setattr(sampler, self.DECODE_ATTR, compiled)

  def unrolled(self, sampler, steer: bool = False):
    """The sampler with its decode loop unrolled in Python: its step called
    until its condition is false; with ``steer``, step ``k`` planted with
    ``steering`` at index ``k``."""
    step = self.step_fn(sampler)

    def decode(*args):
      *lead, state = args
      k = 0
      while self.running(state):
        if steer:
          planted = plant(step, {RESIDUAL: lambda v, _, k=k: steering(v, k)})
          state = planted(*lead, state)
        else:
          state = step(*lead, state)
        k += 1
      return state

    return self.decoding_with(sampler, decode)

  def context(self):
    return contextlib.nullcontext()

  def outputs(self, out) -> list[np.ndarray]:
    """What a sampling returns that the comparisons read: the logits, which
    the model computes in float32 (Flax's sampler returns them as lists of
    Python floats, exactly those float32 values)."""
    return [np.asarray(l, np.float32) for l in out.logits]

  def test_every_decoding_step_is_captured(self):
    with self.context():
      sampler, run = self.make()
      out, collected = capture(run, max_steps=self.MAX_STEPS)()
      with self.unrolled(sampler):
        unrolled_out, steps_by_call = capture(run)()
    for name in NAMES:
      with self.subTest(str(name)):
        *before, steps = collected[name]
        self.assertIsInstance(steps, Steps)
        # The unrolled loop sows once per step: as many entries as steps,
        # after those of the calls before the loop (a prefill's).
        entries = steps_by_call[name]
        unrolled_before, per_step = entries[:len(before)], entries[len(before):]
        self.assertEqual(int(steps.count), len(per_step))
        self.assertGreater(len(per_step), 1)
        self.assertEqual(steps.values.shape[0], self.MAX_STEPS)
        for got, want in zip(before, unrolled_before):
          assert_close(got, want)
        assert_close(steps.filled(), np.stack(per_step))
        np.testing.assert_array_equal(steps.values[len(per_step):], 0)
    for got, want in zip(self.outputs(out), self.outputs(unrolled_out)):
      assert_close(got, want)

  def test_the_capture_changes_nothing_and_compiles_once(self):
    with self.context():
      sampler, run = self.make()
      plain = run()
      captured = capture(run, max_steps=self.MAX_STEPS)
      out, _ = captured()
      with sow_testing.count_compiles() as compiles:
        again, collected = captured()
    # The sows are identities: the samples are the sampler's own, bitwise.
    for got, want in zip(self.outputs(out), self.outputs(plain)):
      np.testing.assert_array_equal(got, want)
    for got, want in zip(self.outputs(again), self.outputs(plain)):
      np.testing.assert_array_equal(got, want)
    self.assertIsInstance(collected['logits'][-1], Steps)
    self.assertEmpty(compiles)  # the decode loop stays compiled

  def test_an_eager_plant_of_the_public_call_steers_as_compiled(self):
    # Outside any trace, plant is a direct call of the sampler's own call
    # (its Python, host reads included), which plants into its compiled
    # decode loop: the same values as the jitted decode function planted,
    # whose executions are counted after those before the loop (a
    # prefill's).
    with self.context():
      sampler, run = self.make()
      plain = run()
      *before, _ = capture(run, max_steps=self.MAX_STEPS)()[1][RESIDUAL]
      eager = plant(run, {RESIDUAL: steering})()
      shifted = lambda v, i: steering(v, i + len(before))
      with self.decoding_with(sampler, jax.jit(
          plant(self.decode_fn(sampler), {RESIDUAL: shifted}))):
        compiled = run()
    for got, want, before in zip(self.outputs(eager), self.outputs(compiled),
                                 self.outputs(plain)):
      np.testing.assert_array_equal(got, want)
      self.assertGreater(float(np.max(np.abs(got - before))), 1e-3)

  def test_a_function_plant_steers_chosen_steps(self):
    # Planted into the compiled loop: one program, whose function plant
    # reads the step as its index (plant is planted into the jitted decode
    # function here; an eager plant of the sampler's public call gives the
    # same values, see the test above).
    with self.context():
      sampler, run = self.make()
      plain = run()
      steered_decode = jax.jit(plant(self.decode_fn(sampler),
                                     {RESIDUAL: steering}))
      with self.decoding_with(sampler, steered_decode):
        steered = run()
      with self.unrolled(sampler, steer=True):
        unrolled = run()
    for got, want, before in zip(self.outputs(steered),
                                 self.outputs(unrolled),
                                 self.outputs(plain)):
      assert_close(got, want)
      self.assertGreater(float(np.max(np.abs(got - before))), 1e-3)


def _load_flax_gemma(test: absltest.TestCase):
  """Flax's examples/gemma for ``test`` (or a skip), with the sampler's own
  nnx.capture on the transform for the test's duration."""
  gemma = external.load_gemma(_source('flax').root)
  test.enterContext(external.warnings_of_their_code(
      os.environ[MODELS_FROM_ENV]))
  if not sow_layout.IN_FLAX:
    test.enterContext(capture_compat.install())
  return gemma


class FlaxGemmaSamplerTest(SamplerTestCase):
  """Flax's examples/gemma sampler: it feeds the prompt token by token
  through the decode loop, whose step runs ``nnx.capture`` itself."""

  def setUp(self):
    super().setUp()
    self.gemma = _load_flax_gemma(self)

  def context(self):
    return external.gemma_mesh()

  def make(self):
    gemma = self.gemma
    config = external.gemma_config(gemma)
    model = external.instrument_decoder(
        gemma.transformer.Transformer(config, rngs=nnx.Rngs(params=0)))
    sampler = gemma.sampler.Sampler(
        vocab=external.CharVocab(config.num_embed), cache_size=16,
        transformer=model)
    return sampler, lambda: sampler(['abc', 'de'], total_generation_steps=4)

  DECODE_ATTR = '_compiled_sample_fn'

  def decode_fn(self, sampler):
    return sampler._sample_fn  # pylint: disable=protected-access

  def step_fn(self, sampler):
    return sampler._sample_step  # pylint: disable=protected-access

  def running(self, state) -> bool:
    # sampler.py's cond_fn.
    return bool(state.decoding_step < state.total_sampling_steps) and bool(
        jnp.any(jnp.logical_not(state.done)))


class FlaxGemmaSowConfigTest(absltest.TestCase):
  """Through the sampler's own ``nnx.capture``: Flax's Gemma built with a
  ``SowConfig`` sows its residual streams with ``Module.sow``, which the
  sampler's per-step ``nnx.capture`` takes and copies into the buffers it
  returns (``out.intermediates``). A capture around the sampler sees
  through it with ``see_through=True``; without, it warns, naming it."""

  MAX_STEPS = 12
  OPTIONS = ('embeddings', 'rs_after_attention', 'rs_after_ffw')

  def setUp(self):
    super().setUp()
    self.gemma = _load_flax_gemma(self)
    self.enterContext(external.gemma_mesh())

  def make(self):
    gemma = self.gemma
    config = external.gemma_config(gemma)
    model = gemma.transformer.Transformer(
        config, rngs=nnx.Rngs(params=0),
        sow_config=external.gemma_sow_config(gemma, self.OPTIONS))
    sampler = gemma.sampler.Sampler(
        vocab=external.CharVocab(config.num_embed), cache_size=16,
        transformer=model)
    return lambda: sampler(['abc', 'de'], total_generation_steps=4)

  def test_every_step_equals_the_samplers_own_capture(self):
    run = self.make()
    plain = run()
    out, collected = capture(run, max_steps=self.MAX_STEPS,
                             see_through=True)()
    # The sampler's own results are unchanged, bitwise.
    for got, want in zip(out.tokens, plain.tokens, strict=True):
      np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    mine = out.intermediates
    layers = len(mine.layers)
    names = [('embeddings',)] + [
        ('layers', i, field) for i in range(layers)
        for field in ('rs_after_attention', 'rs_after_ffw')]
    for name in names:
      with self.subTest(str(name)):
        (steps,) = collected[name]
        self.assertIsInstance(steps, Steps)
        count = int(steps.count)
        self.assertGreater(count, 1)
        if name[0] == 'embeddings':
          buffer = mine.embeddings
        else:
          buffer = getattr(mine.layers[name[1]], name[2])
        # Step k is what the sampler's capture put at column k + 1: one
        # value, which XLA may compute in two fusions (one per output of
        # the compiled loop), so equal to float32 rounding.
        compared = min(count, buffer.shape[1] - 1)
        self.assertGreater(compared, 1)
        self.assertGreater(float(np.max(np.abs(np.asarray(buffer)))), 0)
        for k in range(compared):
          assert_close(np.asarray(steps.values[k])[:, 0],
                       np.asarray(buffer)[:, k + 1])

  def test_without_see_through_it_names_the_inner_capture(self):
    run = self.make()
    with self.assertWarnsRegex(
        Warning, r"taken by nnx.capture\(Transformer, Intermediate\)"
        r'.*see_through=True'):
      _, collected = capture(run, max_steps=self.MAX_STEPS)()
    self.assertNotIn(('layers', 0, 'rs_after_ffw'), collected)


class CharTokenizer:
  """The tokenizer methods tunix's TokenizerAdapter calls, one id per
  character."""

  def encode(self, text, **kwargs):
    del kwargs
    return [3 + ord(c) % 14 for c in text]

  def decode(self, ids, **kwargs):
    del kwargs
    return ''.join(chr(ord('a') + int(i) % 26) for i in ids)

  def bos_id(self):
    return 2

  def eos_id(self):
    return 1

  def pad_id(self):
    return 0


class TunixSamplerTest(SamplerTestCase):
  """tunix's sampler: a prefill of the prompts (one sow each), then the
  decode loop."""

  def setUp(self):
    super().setUp()
    self.root = _source('tunix').root
    self.enterContext(external.warnings_of_their_code(
        os.environ[MODELS_FROM_ENV]))
    self.sampler_lib = external.load_tunix_sampler(self.root)

  def context(self):
    return external.tunix_sharding_setting()

  def make(self):
    model = external.tunix_model('gemma', self.root)
    model = external.instrument_decoder(model)
    lib = self.sampler_lib
    sampler = lib.Sampler(model, CharTokenizer(), lib.CacheConfig(
        cache_size=16, num_layers=2, num_kv_heads=1, head_dim=4))
    return sampler, lambda: sampler(['abc', 'de'], max_generation_steps=5,
                                    return_logits=True)

  DECODE_ATTR = '_compiled_decode_fn'

  def decode_fn(self, sampler):
    return sampler._decode_fn  # pylint: disable=protected-access

  def step_fn(self, sampler):
    return sampler._sample_step  # pylint: disable=protected-access

  def running(self, state) -> bool:
    # sampler.py's _decode_fn's cond_fn.
    return bool(state.decoding_step < state.total_sampling_steps - 1) and (
        bool(jnp.any(jnp.logical_not(state.done))))


del SamplerTestCase  # not a test of its own


if __name__ == '__main__':
  absltest.main()
