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
"""Parity: Flax 0.12.8's nnx.capture vs the transform-backed one.

Real models built from Flax's own layers run on identical clones under the
legacy implementation (``sow_legacy.capture``) and the new one
(``capture_compat.capture``), eagerly and under ``nnx.jit``. Compared
bitwise: the captured State trees (paths, Variable types, values), the
outputs, the updated model state, and, for the training step, gradients and
the optimizer state. The same models with Hijax Variables run by the new
implementation must capture what the plain run captures; the legacy one
returns an empty State there (the motivating difference: the test tells
when that changes).

Models from public code run the same comparison in
``parity_external_test.py``, which uses the classes here.

Run: python tests/nnx/capture_compat/parity_test.py [--report=PATH]
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import typing as tp
import warnings

from absl import flags
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

# Run directly (this file, or parity_external_test.py), not by pytest, whose
# conftest.py puts the test helpers on sys.path: they are in the folder of
# sow_layout.py, this folder's parent (Flax's tree) or its sibling sow/ (this
# repository).
_DIRECT = 'sow_layout' not in sys.modules and 'pytest' not in sys.modules
if _DIRECT:
  _HERE = os.path.dirname(os.path.abspath(__file__))
  sys.path.insert(0, next(
      folder for folder in (os.path.dirname(_HERE),
                            os.path.join(os.path.dirname(_HERE), 'sow'))
      if os.path.exists(os.path.join(folder, 'sow_layout.py'))))

import sow_layout  # pylint: disable=g-bad-import-order,g-import-not-at-top

if _DIRECT and not sow_layout.IN_FLAX:
  # Run directly in the repository: import its working tree.
  sys.path.insert(0, sow_layout.ROOT)
  import _worktree  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import

from flax.nnx import capture_compat  # pylint: disable=g-import-not-at-top
import sow_legacy  # pylint: disable=g-import-not-at-top
import sow_testing  # pylint: disable=g-import-not-at-top

_REPORT = flags.DEFINE_string(
    'report', None, 'Write a Markdown table of the comparisons to this path.'
)

# ---------------------------------------------------------------------------
# The models (tiny sizes, CPU)
# ---------------------------------------------------------------------------


class MLPBlock(nnx.Module):

  def __init__(self, din, dout, rngs):
    self.linear = nnx.Linear(din, dout, rngs=rngs)

  def __call__(self, x):
    h = nnx.relu(self.linear(x))
    self.sow(nnx.Intermediate, 'h', h)
    return h


class MLP(nnx.Module):

  def __init__(self, rngs):
    self.blocks = nnx.List([MLPBlock(4, 8, rngs), MLPBlock(8, 8, rngs)])
    self.head = nnx.Linear(8, 2, rngs=rngs)

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    logits = self.head(x)
    self.sow(nnx.Intermediate, 'logits', logits)
    return logits


class CNN(nnx.Module):

  def __init__(self, rngs):
    self.conv = nnx.Conv(1, 4, kernel_size=(3, 3), rngs=rngs)
    self.bn = nnx.BatchNorm(4, rngs=rngs)
    self.dropout = nnx.Dropout(0.5, rngs=rngs)
    self.head = nnx.Linear(4, 3, rngs=rngs)

  def __call__(self, x):
    h = nnx.relu(self.bn(self.conv(x)))
    self.sow(nnx.Intermediate, 'features', h)
    h = self.dropout(h)
    pooled = jnp.mean(h, axis=(1, 2))
    self.sow(nnx.Intermediate, 'pooled', pooled)
    return self.head(pooled)


@dataclasses.dataclass(frozen=True)
class LMConfig:
  vocab: int = 13
  dim: int = 8
  heads: int = 2
  layers: int = 2
  sow_hidden: bool = True


class DecoderBlock(nnx.Module):

  def __init__(self, config: LMConfig, rngs):
    self.config = config
    self.ln1 = nnx.LayerNorm(config.dim, rngs=rngs)
    self.attn = nnx.MultiHeadAttention(
        num_heads=config.heads, in_features=config.dim, decode=False,
        rngs=rngs)
    self.ln2 = nnx.LayerNorm(config.dim, rngs=rngs)
    self.mlp = nnx.Linear(config.dim, config.dim, rngs=rngs)

  def __call__(self, x, mask):
    x = x + self.attn(self.ln1(x), mask=mask, sow_weights=True)
    x = x + nnx.gelu(self.mlp(self.ln2(x)))
    if self.config.sow_hidden:
      self.sow(nnx.Intermediate, 'hidden', x)
    return x


class DecoderLM(nnx.Module):

  def __init__(self, config: LMConfig, rngs):
    self.embed = nnx.Embed(config.vocab, config.dim, rngs=rngs)
    self.blocks = nnx.List(
        [DecoderBlock(config, rngs) for _ in range(config.layers)])
    self.ln = nnx.LayerNorm(config.dim, rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens)
    mask = nnx.make_causal_mask(tokens)
    for block in self.blocks:
      x = block(x, mask)
    return self.embed.attend(self.ln(x))


class ScanBlock(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(8, 8, rngs=rngs)
    self.ln = nnx.LayerNorm(8, rngs=rngs)

  def __call__(self, x):
    x = x + nnx.tanh(self.linear(self.ln(x)))
    self.sow(nnx.Intermediate, 'hidden', x)
    return x


class ScanTransformer(nnx.Module):
  """A stack built with nnx.vmap, run with nnx.scan over nnx.remat blocks."""

  def __init__(self, rngs, layers=3):
    self.layers = layers

    @nnx.split_rngs(splits=layers)
    @nnx.vmap(in_axes=0, out_axes=0)
    def make_stack(rngs):
      return ScanBlock(rngs)

    self.stack = make_stack(rngs)

  def __call__(self, x):
    state_axes = nnx.StateAxes({nnx.Intermediate: 0, ...: 0})

    @nnx.scan(in_axes=(nnx.Carry, state_axes), out_axes=nnx.Carry)
    @nnx.remat
    def forward(x, block):
      return block(x)

    return forward(x, self.stack)


class SowingLSTMCell(nnx.LSTMCell):

  def __call__(self, carry, x):
    carry, y = super().__call__(carry, x)
    self.sow(nnx.Intermediate, 'cell_out', y)
    return carry, y


class LSTM(nnx.Module):

  def __init__(self, rngs):
    self.rnn = nnx.RNN(SowingLSTMCell(3, 5, rngs=rngs))

  def __call__(self, x):
    return self.rnn(x)


class VAE(nnx.Module):

  def __init__(self, rngs):
    self.encoder = nnx.Linear(6, 8, rngs=rngs)
    self.mean = nnx.Linear(8, 2, rngs=rngs)
    self.logvar = nnx.Linear(8, 2, rngs=rngs)
    self.decoder = nnx.Linear(2, 6, rngs=rngs)
    self.rngs = rngs

  def __call__(self, x):
    h = nnx.relu(self.encoder(x))
    mean, logvar = self.mean(h), self.logvar(h)
    self.sow(nnx.Intermediate, 'latent', {'mean': mean, 'logvar': logvar})
    z = mean + jnp.exp(0.5 * logvar) * jax.random.normal(
        self.rngs.noise(), mean.shape)
    self.sow(nnx.Intermediate, 'z', z)
    return self.decoder(z)


class Ensemble(nnx.Module):
  """Members stacked with nnx.vmap, evaluated with nnx.vmap."""

  def __init__(self, rngs, members=3):

    @nnx.split_rngs(splits=members)
    @nnx.vmap(in_axes=0, out_axes=0)
    def make(rngs):
      return MLPBlock(4, 6, rngs)

    self.members = make(rngs)

  def __call__(self, x):
    state_axes = nnx.StateAxes({nnx.Intermediate: 0, ...: 0})

    @nnx.vmap(in_axes=(state_axes, None), out_axes=0)
    def forward(member, x):
      return member(x)

    return forward(self.members, x)


class Perturbed(nnx.Module):

  def __init__(self, rngs):
    self.linear1 = nnx.Linear(4, 8, rngs=rngs)
    self.linear2 = nnx.Linear(8, 1, rngs=rngs)

  def __call__(self, x):
    h = nnx.relu(self.linear1(x))
    h = self.perturb('grad_h', h)
    self.sow(nnx.Intermediate, 'h', h)
    return self.linear2(h)


class Reducers(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)

  def features(self, x):
    return nnx.relu(self.linear(x))

  def __call__(self, x):
    for i in range(3):
      x = self.features(x) + i
      self.sow(nnx.Intermediate, 'last', x, reduce_fn=lambda _, y: y)
      self.sow(nnx.Intermediate, 'total', jnp.sum(x),
               reduce_fn=lambda a, b: a + b, init_fn=lambda: 0.0)
    return x


# ---------------------------------------------------------------------------
# Cases: how each model is built, fed and captured
# ---------------------------------------------------------------------------

Capture = tp.Callable[..., tp.Any]


@dataclasses.dataclass(frozen=True)
class Case:
  name: str
  make: tp.Callable[[], nnx.Module]
  inputs: tp.Callable[[], tuple[tp.Any, ...]]
  run: tp.Callable[..., tp.Any]  # run(capture, model, *inputs) -> result
  # Modes in which Flax 0.12.8 itself runs the model with Hijax Variables
  # (without any capture): there the new capture must match the plain run.
  # Flax's nnx.jit, nnx.vmap/nnx.scan-built stacks and nnx.RNN do not
  # support Hijax Variables yet (see test_flax_jit_with_hijax_fails).
  hijax_modes: tuple[str, ...] = ('eager',)
  # Where the legacy implementation fails: the error it raises (a regex),
  # and an independent oracle, oracle(model, *inputs) -> expected result.
  legacy_error: str | None = None
  oracle: tp.Callable[..., tp.Any] | None = None
  # What the model is built and run in (a mesh, a configuration flag).
  context: tp.Callable[[], tp.ContextManager[tp.Any]] = contextlib.nullcontext


def _forward(capture: Capture, model, *inputs):
  return capture(model, nnx.Intermediate)(*inputs)


def _train_forward(capture: Capture, model, *inputs):
  model.train()
  return capture(model, nnx.Intermediate)(*inputs)


def _eval_forward(capture: Capture, model, *inputs):
  model.eval()
  return capture(model, nnx.Intermediate)(*inputs)


def _training_step(capture: Capture, model, x, y):
  """Perturbation gradients and activations together, then an optax step."""
  optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
  _, perturbations = capture(model, nnx.Perturbation)(x)

  def loss_fn(model, perturbations):
    out, sown = capture(model, nnx.Intermediate, init=perturbations)(x)
    return jnp.mean((out - y) ** 2), sown

  (grads, perturbation_grads), sown = nnx.grad(
      loss_fn, argnums=(0, 1), has_aux=True)(model, perturbations)
  optimizer.update(model, grads)
  return (perturbations, sown, grads, perturbation_grads,
          nnx.state(optimizer, nnx.optimizer.OptState))


def _lstm_by_hand(model: LSTM, x):
  """The LSTM stepped in a Python loop with the cell's own, unsown math."""
  cell = model.rnn.cell
  # As nnx.RNN does: the carry is initialized from the RNN's own stream.
  carry = cell.initialize_carry((x.shape[0], x.shape[2]), model.rnn.rngs)
  outputs = []
  for t in range(x.shape[1]):
    carry, y = nnx.LSTMCell.__call__(cell, carry, x[:, t])
    outputs.append(y)
  sown = nnx.State({'rnn': {'cell': {
      'cell_out': nnx.Intermediate((jnp.stack(outputs),))}}})
  return jnp.stack(outputs, axis=1), sown


