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
"""``activations.export`` of a real model: Flax's own examples/gemma.

Gemma's ``sow_lib`` sows, with ``Module.sow``, the embeddings, the residual
stream after each attention and each MLP, and the top-k of each layer's MLP
hidden units and attention logits: 19 sites for 3 layers (a tiny random
configuration). All of them are exported over several batches, with
statistics of the residual stream, and compared with Flax 0.12.8's own
``nnx.capture`` of the same model on each batch (``sow_legacy``), an
independent implementation run eagerly, op by op: the float values agree to
``sow_testing.assert_close``'s float32 ulps, the indices exactly.

The model comes from a checkout given with ``FLAX_SOW_MODELS_FROM=PATH``
(``PATH/flax``; see ``sow_external_models.py``); without it this test skips.
"""

import os
import shutil
import tempfile

from absl.testing import absltest
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import capture_compat
from flax.nnx.sow import activations

import sow_external_models as external
import sow_legacy
import sow_testing

MODELS_FROM_ENV = 'FLAX_SOW_MODELS_FROM'
BATCHES, EXAMPLES, LENGTH = 4, 2, 6


def _gemma():
  root = os.environ.get(MODELS_FROM_ENV)
  if not root:
    raise absltest.SkipTest(
        f'runs with {MODELS_FROM_ENV}=PATH (a checkout of flax)')
  if not sow_legacy.is_available():
    raise absltest.SkipTest(sow_legacy.SKIP_REASON)
  try:
    return external.load_gemma(external.source('flax', root).root)
  except external.MissingSource as e:
    raise absltest.SkipTest(str(e)) from None


def _leaves(state) -> dict[str, np.ndarray]:
  """Flax 0.12.8's State as ``{spelled name: its one value}``."""
  out = {}
  for path, value in nnx.to_flat_state(state):
    (only,) = value.get_value()
    out['.'.join(map(str, path))] = np.asarray(only)
  return out


class GemmaExportTest(absltest.TestCase):

  def test_every_site_of_gemma_equals_flax_own_capture(self):
    gemma = _gemma()
    sow_config = external.gemma_sow_config(gemma, external.GEMMA_SOW_OPTIONS)
    folder = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
    rng = np.random.default_rng(0)
    batches = [jnp.asarray(rng.integers(0, 17, (EXAMPLES, LENGTH)), jnp.int32)
               for _ in range(BATCHES)]
    positions = jnp.tile(jnp.arange(LENGTH), (EXAMPLES, 1))
    mask = jnp.tril(jnp.ones((EXAMPLES, LENGTH, LENGTH), jnp.bool_))

    def forward(model, tokens):
      return model(tokens, positions, None, mask)

    with external.gemma_mesh():
      model = gemma.transformer.Transformer(
          external._gemma_config(gemma), rngs=nnx.Rngs(params=0),  # pylint: disable=protected-access
          sow_config=sow_config)
      expected = [
          _leaves(sow_legacy.capture(forward, nnx.Intermediate)(model, b)[1])
          for b in batches]
      with capture_compat.install():
        data = activations.export(
            forward, batches, os.path.join(folder, 'store'), args=(model,),
            tag=nnx.Intermediate, statistics=['mean', 'var'], progress=False)
    names = list(expected[0])
    self.assertLen(names, 19)
    # In the order the model sows them (Flax's State sorts its keys).
    self.assertCountEqual(data.sites, [f'{n}' for n in names])
    self.assertEqual(data.sites[:2], ('embeddings',
                                      'layers.0.attn.logits_topk_values'))
    for name in names:
      want = np.concatenate([e[name] for e in expected])
      got = data.read(f'{name}')
      with self.subTest(name):
        self.assertEqual(got.dtype, want.dtype)
        if np.issubdtype(want.dtype, np.integer):
          np.testing.assert_array_equal(got, want)
        else:
          sow_testing.assert_close(got, want)
    stream = np.concatenate(
        [e['layers.2.rs_after_ffw'] for e in expected]).reshape(-1, 8)
    stats = data.statistics('layers.2.rs_after_ffw')
    self.assertEqual(stats.count, BATCHES * EXAMPLES * LENGTH)
    # float32 per-batch sums of 12 rows combined in float64: a few float32
    # ulps of the stream's scale.
    scale = np.abs(stream).max()
    np.testing.assert_allclose(stats.mean, stream.astype(np.float64).mean(0),
                               atol=1e-5 * scale)
    np.testing.assert_allclose(stats.var, stream.astype(np.float64).var(0),
                               atol=1e-5 * scale**2)


if __name__ == '__main__':
  absltest.main()
