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
"""``discover``: the sites of a call, listed without running it.

The oracle is ``capture`` itself: discover's names, entries, shapes and
dtypes are those of what ``capture(f)`` returns for the same call.
"""

import inspect
import os
import time

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax import nnx
from flax.nnx.sow import capture
from flax.nnx.sow import discover
from flax.nnx.sow import sow
from flax.nnx.sow import tap

import sow_layout

X = jnp.array([-0.8, 0.4, 1.1], jnp.float32)
THIS_FILE = os.path.basename(__file__)


def avals(collected):
  """``capture``'s collected as (shape, dtype) per leaf, names in order."""
  return list(jax.tree.map(lambda a: (a.shape, a.dtype), collected).items())


def program(x, with_cond=True):
  """A sow at every kind of site: top level, jit, scan, cond, vmap, remat
  (without the cond, a vmap of it can be captured)."""
  h = sow(jnp.sin(x), name='top')
  h = jax.jit(lambda v: sow(v * 2, name='jit', tag='t') + 1)(h)
  h = lax.scan(lambda c, _: (sow(c * 0.5, name=('scan', 0)) + c, None), h,
               None, length=4)[0]
  if with_cond:
    h = lax.cond(h[0] > 0, lambda v: sow(v + 1, name='cond'),
                 lambda v: sow(v - 1, name='cond'), h)
  h = jax.checkpoint(lambda v: sow(jnp.tanh(v), name='remat'))(h)
  h = jax.vmap(lambda v: sow({'sq': v * v, 'n': v.size}, name='vmap'))(
      h[:, None])['sq'][:, 0]
  sow(h, name='top')  # a second entry under the same name
  sow(jnp.sum(h), name='last', mode='clobber')
  sow(jnp.sum(h) + 1, name='last', mode='clobber')
  return jnp.sum(h)


def decode(x):
  def body(c):
    i, h = c
    return i + 1, sow(jnp.tanh(h + i), name='h')
  return lax.while_loop(lambda c: c[0] < 3, body, (0, x))[1]