def _reducers_and_method_outputs(capture: Capture, model, x):
  out, sown = capture(model, nnx.Intermediate)(x)
  _, outputs = capture(model, nnx.Intermediate,
                       method_outputs=nnx.Intermediate)(x)
  return out, sown, outputs


# float32 inputs, as Flax's layers' float32 parameters expect (also where
# JAX_ENABLE_X64 makes float64 the default).
_X = lambda *shape: (jax.random.normal(jax.random.key(7), shape, jnp.float32),)

CASES = [
    Case('mlp', lambda: MLP(nnx.Rngs(0)), lambda: _X(5, 4), _forward),
    Case('cnn_train', lambda: CNN(nnx.Rngs(0, dropout=1)),
         lambda: _X(2, 6, 6, 1), _train_forward),
    Case('cnn_eval', lambda: CNN(nnx.Rngs(0, dropout=1)),
         lambda: _X(2, 6, 6, 1), _eval_forward),
    Case('transformer_lm', lambda: DecoderLM(LMConfig(), nnx.Rngs(0)),
         lambda: (jnp.array([[1, 5, 2, 7, 3]]),), _forward),
    Case('scan_transformer', lambda: ScanTransformer(nnx.Rngs(0)),
         lambda: _X(2, 8), _forward, hijax_modes=()),
    Case('lstm', lambda: LSTM(nnx.Rngs(0)), lambda: _X(2, 4, 3), _forward,
         hijax_modes=(), legacy_error='carry input and carry output must'
         ' have the same pytree structure', oracle=_lstm_by_hand),
    Case('vae', lambda: VAE(nnx.Rngs(0, noise=3)), lambda: _X(4, 6),
         _forward),
    Case('ensemble', lambda: Ensemble(nnx.Rngs(0)), lambda: _X(5, 4),
         _forward, hijax_modes=()),
    Case('training_step', lambda: Perturbed(nnx.Rngs(0)),
         lambda: (*_X(6, 4), jnp.ones((6, 1), jnp.float32)), _training_step,
         hijax_modes=()),  # nnx.grad: see test_flax_grad_with_hijax_fails
    Case('reducers_method_outputs', lambda: Reducers(nnx.Rngs(0)),
         lambda: _X(2, 3), _reducers_and_method_outputs),
]

