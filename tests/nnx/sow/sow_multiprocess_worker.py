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
"""One of the two JAX processes of ``multiprocess_test.py``.

Run as ``python sow_multiprocess_worker.py PORT PROCESS_ID`` with
``XLA_FLAGS=--xla_force_host_platform_device_count=2`` and the repository
root and this directory on ``PYTHONPATH`` (the test sets both). It
joins a 2-process JAX cluster on ``localhost:PORT`` (CPU, gloo collectives;
``multiprocess_testing.worker_main``), so the 4-device mesh spans both
processes and every sharded array is global, not fully addressable. It runs
each check of ``CHECKS`` once per mesh axis type (Auto, Explicit) and
reports ``{'<axis type>/<check>': None if it passed, else its traceback}``.

A check compares what a capture returns with two independent oracles:

* for the layout, the same function written by hand to return the
  intermediates as outputs, run the same way: its outputs have "the
  activation's sharding";
* for the values, that hand-written function run in this process alone, on
  one device, on the full host arrays; the captured global arrays are
  gathered with ``process_allgather``.
"""

import sys
import traceback

import sow_layout

if not sow_layout.IN_FLAX:  # the repository's flax.nnx.sow, not an installed one
  import _worktree  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
import jax  # pylint: disable=g-import-not-at-top
from jax import lax
from jax.experimental import multihost_utils
import jax.numpy as jnp
from jax.sharding import AxisType
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np

from flax import nnx
from flax.nnx import capture_compat
from flax.nnx.sow import capture
from flax.nnx.sow import perturb
from flax.nnx.sow import sow
import multiprocess_testing
import sow_testing

AXIS_TYPES = ('Auto', 'Explicit')

# Activations are (batch, hidden), sharded over ('data', 'model'): each of
# the 4 devices, 2 per process, holds a quarter. No program below needs an
# all-gather, so a capture that added one shows in the compiled HLO.
BATCH, DIN, HIDDEN, LAYERS = 8, 4, 8, 3
ACTIVATION = P('data', 'model')
# The functions captured, each with its hand-written oracle that returns the
# intermediates as outputs.


def mlp(x, w1, w2):
  h = sow(jnp.tanh(x @ w1), name='h')
  return jnp.sum(h * w2, axis=1)  # over 'model': one all-reduce


def mlp_by_hand(x, w1, w2):
  h = jnp.tanh(x @ w1)
  return jnp.sum(h * w2, axis=1), h


def layers(h, ws):
  """A scan over layers: each activation appended, the last one clobbered."""

  def layer(carry, w):
    carry = sow(jnp.tanh(carry * w + 1), name='layer')
    sow(carry, name='last', mode='clobber')
    return carry, None

  return lax.scan(layer, h, ws)[0]


def layers_by_hand(h, ws):
  def layer(carry, w):
    carry = jnp.tanh(carry * w + 1)
    return carry, carry

  return lax.scan(layer, h, ws)


def loss(w1, x, w2):
  h = perturb(jnp.tanh(x @ w1), name='grad_h')
  return jnp.sum(jnp.sum(h * w2, axis=1) ** 2)


def loss_grads_by_hand(w1, x, w2):
  """d loss / d w1 and d loss / d h, by two explicit vjps."""
  h, pull_w1 = jax.vjp(lambda w: jnp.tanh(x @ w), w1)
  value, pull_h = jax.vjp(lambda v: jnp.sum(jnp.sum(v * w2, axis=1) ** 2), h)
  (grad_h,) = pull_h(jnp.ones_like(value))
  (grad_w1,) = pull_w1(grad_h)
  return grad_w1, grad_h


class Block(nnx.Module):
  """Parameters sharded over 'model' when created under a mesh, as usual."""

  def __init__(self, rngs):
    self.linear = nnx.Linear(
        DIN, HIDDEN, rngs=rngs,
        kernel_metadata={'out_sharding': (None, 'model')},
        bias_metadata={'out_sharding': ('model',)},
    )

  def __call__(self, x):
    h = jnp.tanh(self.linear(x))
    self.sow(nnx.Intermediate, 'h', h)
    return jnp.sum(h, axis=1)


def block_by_hand(kernel, bias, x):
  h = jnp.tanh(x @ kernel + jnp.reshape(bias, (1, -1)))
  return jnp.sum(h, axis=1), h


def block_params(block: Block):
  return block.linear.kernel.value, block.linear.bias.value


def single_device(f, *host_arrays):
  """``f`` run in this process alone, on one device, on full arrays."""
  device = jax.local_devices()[0]
  outs = jax.jit(f)(*(jax.device_put(a, device) for a in host_arrays))
  return jax.tree.map(np.asarray, outs)


