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
"""Nothing of a call is written onto the caller's modules: the module paths
that name ``Module.sow`` sites are the call's own (issue 45, item 1).

Oracles: ``nnx.graphdef``/``nnx.split`` of the model outside any call, a
fresh model of the same class, the values recomputed from the parameters
(``compat_testing.by_hand``), and a thread's own trace count.
"""

import pickle
import threading

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx import capture_compat
from flax.nnx.sow import capture
from flax.nnx.sow import plant
from flax.nnx.sow import sow
from flax.nnx.sow import tap
from flax.nnx.sow.lift import class_hooks

from compat_testing import by_hand, Net, X  # pylint: disable=g-multiple-import
import sow_testing

# One nnx.jit for both blocks: one trace (equal structures), two paths.
_run_block = nnx.jit(lambda block, x: block(x))


def forward(net, x):
  """Net's forward with each block under one shared nnx.jit."""
  for block in net.blocks:
    x = _run_block(block, x)
  out = net.head(x)
  net.sow(nnx.Intermediate, 'out', out)
  return out


def _functional(f):
  return lambda net, x: capture(f)(net, x)[1]


def _functional_jit(f):
  return lambda net, x: jax.jit(capture(f))(net, x)[1]


def _compat(f):
  return lambda net, x: nnx.capture(f, nnx.Intermediate)(net, x)[1]


def _compat_jit(f):
  return lambda net, x: nnx.jit(
      lambda net, x: nnx.capture(f, nnx.Intermediate)(net, x)[1])(net, x)


RUNS = (
    ('functional', _functional),
    ('functional_jit', _functional_jit),
    ('compat', _compat),
    ('compat_jit', _compat_jit),
)


def _tapped(f):
  return lambda net, x: capture(tap(f, ('blocks', '*')))(net, x)[1]


def _tapped_jit(f):
  return lambda net, x: jax.jit(capture(tap(f, ('blocks', '*'))))(net, x)[1]


def _method_outputs(f):
  return lambda net, x: nnx.capture(
      f, nnx.Intermediate, method_outputs=nnx.Intermediate)(net, x)[1]


TAPPED = (
    ('tap', _tapped),
    ('tap_jit', _tapped_jit),
    ('method_outputs', _method_outputs),
)


def _block_outputs(collected):
  """What a tap (or method_outputs) kept of each block's call, by index."""
  return _block_outputs_of(collected, (0, 1))


def _block_outputs_of(collected, blocks):
  if isinstance(collected, nnx.State):
    flat = {tuple(p): v.get_value() for p, v in nnx.to_flat_state(collected)}
    return {i: flat[('blocks', i, '__call__')] for i in blocks}
  return {i: collected[('blocks', i, '__call__', 'output')] for i in blocks}


def _names(collected):
  """The names of a functional capture's result or a compat State."""
  if isinstance(collected, nnx.State):
    return [tuple(path) for path, _ in nnx.to_flat_state(collected)]
  return list(collected)