# ---------------------------------------------------------------------------
# Running and comparing
# ---------------------------------------------------------------------------


def _execute(case: Case, implementation: str, mode: str, *,
             hijax: bool = False):
  """Builds the model afresh (same seeds: identical clones) and runs it.

  With ``hijax``, every Variable (the model's and those created during the
  call) is a Hijax Variable: the whole run is under ``var_defaults``.
  """
  if implementation == 'legacy':
    routing, capture = sow_legacy.flax_methods(), sow_legacy.capture
  else:
    routing, capture = capture_compat.install(), capture_compat.capture
  with nnx.var_defaults(hijax=hijax), routing, case.context():
    model = case.make()
    inputs = case.inputs()
    run = lambda model, *inputs: case.run(capture, model, *inputs)
    if mode == 'jit':
      run = nnx.jit(run)
    result = run(model, *inputs)
    return result, nnx.state(model)


def _flat(tree) -> list[tuple[str, str, np.ndarray]]:
  """(path, Variable type or '', value) for every array leaf of ``tree``."""
  rows = []
  leaves = jax.tree_util.tree_leaves_with_path(
      tree, is_leaf=lambda x: isinstance(x, nnx.Variable))
  for path, leaf in leaves:
    kind = ''
    if isinstance(leaf, nnx.Variable):
      kind = type(leaf).__name__
      leaf = leaf.get_value()
    for sub_path, value in jax.tree_util.tree_leaves_with_path(leaf):
      key = jax.tree_util.keystr(path) + jax.tree_util.keystr(sub_path)
      if jnp.issubdtype(jnp.result_type(value), jax.dtypes.prng_key):
        value = jax.random.key_data(value)
      rows.append((key, kind, np.asarray(value)))
  return rows


