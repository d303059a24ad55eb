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
"""Captures activations and their gradients from a small Flax NNX model.

Run: python examples/demo.py
"""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from flax.nnx.sow import capture, perturb, sow


class MLP(nnx.Module):
  """A 3-layer MLP that tags every hidden activation."""

  def __init__(self, sizes, rngs: nnx.Rngs):
    self.layers = nnx.List([
        nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])
    ])

  def __call__(self, x):
    for i, layer in enumerate(self.layers[:-1]):
      x = nnx.relu(layer(x))
      # Tag the activation, and expose the gradient of the loss w.r.t. it.
      x = perturb(sow(x, name=('hidden', i)), name=('grad_hidden', i))
    return self.layers[-1](x)


def loss_fn(params, graphdef, x, y):
  model = nnx.merge(graphdef, params)
  loss = jnp.mean((model(x) - y) ** 2)
  sow(loss, name='loss')
  return loss


def main():
  model = MLP([4, 8, 8, 1], rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (16, 4))
  y = jnp.sum(x, axis=1, keepdims=True)

  # 1. Activations: capture the forward pass of the module itself.
  out, acts = capture(model)(x)
  print('forward output', out.shape)
  for name, values in acts.items():
    print(f'  sown {name}: {values[0].shape}')

  # 2. Gradients of intermediates, and the loss, from one jitted grad.
  graphdef, params = nnx.split(model)
  grad_fn = jax.jit(capture(jax.grad(loss_fn)))
  grads, collected = grad_fn(params, graphdef, x, y)
  print('loss', float(collected['loss'][0]))
  for i in range(2):
    g = collected[('grad_hidden', i)][0]
    norm = float(jnp.linalg.norm(g))
    print(f'  d loss / d hidden[{i}]: shape {g.shape}, norm {norm:.4f}')

  # 3. An independent check: the gradient of the last hidden activation is
  #    d loss / d output times the transposed output-layer kernel.
  last = model.layers[-1]
  d_out = 2 * (out - y) / out.size
  expected = d_out @ last.kernel[...].T
  #    Another program (a matmul by hand): equal to float32 rounding, which
  #    is relative to the largest magnitude of the gradient, not to each
  #    element (an element near zero is a difference of larger terms).
  np.testing.assert_allclose(
      collected[('grad_hidden', 1)][0], expected,
      atol=1e-5 * float(jnp.max(jnp.abs(expected))),
  )
  print('checked against the hand-derived gradient: OK')


if __name__ == '__main__':
  main()
