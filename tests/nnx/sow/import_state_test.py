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
"""Importing the package does nothing but define it.

No environment variable changes what a sow does, and reloading every module
of the package (a notebook's autoreload) keeps every function imported
before the reload working. Each case runs in a fresh process: a reload would
change the modules the other tests of this process hold.
"""

import os
import subprocess
import sys
import textwrap

from absl.testing import absltest
import sow_layout


def _run_child(code: str, **env_vars: str) -> str:
  env = dict(os.environ, JAX_PLATFORMS='cpu', **env_vars)
  env['PYTHONPATH'] = sow_layout.child_pythonpath(env)
  result = subprocess.run(
      [sys.executable, '-c',
       sow_layout.CHILD_PRELUDE + textwrap.dedent(code)],
      env=env, cwd=sow_layout.ROOT, capture_output=True, text=True,
      timeout=600, check=False)
  if result.returncode:
    raise AssertionError(result.stderr[-4000:])
  return result.stdout


# What each child checks, against values computed directly: a sow is
# captured eagerly, under jit and in a scan; a perturb's gradient equals
# jax.grad of the explicit function; Module.sow through nnx.capture.
_CHECKS = '''
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

def check(sow, capture, perturb, capture_grads):
  def f(x):
    return jnp.sin(sow(x * 2.0, name='a'))
  x = jnp.float32(0.3)
  want = np.float32(0.6)
  for g in (f, jax.jit(f)):
    out, got = capture(g)(x)
    np.testing.assert_allclose(got['a'][0], want, rtol=1e-6)
  def looped(x):
    return jax.lax.scan(lambda c, _: (f(c), None), x, None, length=2)[0]
  _, got = capture(looped)(x)
  np.testing.assert_allclose(
      got['a'][0], [0.6, 2 * np.sin(0.6)], rtol=1e-6)
  def loss(x):
    return jnp.sum(jnp.sin(perturb(x * 2.0, name='p')) ** 2)
  grads = capture(jax.grad(loss))(x)[1]
  h = np.float64(0.6)
  np.testing.assert_allclose(
      grads['p'][0], 2 * np.sin(h) * np.cos(h), rtol=1e-5)
  values, grads = capture_grads(f, 'a')(x)[1:]
  np.testing.assert_allclose(grads['a'][0], np.cos(h), rtol=1e-5)
  # Outside any capture a sow costs nothing: no effect, the same jaxpr
  # equations as the function without it.
  assert not jax.make_jaxpr(f)(x).effects, jax.make_jaxpr(f)(x)

  class Block(nnx.Module):
    def __init__(self):
      self.linear = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    def __call__(self, x):
      y = self.linear(x)
      self.sow(nnx.Intermediate, 'y', y)
      return y
  block = Block()
  ones = jnp.ones(2)
  _, state = nnx.capture(block, nnx.Intermediate)(ones)
  np.testing.assert_allclose(state['y'][0], block.linear(ones), rtol=1e-6)
'''


class ImportStateTest(absltest.TestCase):

  def test_environment_variables_change_nothing(self):
    # JAX reads an environment variable for each of its configuration
    # options (FLAX_NNX_SOW_HARVESTING for one named flax_nnx_sow_harvesting);
    # the package's contexts are not options, so none of these does anything.
    out = _run_child(
        _CHECKS + '''
from flax.nnx import capture_compat
capture_compat.install()
from flax.nnx.sow import capture, capture_grads, perturb, sow
check(sow, capture, perturb, capture_grads)
print('checked')
''',
        FLAX_NNX_SOW_HARVESTING='1',
        FLAX_NNX_SOW_TRACKING_READS='1',
        FLAX_NNX_SOW_SEEING_THROUGH='1',
    )
    self.assertEqual(out.split(), ['checked'])

  def test_reloading_every_module_keeps_what_was_imported(self):
    out = _run_child(_CHECKS + '''
import importlib
import sys
from flax.nnx import capture_compat
capture_compat.install()
from flax.nnx.sow import capture, capture_grads, perturb, sow
check(sow, capture, perturb, capture_grads)
ours = [module for name, module in list(sys.modules.items())
        if name.startswith(('flax.nnx.sow', 'flax.nnx.capture_compat'))]
assert len(ours) > 20, ours
for module in ours:  # in import order, as autoreload does
  importlib.reload(module)
capture_compat.install()
# The functions imported before the reload, and the reloaded package's.
check(sow, capture, perturb, capture_grads)
import flax.nnx.sow as reloaded
check(reloaded.sow, reloaded.capture, reloaded.perturb,
      reloaded.capture_grads)
check(sow, reloaded.capture, perturb, reloaded.capture_grads)
print(len(ours))
''')
    self.assertGreater(int(out), 20)


if __name__ == '__main__':
  absltest.main()