def _count_variables(tree, kind: type[nnx.Variable]) -> int:
  return sum(
      isinstance(leaf, kind) for leaf in jax.tree_util.tree_leaves(
          tree, is_leaf=lambda x: isinstance(x, nnx.Variable)))


@dataclasses.dataclass
class Comparison:
  case: str
  mode: str
  implementation: str
  sites: int
  values: int
  max_abs_diff: float
  status: str
  source: str = 'this file'  # where the model's code is: repo@commit paths


ROWS: list[Comparison] = []


@contextlib.contextmanager
def _legacy_sow_outside_capture():
  """The tripwires call the model directly: Flax's deprecated sow path."""
  with warnings.catch_warnings():
    warnings.filterwarnings(
        'ignore', message=r'Using .Module\.sow\(\). outside of',
        category=DeprecationWarning)
    yield


class ComparingTestCase(parameterized.TestCase):
  """The comparisons, shared by the suite's models and external ones."""

  def assert_same(self, got, expected, what: str, *, kinds: bool = True,
                  bitwise: bool = True) -> tuple[int, float]:
    """Equal paths, Variable types (if ``kinds``) and values.

    Values are compared bitwise where both sides run the same operations
    (legacy and new), else (``bitwise=False``: an oracle that is another
    program) to float rounding, as ``sow_testing.assert_close`` explains.
    """
    got_rows, expected_rows = _flat(got), _flat(expected)
    strip = (lambda k: k) if kinds else (lambda k: '')
    self.assertEqual([(p, strip(k)) for p, k, _ in got_rows],
                     [(p, strip(k)) for p, k, _ in expected_rows],
                     f'{what}: paths or Variable types differ')
    max_diff = 0.0
    for (path, _, a), (_, _, b) in zip(got_rows, expected_rows):
      if bitwise:  # the new implementation runs the same operations
        np.testing.assert_array_equal(a, b, err_msg=f'{what} at {path}')
      else:
        sow_testing.assert_close(a, b, err_msg=f'{what} at {path}')
      if a.size and jnp.issubdtype(a.dtype, jnp.number):
        # Complex values too (Lenia keeps its FFT kernel in its state).
        wide = np.complex128 if np.iscomplexobj(a) else np.float64
        max_diff = max(max_diff, float(np.max(np.abs(
            a.astype(wide) - b.astype(wide)))))
    return len(got_rows), max_diff

  def compare_with_legacy(self, case, mode: str, source: str = 'this file',
                          known_difference: str | None = None):
    """Runs ``case`` under both implementations; all must be equal.

    With ``known_difference`` (why they differ), the values must instead
    differ, but only by float rounding: paths and Variable types still equal,
    values within ``sow_testing.assert_close``, and at least one value not
    bitwise equal (when none is, the difference is gone: the test fails so
    that the entry is removed).
    """
    legacy, legacy_state = _execute(case, 'legacy', mode)
    new, new_state = _execute(case, 'new', mode)
    sites = _count_variables(legacy, nnx.Intermediate) + _count_variables(
        legacy, nnx.Perturbation)
    self.assertGreater(sites, 0, 'the legacy run captured nothing')
    bitwise = known_difference is None
    values, diff = self.assert_same(new, legacy, 'result', bitwise=bitwise)
    n, d = self.assert_same(new_state, legacy_state, 'updated model state',
                            bitwise=bitwise)
    status = 'equal'
    if not bitwise:
      differing = _bitwise_differences(new, legacy) + _bitwise_differences(
          new_state, legacy_state)
      self.assertNotEmpty(
          differing, f'{case.name} {mode} is now bitwise equal to legacy:'
          ' remove it from KNOWN_DIFFERENCES')
      status = (f'{len(differing)} of {values + n} values differ by rounding'
                f' (first: `{differing[0]}`), known: {known_difference}')
    for implementation in ('legacy', 'new'):
      ROWS.append(Comparison(case.name, mode, implementation, sites,
                              values + n, max(diff, d), status, source))