class Block(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(3, 3, rngs=rngs)
    self.calls = nnx.Variable(jnp.zeros((), jnp.int32))

  def __call__(self, x):
    self.calls[...] += 1
    h = self.linear(x)
    self.sow(nnx.Intermediate, 'h', h)
    return nnx.relu(h)


class Model(nnx.Module):

  def __init__(self, rngs):
    self.blocks = nnx.List([Block(rngs), Block(rngs)])

  def __call__(self, x):
    for block in self.blocks:
      x = block(x)
    return sow(x, name='logits')


class DiscoverMatchesCaptureTest(parameterized.TestCase):
  """discover lists what capture returns: names, entries, shapes, dtypes."""

  def setUp(self):
    super().setUp()
    self.enterContext(sow_layout.overlay())

  def assertLikeCapture(self, f, *args, **options):
    sites = discover(f, **options)(*args)
    _, collected = capture(f, **options)(*args)
    self.assertEqual(avals(sites.abstract()), avals(collected))
    self.assertEqual(sites.names, tuple(collected))
    for row in sites:
      self.assertLen(collected[row.name], row.occurrences)
      self.assertEqual(row.nbytes, sum(
          leaf.nbytes for leaf in jax.tree.leaves(collected[row.name])))
    return sites

  def test_plain_function_every_kind_of_site(self):
    sites = self.assertLikeCapture(program, X)
    self.assertEqual(sites['top'].occurrences, 2)
    self.assertEqual(sites[('scan', 0)].entries[0].shape, (4, 3))
    self.assertEqual(sites['last'].occurrences, 1)  # clobbered
    self.assertEqual(sites['jit'].tag, 't')
    self.assertEqual(sites['top'].tags, (None,))

  def test_tag_and_names_select_as_capture_does(self):
    self.assertLikeCapture(program, X, tag='t')
    self.assertLikeCapture(program, X, names=('top', 'remat'))
    self.assertLikeCapture(program, X, names=lambda n: n != 'top')

  def test_vmap_and_jit_of_f(self):
    xs = jnp.stack([X, X + 1])
    sites = self.assertLikeCapture(
        jax.vmap(lambda x: program(x, with_cond=False)), xs)
    self.assertEqual(sites[('scan', 0)].entries[0].shape, (2, 4, 3))
    self.assertLikeCapture(jax.jit(program), X)

  def test_while_loop_needs_max_steps_as_capture_does(self):
    sites = self.assertLikeCapture(decode, X, max_steps=5)
    (steps,) = sites['h'].entries
    self.assertEqual(steps.values.shape, (5, 3))
    with self.assertRaisesRegex(Exception, 'max_steps'):
      discover(decode)(X)
    with self.assertRaisesRegex(Exception, 'max_steps'):
      capture(decode)(X)

  def test_module_sow_named_by_module_path(self):
    model = Model(nnx.Rngs(0))
    sites = self.assertLikeCapture(lambda m, x: m(x), model, X)
    self.assertEqual(sites.names,
                     (('blocks', 0, 'h'), ('blocks', 1, 'h'), 'logits'))
    self.assertIs(sites[('blocks', 0, 'h')].tag, nnx.Intermediate)
    self.assertLikeCapture(model, X)  # the module as the function
    self.assertLikeCapture(jax.jit(lambda m, x: m(x)), model, X)

  def test_tapped_modules(self):
    model = Model(nnx.Rngs(0))
    tapped = tap(Model.__call__, ('blocks', '*'))
    sites = self.assertLikeCapture(tapped, model, X)
    self.assertIn(('blocks', 1, '__call__', 'output'), sites)
    self.assertLikeCapture(tap(model, ('blocks', 0)), X)

  def test_scan_over_layers(self):
    @nnx.vmap(in_axes=0)
    def layers(key):
      return Block(nnx.Rngs(key))

    layers = layers(jax.random.split(jax.random.key(0), 4))

    def run(layers, x):
      def body(x, layer):
        return layer(x), None
      return nnx.scan(body, in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))(
          x, layers)[0]

    self.assertLikeCapture(run, layers, X)

  def test_abstract_arguments(self):
    x = jax.ShapeDtypeStruct((3,), jnp.float32)
    sites = discover(program)(x)
    _, collected = capture(program)(X)
    self.assertEqual(avals(sites.abstract()), avals(collected))
    abstract_model = nnx.eval_shape(lambda: Model(nnx.Rngs(0)))
    sites = discover(lambda m, x: m(x))(abstract_model, x)
    _, collected = capture(lambda m, x: m(x))(Model(nnx.Rngs(0)), X)
    self.assertEqual(avals(sites.abstract()), avals(collected))

  def test_static_arguments_reach_f_as_they_are(self):
    def f(x, n, activation):
      for i in range(n):
        x = sow(getattr(jnp, activation)(x), name=('layer', i))
      return x

    sites = self.assertLikeCapture(f, X, 3, 'tanh')
    self.assertLen(sites, 3)

  def test_source_lines(self):
    sites = discover(program)(X)
    lines, start = inspect.getsourcelines(program)
    top = start + next(i for i, l in enumerate(lines) if "name='top'" in l)
    self.assertIn(f'{THIS_FILE}:{top} (program)', sites['top'].where[0])
    self.assertLen(sites['top'].where, 2)  # two lines sow it
    self.assertLen(sites['cond'].where, 2)  # one per branch
    tapped = tap(Model.__call__, ('blocks', '*'))
    sites = discover(tapped)(Model(nnx.Rngs(0)), X)
    lines, start = inspect.getsourcelines(Model.__call__)
    call = start + next(i for i, l in enumerate(lines) if 'block(x)' in l)
    self.assertIn(f'{THIS_FILE}:{call} (Model.__call__)',
                  sites[('blocks', 0, '__call__', 'output')].where[0])