class NothingOnModulesTest(parameterized.TestCase):

  def setUp(self):
    super().setUp()
    self.enterContext(capture_compat.install())

  @parameterized.named_parameters(*RUNS)
  def test_split_inside_is_split_outside(self, run):
    net = Net(nnx.Rngs(0))
    graphdef, state = nnx.split(net)
    inside = []

    def f(net, x):
      inside.append(nnx.split(net)[0])
      # Also inside a transformation the call makes.
      inside.append(nnx.jit(lambda m: nnx.split(m)[0])(net))
      return forward(net, x)

    collected = run(f)(net, X)
    self.assertEqual(
        _names(collected),
        [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('out',)])
    self.assertLen(inside, 2)
    for seen in inside:
      self.assertEqual(seen, graphdef)
    # And after it: the same graph, the same values.
    self.assertEqual(nnx.graphdef(net), graphdef)
    for (path, a), (_, b) in zip(nnx.to_flat_state(nnx.state(net)),
                                 nnx.to_flat_state(state)):
      np.testing.assert_array_equal(a.get_value(), b.get_value(),
                                    err_msg=str(path))

  @parameterized.named_parameters(*RUNS)
  def test_a_module_merged_inside_is_a_fresh_module(self, run):
    net = Net(nnx.Rngs(0))
    fresh = Net(nnx.Rngs(1))
    kept = []

    def f(net, x):
      graphdef, state = nnx.split(net)
      kept.append(graphdef)
      return forward(net, x)

    run(f)(net, X)
    (graphdef,) = kept
    self.assertEqual(graphdef, nnx.graphdef(fresh))
    merged = nnx.merge(graphdef, nnx.state(fresh))
    # It pickles, and comes back equal.
    again = pickle.loads(pickle.dumps(merged))
    self.assertEqual(nnx.graphdef(again), nnx.graphdef(fresh))
    # Closed over in a later capture of another model, it is not one of
    # that capture's modules: refused, as a fresh module is.
    for module in (merged, fresh):
      with self.assertRaisesRegex(ValueError, 'not reachable from the'
                                  ' arguments'):
        capture(lambda other, x: module(x))(Net(nnx.Rngs(2)), X)

  def test_a_module_without_variables_traced_in_another_call_is_named(self):
    # Flax's own TestCapture.test_fwd_bwd: a stateless module whose method
    # is an nnx.jit, captured eagerly (which traces the method), then staged
    # inside nnx.jit and nnx.grad. No Variable names its copy there: the
    # NNX context it is made in does, in the staged call's own trace of the
    # method (a trace made in the eager call is not reused there).
    class Foo(nnx.Module):

      @nnx.jit
      def __call__(self, x):
        x = self.perturb('grad_of_x', x)
        y = 3 * x
        self.sow(nnx.Intermediate, 'y', y)
        return y

    model = Foo()
    _, perturbations = nnx.capture(model, nnx.Perturbation)(1.0)

    @nnx.jit
    def train_step(model, perturbations, x):
      def loss(model, perturbations, x):
        return nnx.capture(model, nnx.Intermediate, init=perturbations)(x)
      (_, grads), sown = nnx.grad(loss, argnums=(0, 1), has_aux=True)(
          model, perturbations, x)
      return nnx.merge_state(grads, sown)

    for x in (1.0, 2.0):
      got = train_step(model, perturbations, x)
      self.assertEqual(float(got['grad_of_x'].get_value()), 3.0)  # d(3x)/dx
      self.assertEqual(float(got['y'].get_value()[0]), 3.0 * x)

  @parameterized.named_parameters(('functional', False), ('compat', True))
  def test_a_jit_traced_at_the_top_is_named_when_reused_under_vmap(
      self, compat):
    # CAX's Lenia under nnx.vmap, after a run without it: the nnx.jit of a
    # step is traced at the top of a call, then reused under an nnx.vmap,
    # where its copy is made from the vmap's copy (one more context).
    class Step(nnx.Module):

      def __init__(self, rngs):
        self.linear = nnx.Linear(3, 3, rngs=rngs)

      @nnx.jit
      def __call__(self, x):
        h = self.linear(x)
        self.sow(nnx.Intermediate, 'h', h)
        return jnp.tanh(h)

    class Sim(nnx.Module):

      def __init__(self, rngs):
        self.step = Step(rngs)

      @nnx.jit
      def __call__(self, x):
        # Two steps in an nnx.scan, as CAX's driver runs them.
        state_axes = nnx.StateAxes({nnx.Intermediate: 0, ...: nnx.Carry})
        return nnx.scan(
            lambda sim, x: sim.step(x), in_axes=(state_axes, nnx.Carry),
            out_axes=nnx.Carry, length=2,
        )(self, x)

    def run(f, sim, x):
      if compat:
        state = nnx.capture(f, nnx.Intermediate)(sim, x)[1]
        return {tuple(p): v.get_value()
                for p, v in nnx.to_flat_state(state)}
      return dict(capture(f)(sim, x)[1])

    sim = Sim(nnx.Rngs(0))
    xs = jnp.stack([jnp.ones(3), jnp.arange(3.0)])
    run(lambda m, x: m(x), sim, xs[0])  # traces Step's nnx.jit at the top
    got = run(nnx.vmap(lambda m, x: m(x), in_axes=(None, 0)), sim, xs)
    linear = sim.step.linear
    # The bias broadcast explicitly, as Flax's CI raises on rank promotion.
    first = xs @ linear.kernel[...] + linear.bias[...][None]
    second = jnp.tanh(first) @ linear.kernel[...] + linear.bias[...][None]
    self.assertEqual(list(got), [('step', 'h')])
    (h,) = got[('step', 'h')]
    # Per example, the two steps (the scan's axis after the vmap's).
    sow_testing.assert_close(h, jnp.stack([first, second], axis=1))

  @parameterized.named_parameters(*RUNS)
  def test_a_copy_holding_two_modules_variables_is_refused(self, run):
    # A module made inside the call holding block 1's kernel and block 0's
    # bias (in Variables of its own): its values are the call's, at two
    # module paths, so which module sows cannot be told (never the one its
    # last Variable names).
    def f(net, x):
      mixed = type(net.blocks[1])(4, 4, nnx.Rngs(1))
      mixed.linear.kernel = nnx.Param(net.blocks[1].linear.kernel.get_value())
      mixed.linear.bias = nnx.Param(net.blocks[0].linear.bias.get_value())
      return mixed(net.blocks[0](x))

    with self.assertRaisesRegex(
        ValueError, r"holds at other module paths \(\('blocks', 0\),"
        r" \('blocks', 1\)\)"):
      run(f)(Net(nnx.Rngs(0)), X)

  @parameterized.named_parameters(*TAPPED)
  def test_a_tap_leaves_modules_as_they_are(self, run):
    # Inside a tapped call (the blocks run under a shared nnx.jit, so the
    # tapped calls are of copies), a block is of its own class and split
    # gives the graphdef of outside; a module merged from it is plain.
    net = Net(nnx.Rngs(0))
    graphdef = nnx.graphdef(net)
    block_class = type(net.blocks[0])
    before = dict(vars(block_class))
    inside = []

    def f(net, x):
      inside.append((nnx.split(net)[0], type(net.blocks[0])))
      return forward(net, x)

    collected = run(f)(net, X)
    _, want = by_hand(net, X)
    for i, got in _block_outputs(collected).items():
      (h,) = want[('blocks', i, 'h')]
      self.assertLen(got, 1)
      sow_testing.assert_close(got[0], jnp.tanh(h))
    for seen, cls in inside:
      self.assertEqual(seen, graphdef)
      self.assertIs(cls, block_class)
    merged = nnx.merge(inside[0][0], nnx.state(Net(nnx.Rngs(1))))
    self.assertIs(type(merged.blocks[0]), block_class)
    again = pickle.loads(pickle.dumps(merged))
    self.assertEqual(nnx.graphdef(again), graphdef)
    # After it, the class is as it was.
    self.assertEqual(dict(vars(block_class)), before)
    self.assertEqual(class_hooks.held(), {})

  @parameterized.named_parameters(*TAPPED)
  def test_a_jit_traced_before_the_tap_traces_again_once_for_it(self, run):
    # A trace of the blocks' nnx.jit made outside the tap would run none of
    # their calls: under the tap (a state in JAX's jit key) it traces again,
    # once for every block (one structure) and every later tapped call made
    # eagerly; a staged call (a new jax.jit here each time) traces it anew
    # for itself (see `module_paths.staging`).
    traces = []

    @nnx.jit
    def run_block(block, x):
      traces.append(None)
      return block(x)

    def f(net, x):
      for block in net.blocks[1:]:  # blocks of one structure (4 -> 4)
        x = run_block(block, x)
      return x

    net = Net(nnx.Rngs(0))
    x = jnp.ones(4)
    capture(f)(net, x)
    self.assertLen(traces, 1)
    for _ in range(3):
      got = _block_outputs_of(run(f)(net, x), [1])
      h = x @ net.blocks[1].linear.kernel[...] + net.blocks[1].linear.bias[...]
      sow_testing.assert_close(got[1][0], jnp.tanh(h))
    self.assertLen(traces, 4 if run is _tapped_jit else 2)

  def test_another_threads_nnx_jit_traces_once(self):
    # One thread captures the model over and over (nnx.jit inside); another
    # calls its own nnx.jit of the same model, plainly: it traces once, as
    # without the capturing thread. Both threads' jits write back only what
    # changed (`graph_updates=False`): in its default mode NNX's nnx.jit
    # clears and refills the caller's modules after each call, so that the
    # other thread, capture or not, can find `net.head` missing (seen in CI).
    net = Net(nnx.Rngs(0))
    traces = []
    run_block = nnx.jit(lambda block, x: block(x), graph_updates=False)

    def forward(net, x):  # as the module's, with the thread-safe jit
      for block in net.blocks:
        x = run_block(block, x)
      out = net.head(x)
      net.sow(nnx.Intermediate, 'out', out)
      return out

    @nnx.jit(graph_updates=False)
    def plain_forward(net, x):
      traces.append(None)
      return _plain(net, x)

    expected = plain_forward(net, X)
    traces.clear()
    stop = threading.Event()
    failures = []

    def capturing():
      try:
        while not stop.is_set():
          capture(forward)(net, X)
          nnx.capture(forward, nnx.Intermediate)(net, X)
          _tapped(forward)(net, X)
          _method_outputs(forward)(net, X)
      except Exception as e:  # pylint: disable=broad-except
        failures.append(e)

    thread = threading.Thread(target=capturing)
    thread.start()
    try:
      for _ in range(50):
        np.testing.assert_array_equal(plain_forward(net, X), expected)
    finally:
      stop.set()
      thread.join()
    self.assertEqual(failures, [])
    self.assertEqual(traces, [])  # the trace made before, reused 50 times

  def test_eight_threads_of_mixed_calls_one_not_capturing(self):
    # NNX's nnx.jit in graph-updates mode (the default) rebuilds the
    # caller's modules in place after each call, which no other thread may
    # then read, capture or not: the threads share jits that write back
    # only what changed (`graph_updates=False`), as sharing a model across
    # threads requires.
    run_block = nnx.jit(lambda block, x: block(x), graph_updates=False)
    run_plain = nnx.jit(_plain, graph_updates=False)

    def forward(net, x):  # as the module's, with the threads' shared jit
      for block in net.blocks:
        x = run_block(block, x)
      out = net.head(x)
      net.sow(nnx.Intermediate, 'out', out)
      return out

    compat_jit = lambda f: nnx.jit(
        lambda net, x: nnx.capture(f, nnx.Intermediate)(net, x)[1],
        graph_updates=False)
    net = Net(nnx.Rngs(0))
    graphdef = nnx.graphdef(net)
    n_threads, n_calls = 8, 200
    inputs = [[X + 0.01 * (t * n_calls + i) for i in range(n_calls)]
              for t in range(n_threads)]
    expected = [[by_hand(net, x) for x in xs] for xs in inputs]
    runs = [_functional(forward), _functional_jit(forward), _compat(forward),
            compat_jit(forward)]
    barrier = threading.Barrier(n_threads)

    def planted(x):
      # The output replaced by the oracle's, plus one; the model (its
      # Module.sow sites, inside the shared nnx.jit) runs as in the others.
      with_logits = lambda net, x: sow(forward(net, x), name='logits')
      return plant(with_logits, {'logits': lambda out, i: out + 1.0})(net, x)

    def work(t):
      barrier.wait()
      for i, x in enumerate(inputs[t]):
        want_out, want = expected[t][i]
        if t == n_threads - 1:  # this thread captures nothing
          out = run_plain(net, x)
          sow_testing.assert_close(out, want_out)
          continue
        kind = (t + i) % (len(runs) + 2)
        if kind == len(runs):
          sow_testing.assert_close(planted(x), want_out + 1.0)
          continue
        if kind == len(runs) + 1:  # a tap of the shared blocks
          for b, got in _block_outputs(_tapped(forward)(net, x)).items():
            (h,) = want[('blocks', b, 'h')]
            sow_testing.assert_close(got[0], jnp.tanh(h))
          continue
        collected = runs[kind](net, x)
        self.assertEqual(_names(collected), list(want))
        for name, values in want.items():
          got = (collected[name] if not isinstance(collected, nnx.State)
                 else nnx.to_flat_state(collected)[
                     _names(collected).index(name)][1].get_value())
          self.assertLen(got, len(values))
          for g, v in zip(got, values):
            # Another program (matmuls by hand): equal to float rounding;
            # another thread's value would differ at order 1.
            sow_testing.assert_close(g, v)

    failures = sow_testing.run_in_threads(work, n_threads)
    self.assertEqual(failures, [])
    self.assertEqual(nnx.graphdef(net), graphdef)


def _plain(net, x):
  """Net's forward without its sows (outside any capture, Module.sow takes
  Flax 0.12.8's deprecated path and writes attributes onto the model,
  which a thread that captures nothing must not do to a shared model)."""
  for block in net.blocks:
    x = jnp.tanh(block.linear(x))
  return net.head(x)



if __name__ == '__main__':
  absltest.main()