def _bitwise_differences(got, expected) -> list[str]:
  """The paths whose values are not bitwise equal (paths already match)."""
  return [path for (path, _, a), (_, _, b) in zip(_flat(got), _flat(expected))
          if not np.array_equal(a, b)]


class ParityTest(ComparingTestCase):

  @parameterized.named_parameters(
      (f'{c.name}_{mode}', c.name, mode)
      for c in CASES for mode in ('eager', 'jit'))
  def test_new_matches_legacy(self, case, mode):
    case = next(c for c in CASES if c.name == case)
    if case.legacy_error is not None:
      self.check_against_oracle(case, mode)
      return
    self.compare_with_legacy(case, mode)

  def check_against_oracle(self, case: Case, mode: str):
    """The legacy run fails as known; the new one equals the oracle."""
    if sow_legacy.is_available():  # else only the oracle
      with self.assertRaisesRegex(Exception, case.legacy_error):
        _execute(case, 'legacy', mode)
    new, new_state = _execute(case, 'new', mode)
    model = case.make()
    expected = case.oracle(model, *case.inputs())
    # The oracle steps the cell eagerly, op by op, where nnx.RNN runs it in
    # a compiled scan body with the gate math fused: another program.
    values, diff = self.assert_same(new, expected, 'result vs oracle',
                                    bitwise=False)
    self.assert_same(new_state, nnx.state(model), 'state vs oracle')
    sites = _count_variables(new, nnx.Intermediate)
    ROWS.append(Comparison(case.name, mode, 'legacy', 0, 0, 0.0,
                            'fails: ' + case.legacy_error))
    ROWS.append(Comparison(case.name, mode, 'new', sites, values, diff,
                            'equal to the hand-written oracle'))

  @parameterized.named_parameters(
      (f'{c.name}_{mode}', c.name, mode)
      for c in CASES for mode in c.hijax_modes)
  def test_hijax_variables(self, case, mode):
    case = next(c for c in CASES if c.name == case)
    plain, plain_state = _execute(case, 'new', mode)
    hijax, hijax_state = _execute(case, 'new', mode, hijax=True)
    # The model's own Variables are HijaxVariables there, by design: their
    # values must match, and the captured State keeps its Variable types.
    values, diff = self.assert_same(hijax, plain, 'hijax result',
                                    kinds=case.name != 'training_step')
    self.assert_same(hijax_state, plain_state, 'hijax updated state',
                     kinds=False)
    sites = _count_variables(hijax, nnx.Intermediate)
    ROWS.append(Comparison(case.name, f'{mode}, hijax', 'new', sites,
                            values, diff, 'equal to the plain run'))

  def test_flax_jit_with_hijax_fails(self):
    # A tripwire: Flax 0.12.8's own nnx.jit cannot run a model with Hijax
    # Variables, capture or not. When this test fails, Flax has fixed it:
    # add 'jit' to the cases' hijax_modes.
    with nnx.var_defaults(hijax=True), _legacy_sow_outside_capture():
      model = MLP(nnx.Rngs(0))
      with self.assertRaisesRegex(AttributeError, '_can_update'):
        nnx.jit(lambda m, x: m(x))(model, *_X(5, 4))

  def test_flax_grad_with_hijax_fails(self):
    # A tripwire: Flax 0.12.8's own nnx.grad cannot differentiate a model
    # with Hijax Variables. When this test fails, add 'eager' to the
    # training step's hijax_modes.
    with nnx.var_defaults(hijax=True), _legacy_sow_outside_capture():
      model = MLP(nnx.Rngs(0))
      if jax.__version_info__ < (0, 10, 2):
        # JAX 0.10.0 and 0.10.1 fail earlier, asserting inside jax.grad.
        failure = self.assertRaises(AssertionError)
      else:
        failure = self.assertRaisesRegex(NotImplementedError, 'get_variable')
      with failure:
        nnx.grad(lambda m: jnp.sum(m(*_X(5, 4))))(model)

  def test_legacy_returns_an_empty_state_under_hijax(self):
    # The motivating difference. When Flax fixes it, this test fails: then
    # update the behavior-changes table.
    case = next(c for c in CASES if c.name == 'mlp')
    (_, sown), _ = _execute(case, 'legacy', 'eager', hijax=True)
    self.assertEqual(_count_variables(sown, nnx.Intermediate), 0)
    (_, sown), _ = _execute(case, 'new', 'eager', hijax=True)
    self.assertEqual(_count_variables(sown, nnx.Intermediate), 3)
    ROWS.append(Comparison('mlp', 'eager, hijax', 'legacy', 0, 0, 0.0,
                            'empty State (known legacy failure)'))