class DiscoverRunsNothingTest(absltest.TestCase):
  """Abstract evaluation only: nothing executes, compiles or is updated."""

  def setUp(self):
    super().setUp()
    self.enterContext(sow_layout.overlay())

  def test_host_callbacks_never_fire_and_nothing_compiles(self):
    calls = []

    def f(x):
      jax.debug.callback(lambda v: calls.append(v), x)
      return program(x, with_cond=False)

    compiles = []

    def listener(event, duration_secs, **kwargs):
      del duration_secs, kwargs
      if event == '/jax/core/compile/backend_compile_duration':
        compiles.append(event)

    batch = jax.block_until_ready(X[None])  # computed before listening
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
      for g, x in ((f, X), (jax.jit(f), X), (jax.vmap(f), batch)):
        self.assertIn('top', discover(g)(x))
    finally:
      jax.monitoring.unregister_event_duration_listener(listener)
    self.assertEqual(calls, [])
    self.assertEqual(compiles, [])

  def test_a_huge_computation_is_not_computed(self):
    # 40 matmuls of 16384 x 16384 in float32: about 350 TFLOP and 1 GiB per
    # activation, far beyond this machine in a test; traced, it is instant.
    def f(w, x):
      for i in range(40):
        x = sow(jnp.tanh(x @ w), name=('layer', i))
      return x

    w = jax.ShapeDtypeStruct((16384, 16384), jnp.float32)
    start = time.perf_counter()
    sites = discover(f)(w, w)
    self.assertLess(time.perf_counter() - start, 30)
    self.assertLen(sites, 40)
    self.assertEqual(sites.nbytes, 40 * 16384 * 16384 * 4)

  def test_graph_nodes_are_not_updated(self):
    model = Model(nnx.Rngs(0))
    before = jax.tree.map(np.asarray, nnx.state(model))
    discover(lambda m, x: m(x))(model, X)
    discover(model)(X)
    after = nnx.state(model)
    jax.tree.map(np.testing.assert_array_equal, before, after)
    for leaf in jax.tree.leaves(after):
      self.assertNotIsInstance(leaf, jax.core.Tracer)
    # A capture does update them: the counter is what discover left alone.
    capture(model)(X)
    self.assertEqual(int(model.blocks[0].calls[...]), 1)


def small(x):
  h = sow(jnp.tanh(x), name=('blocks', 0, 'out'))
  sow(jnp.sum(h), name='loss', tag='metrics')
  return h


class CachedBlock(nnx.Module):
  """A decoder layer's shape: ``x -> (cache, x)``."""

  def __init__(self, rngs):
    self.linear = nnx.Linear(4, 4, rngs=rngs)

  def __call__(self, x):
    return jnp.zeros((16, 4)) + jnp.sum(x), jnp.tanh(self.linear(x))


class CachedDecoder(nnx.Module):

  def __init__(self, rngs):
    self.layers = nnx.List([CachedBlock(rngs) for _ in range(2)])

  def __call__(self, x):
    for layer in self.layers:
      _, x = layer(x)
    return x