class Setup:
  """The mesh, the global inputs and the single-device results, per mode."""

  def __init__(self, axis_type: str):
    kind = getattr(AxisType, axis_type)
    self.explicit = kind == AxisType.Explicit
    self.mesh = jax.make_mesh((2, 2), ('data', 'model'),
                              axis_types=(kind, kind))
    rng = np.random.default_rng(0)  # the same on both processes
    self.host = {
        'x': rng.normal(size=(BATCH, DIN)).astype(np.float32),
        'w1': rng.normal(size=(DIN, HIDDEN)).astype(np.float32),
        'w2': rng.normal(size=(1, HIDDEN)).astype(np.float32),
        'ws': rng.normal(size=(LAYERS, BATCH, HIDDEN)).astype(np.float32),
    }
    specs = {'x': P('data', None), 'w1': P(None, 'model'),
             'w2': P(None, 'model'), 'ws': P(None, *ACTIVATION)}
    self.arrays = {
        name: jax.make_array_from_callback(
            host.shape, NamedSharding(self.mesh, specs[name]),
            lambda index, host=host: host[index])
        for name, host in self.host.items()
    }
    # Before the mesh is entered: a single-device jit refuses to run under a
    # context mesh of other devices.
    x, w1, w2, ws = (self.host[k] for k in ('x', 'w1', 'w2', 'ws'))
    with nnx.use_eager_sharding(False):  # no mesh yet: the host values
      host_block = Block(nnx.Rngs(0))
    self.block_host = [np.asarray(p) for p in block_params(host_block)]
    self.expected = {
        'mlp': single_device(mlp_by_hand, x, w1, w2),
        'layers': single_device(
            lambda x, w1, ws: layers_by_hand(jnp.tanh(x @ w1), ws), x, w1, ws),
        'loss': single_device(loss_grads_by_hand, w1, x, w2),
        'block': single_device(block_by_hand, *self.block_host, x),
        'block grad': single_device(
            jax.grad(lambda k, b, x: jnp.sum(block_by_hand(k, b, x)[0])),
            *self.block_host, x),
    }

  def args(self, *names: str) -> list[jax.Array]:
    return [self.arrays[name] for name in names]


def gathered(value: jax.Array) -> np.ndarray:
  return np.asarray(multihost_utils.process_allgather(value, tiled=True))


def assert_like(sown, activation, expected_host, what: str):
  """``sown`` is a global array laid out as ``activation``, holding
  ``expected_host``."""
  assert not activation.is_fully_addressable, (
      f'{what}: the oracle is fully addressable, so the setup does not span'
      ' both processes'
  )
  assert not sown.is_fully_addressable, f'{what}: fully addressable'
  assert sown.shape == activation.shape, (what, sown.shape, activation.shape)
  assert sown.sharding.is_equivalent_to(activation.sharding, sown.ndim), (
      f'{what}: sharding {sown.sharding}, but the activation has'
      f' {activation.sharding}'
  )
  sow_testing.assert_close(gathered(sown), np.asarray(expected_host),
                           err_msg=what)


def assert_no_added_collectives(captured, by_hand, args, what: str):
  """Compiled, ``captured`` communicates exactly as ``by_hand`` does."""
  got = multiprocess_testing.collectives(
      jax.jit(captured).lower(*args).compile().as_text())
  want = multiprocess_testing.collectives(
      jax.jit(by_hand).lower(*args).compile().as_text())
  assert got['all-gather'] == 0, f'{what}: an all-gather was added: {got}'
  assert got == want, f'{what}: collectives {got}, written by hand {want}'


def check_jit_of_capture(s: Setup):
  args = s.args('x', 'w1', 'w2')
  out, collected = jax.jit(capture(mlp))(*args)
  out_ref, h_ref = jax.jit(mlp_by_hand)(*args)
  out_host, h_host = s.expected['mlp']
  assert_like(collected['h'][0], h_ref, h_host, 'h')
  assert_like(out, out_ref, out_host, 'out')
  assert_no_added_collectives(capture(mlp), mlp_by_hand, args, 'mlp')


def check_eager_capture_of_jit(s: Setup):
  """The eager path runs a cached jitted runner (``_CompiledRunners``)."""
  args = s.args('x', 'w1', 'w2')
  out_ref, h_ref = jax.jit(mlp_by_hand)(*args)
  out_host, h_host = s.expected['mlp']
  run = capture(jax.jit(mlp))
  for call in range(2):  # the first call makes the runner, the second reuses
    out, collected = run(*args)
    assert_like(collected['h'][0], h_ref, h_host, f'h, call {call}')
    assert_like(out, out_ref, out_host, f'out, call {call}')
  # With out_shardings and a static argument: the runner's other path.
  scaled = jax.jit(lambda x, w1, w2, k: mlp(x, w1, w2) * k, static_argnums=3,
                   out_shardings=NamedSharding(s.mesh, P('data')))
  for k in (2.0, 2.0, 4.0):  # powers of two: exact
    out, collected = capture(scaled)(*args, k)
    assert_like(collected['h'][0], h_ref, h_host, f'h, k={k}')
    assert_like(out, out_ref, out_host * k, f'out, k={k}')


def check_eager_capture(s: Setup):
  """Evaluated op by op, as ``f`` itself runs eagerly."""
  args = s.args('x', 'w1', 'w2')
  out, collected = capture(mlp)(*args)
  out_ref, h_ref = mlp_by_hand(*args)
  out_host, h_host = s.expected['mlp']
  assert_like(collected['h'][0], h_ref, h_host, 'h')
  assert_like(out, out_ref, out_host, 'out')