def render_report(rows: list[Comparison],
                  sources: tp.Iterable[tp.Any] = (),
                  notes: tp.Mapping[str, str] | None = None) -> str:
  """The Markdown table of ``rows``; with the external ``sources`` used
  (``sow_external_models.Source``) and the ``notes`` of the known differences
  the rows name."""
  lines = [
      '| model | mode | implementation | sow sites | values compared |'
      ' max abs diff | status | source |',
      '|---|---|---|---|---|---|---|---|',
  ]
  for r in sorted(rows, key=lambda r: (r.case, r.mode, r.implementation)):
    lines.append(f'| {r.case} | {r.mode} | {r.implementation} | {r.sites} |'
                 f' {r.values} | {r.max_abs_diff:g} | {r.status} |'
                 f' {r.source} |')
  sources = sorted(sources, key=lambda s: s.key)
  notes = notes or {}
  if sources:
    here = os.path.relpath(os.path.abspath(__file__), sow_layout.ROOT)
    lines += ['', f'Sources (`this file`: {here}):', '']
    for src in sources:
      lines.append(f'- {src.repo} at commit {src.commit}, checked out at'
                   f' `{src.root}`')
  labels = sorted({label for label in notes
                   for r in rows if r.status.endswith(f'known: {label}')})
  if labels:
    lines += ['', 'Known differences:', '']
    lines += [f'- {label}: {notes[label]}' for label in labels]
  return '\n'.join(lines) + '\n'


def write_report(sources: tp.Iterable[tp.Any] = (),
                 notes: tp.Mapping[str, str] | None = None) -> None:
  """Writes the report to ``--report``, if given (run directly)."""
  path = _REPORT.value if flags.FLAGS.is_parsed() else None
  if path:
    report = render_report(ROWS, sources, notes)
    with open(path, 'w') as f:
      f.write(report)
    print(report)


def tearDownModule():
  write_report()


if __name__ == '__main__':
  absltest.main()