class SitesTest(absltest.TestCase):
  """The table: indexing, its text, its HTML and treescope renderings."""

  def test_golden_text(self):
    sites = discover(small)(jnp.ones((2, 3)))
    start = inspect.getsourcelines(small)[1]
    self.assertEqual(str(sites), '\n'.join([
        'Sites of small: 2 names, 2 entries, 28 B',
        '  name          tag        entries  value     bytes  where',
        f'  blocks.0.out  -          1        f32[2,3]  24 B   {THIS_FILE}:'
        f'{start + 1} (small)',
        f"  loss          'metrics'  1        f32[]     4 B    {THIS_FILE}:"
        f'{start + 2} (small)',
    ]))
    self.assertEqual(repr(sites), str(sites))

  def test_leaf_paths_read_as_names_and_80_columns_fold(self):
    name = tuple(f'decoder_layer_with_a_long_name_{i}' for i in range(3))

    def block(x):
      # A decoder layer's (cache, x), tapped whole: two leaves.
      return sow((jnp.zeros((4, 2)), jnp.tanh(x)), name=name)

    sites = discover(block)(jnp.ones((2, 3)))
    self.assertEqual(sites[name].values, ('0: f32[4,2], 1: f32[2,3]',))
    text = sites.text(width=80)
    lines = text.splitlines()
    self.assertTrue(all(len(line) <= 80 for line in lines), text)
    column = lines[1].index('tag')
    self.assertEqual(''.join(line[:column].strip() for line in lines[2:]),
                     '.'.join(name))
    self.assertIn('56 B', text)  # short columns are never folded
    self.assertLen(str(sites).splitlines(), 3)  # not a terminal: a line

  def test_bytes_kept_per_decode_step_at_80_columns(self):
    # A decoder layer returns (cache, x); tapped whole, each decode step
    # keeps its cache, tapped with outputs=1 its x alone. Oracle: the bytes
    # of one step of what capture keeps, run.
    model = CachedDecoder(nnx.Rngs(0))

    def generate(model, x):
      def body(carry):
        i, x = carry
        return i + 1, model(x)
      return lax.while_loop(lambda c: c[0] < 3, body, (0, x))[1]

    x = jnp.ones((2, 4))
    for kept, outputs in (('x', 1), ('both', True)):
      tapped = tap(generate, 'layers.*', inputs=False, outputs=outputs)
      sites = discover(tapped, max_steps=5)(model, x)
      _, collected = capture(tapped, max_steps=5)(model, x)
      for row in sites:
        (run,) = collected[row.name]
        one_step = sum(np.asarray(leaf)[0].nbytes
                       for leaf in jax.tree_util.tree_leaves(run.values))
        self.assertEqual(row.step_nbytes, one_step, (outputs, row.name))
        self.assertEqual(row.nbytes, 5 * one_step + run.count.nbytes)
      per_step = [row.step_nbytes for row in sites]
      if kept == 'x':
        # x alone: (2, 4) float32.
        self.assertEqual(per_step, [32, 32])
        self.assertEqual(sites[0].values, ('5 steps of f32[2,4]',))
      else:
        # x and the (16, 4) cache.
        self.assertEqual(per_step, [32 + 256, 32 + 256])
        self.assertEqual(sites[0].values,
                         ('5 steps of 0: f32[16,4], 1: f32[2,4]',))
      text = sites.text(width=80)
      lines = text.splitlines()
      self.assertTrue(all(len(line) <= 80 for line in lines), text)
      header = lines[1]
      self.assertIn('per step', header)
      column = header.index('per step')
      cells = [line[column:].split('  ')[0].strip() for line in lines[2:]]
      self.assertEqual(
          [c for c in cells if c],
          ['32 B' if kept == 'x' else '288 B'] * 2, text)
    # Without a loop there is no such column.
    self.assertNotIn('per step', discover(small)(X).text(width=80))

  def test_indexing(self):
    sites = discover(small)(X)
    self.assertIs(sites[0], sites[('blocks', 0, 'out')])
    self.assertEqual(sites[-1].name, 'loss')
    self.assertIsInstance(sites, tuple)
    self.assertIn('loss', sites)
    self.assertNotIn('nope', sites)
    with self.assertRaisesRegex(KeyError, "small sows no 'nope'.*'loss'"):
      sites['nope']  # pylint: disable=pointless-statement

  def test_mixed_tags(self):
    def f(x):
      sow(x, name='h', tag='a')
      sow(x, name='h', tag='b')
      return x

    row = discover(f)(X)['h']
    self.assertEqual(row.tags, ('a', 'b'))
    with self.assertRaisesRegex(ValueError, "'h' is sown with 2 tags"):
      row.tag  # pylint: disable=pointless-statement

  def test_html(self):
    html = discover(small)(X)._repr_html_()
    self.assertIn('<table>', html)
    self.assertIn('blocks.0.out', html)
    self.assertIn('&#x27;metrics&#x27;', html)  # escaped

  def test_treescope(self):
    import treescope  # pylint: disable=g-import-not-at-top

    sites = discover(small)(X)
    text = treescope.render_to_text(sites)
    self.assertIn('Sites of small: 2 names', text)
    html = treescope.render_to_html(sites, compressed=False)
    self.assertIn('blocks.0.out', html)


class DiscoverBadInputTest(absltest.TestCase):

  def test_not_callable(self):
    with self.assertRaisesRegex(TypeError, 'discover: expected a callable'):
      discover(3)

  def test_bad_options_as_capture(self):
    with self.assertRaisesRegex(Exception, 'discover'):
      discover(small, max_steps=-1)

  def test_a_function_that_sows_nothing(self):
    def quiet(x):
      return x * 2

    sites = discover(quiet)(X)
    self.assertEmpty(sites)
    self.assertEqual(str(sites), 'Sites: quiet sows no sites')
    self.assertIn('quiet sows no sites', sites._repr_html_())
    # A tag that selects nothing is an error, as for capture.
    with self.assertRaisesRegex(
        ValueError, r"capture\(tag='other'\) selected no sow"):
      discover(small, tag='other')(X)


if __name__ == '__main__':
  absltest.main()