def check_scan(s: Setup):
  """Stacked values keep the activation's sharding with the loop axis
  replicated; the clobbered value keeps the activation's."""
  args = [jnp.tanh(s.arrays['x'] @ s.arrays['w1']), s.arrays['ws']]
  out_ref, stacked_ref = jax.jit(layers_by_hand)(*args)
  out_host, stacked_host = s.expected['layers']
  if s.explicit:  # the layout is in the types: the oracle must agree
    assert jax.typeof(stacked_ref).sharding.spec == P(None, *ACTIVATION)
    assert jax.typeof(out_ref).sharding.spec == ACTIVATION
  for how, run in (('jit(capture(f))', jax.jit(capture(layers))),
                   ('capture(jit(f))', capture(jax.jit(layers)))):
    out, collected = run(*args)
    assert_like(collected['layer'][0], stacked_ref, stacked_host,
                f'{how}: layer')
    assert_like(collected['last'][0], out_ref, out_host, f'{how}: last')
    assert_like(out, out_ref, out_host, f'{how}: out')
  assert_no_added_collectives(capture(layers), layers_by_hand, args, 'scan')


def check_perturb(s: Setup):
  """Gradients of intermediates keep the layout of the gradient itself."""
  args = s.args('w1', 'x', 'w2')
  grad_w1_ref, grad_h_ref = jax.jit(loss_grads_by_hand)(*args)
  grad_w1_host, grad_h_host = s.expected['loss']
  for how, run in (('jit(capture(grad))', jax.jit(capture(jax.grad(loss)))),
                   ('capture(jit(grad))', capture(jax.jit(jax.grad(loss))))):
    grad_w1, collected = run(*args)
    assert_like(collected['grad_h'][0], grad_h_ref, grad_h_host,
                f'{how}: grad_h')
    assert_like(grad_w1, grad_w1_ref, grad_w1_host, f'{how}: grad_w1')


def check_nnx_capture(s: Setup):
  """``nnx.capture`` (the compat layer) of a model sharded at creation."""
  block = Block(nnx.Rngs(0))  # the same parameters on both processes
  x = s.arrays['x']
  out_host, h_host = s.expected['block']
  for param, host in zip(block_params(block), s.block_host):
    assert_like(param, param, host, 'the sharded parameters')
  with capture_compat.install():
    captured = lambda m, v: nnx.capture(m, nnx.Intermediate)(v)
    # Eagerly, the first call stages the program, the later ones evaluate it.
    runs = [(f'eager, call {i}', lambda: captured(block, x),
             lambda: block_by_hand(*block_params(block), x)) for i in range(2)]
    runs.append(('nnx.jit', lambda: nnx.jit(captured)(block, x),
                 lambda: jax.jit(block_by_hand)(*block_params(block), x)))
    for how, run, by_hand in runs:
      out, state = run()
      out_ref, h_ref = by_hand()
      assert_like(state['h'].get_value()[0], h_ref, h_host, f'{how}: h')
      assert_like(out, out_ref, out_host, f'{how}: out')

    @nnx.jit
    def train_step(model, v):
      def objective(model):
        out, state = nnx.capture(model, nnx.Intermediate)(v)
        return jnp.sum(out), state
      return nnx.grad(objective, has_aux=True)(model)

    grads, state = train_step(block, x)
    grad_kernel_ref = jax.jit(jax.grad(
        lambda k, b, x: jnp.sum(block_by_hand(k, b, x)[0])))(
            *block_params(block), x)
    assert_like(state['h'].get_value()[0], h_ref, h_host, 'train step: h')
    assert_like(grads['linear']['kernel'].get_value(), grad_kernel_ref,
                s.expected['block grad'], 'train step: grad kernel')

    graphdef = nnx.graphdef(block)
    assert_no_added_collectives(
        lambda state, v: captured(nnx.merge(graphdef, state), v),
        lambda state, v: block_by_hand(
            *block_params(nnx.merge(graphdef, state)), v),
        (nnx.state(block), x), 'nnx.capture')


CHECKS = {
    'jit_of_capture': check_jit_of_capture,
    'eager_capture_of_jit': check_eager_capture_of_jit,
    'eager_capture': check_eager_capture,
    'scan': check_scan,
    'perturb': check_perturb,
    'nnx_capture': check_nnx_capture,
}


def run_checks() -> dict[str, str | None]:
  """Every check in every mode; both processes run the same sequence, so a
  check that fails fails on both, before the next collective."""
  results = {}
  for axis_type in AXIS_TYPES:
    s = Setup(axis_type)
    with jax.set_mesh(s.mesh):
      for name, check in CHECKS.items():
        try:
          check(s)
          results[f'{axis_type}/{name}'] = None
        # Any error is a failed check, reported with its traceback.
        except Exception:  # pylint: disable=broad-exception-caught
          results[f'{axis_type}/{name}'] = traceback.format_exc()
  return results


def run(args) -> tuple[dict[str, str | None], dict[str, object]]:
  del args  # none
  return run_checks(), {}


if __name__ == '__main__':
  multiprocess_testing.worker_main(sys.argv, run)
