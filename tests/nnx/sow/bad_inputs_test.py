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
"""Every bad input gets the exact error of ``CASES``, which the guide
docs_nnx/guides/sow_bad_inputs.md shows (its test checks that it lists
exactly these cases and errors).
"""

import re

from absl.testing import absltest
from absl.testing import parameterized
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from flax.nnx.sow import capture
from flax.nnx.sow import discover
from flax.nnx.sow import perturb
from flax.nnx.sow import plant
from flax.nnx.sow import sow
from flax.nnx.sow.transform import primitive


X = jnp.array([0.5, -1.0, 2.0], jnp.float32)


@jax.custom_vjp
def _sowing_sin(v):
  sow(v * 3.0, name='h')
  return jnp.sin(v)


def _sowing_sin_fwd(v):
  sow(v, name='fwd_only')
  return _sowing_sin(v), None


_sowing_sin.defvjp(_sowing_sin_fwd, lambda _, ct: (ct,))


def _while_append(x):
  return lax.while_loop(lambda c: c[0] < 5.0, lambda c: sow(c + 1.0,
                                                            name='step'), x)


def _while_no_prior(x):
  return lax.while_loop(lambda c: c[0] < 5.0,
                        lambda c: sow(c + 1.0, name='c', mode='clobber'), x)


def _while_prior_mismatch(x):
  sow(x[:2], name='c', mode='clobber')
  return _while_no_prior(x)


def _h(x):
  return sow(jnp.sin(x), name='h') + 1.0


def _vmapped_grad_step(c, _):
  def per_row(y):
    return jnp.sum(jax.vmap(lambda z: jax.jvp(
        lambda w: jnp.sin(perturb(w, name='p')), (z,), (z,))[1])(y))
  return jax.vmap(jax.grad(per_row))(c), None


def h(x):
  """``_h`` under the guide's name: a message names the function."""
  return _h(x)


def _layers(x):
  for i in range(2):
    x = sow(x + 1.0, name=('layers', i, 'h'))
  return x


def _cond(true_fun, false_fun):
  return lambda x: lax.cond(x[0] > 0, true_fun, false_fun, x)


@jax.custom_vjp
def _scaled(v):
  return 2.0 * v


_scaled.defvjp(lambda v: (2.0 * v, None),
               lambda _, ct: (sow(2.0 * ct, name='b'),))


CASES = {
    'name_int': (
        lambda: sow(X, name=3),
        'TypeError: sow(name=3): name must be a str or a non-empty tuple of'
        ' str/int, got 3 of type int.'),
    'name_empty_tuple': (
        lambda: sow(X, name=()),
        'TypeError: sow(name=()): name must be a str or a non-empty tuple of'
        ' str/int, got () of type tuple.'),
    'name_float_part': (
        lambda: sow(X, name=('layer', 1.5)),
        "TypeError: sow(name=('layer', 1.5)): name must be a str or a"
        " non-empty tuple of str/int, got ('layer', 1.5) of type tuple."),
    'name_bool_part': (
        lambda: sow(X, name=('layer', True)),
        "TypeError: sow(name=('layer', True)): name must be a str or a"
        " non-empty tuple of str/int, got ('layer', True) of type tuple."),
    'name_list': (
        lambda: sow(X, name=['h']),
        "TypeError: sow(name=['h']): name must be a str or a non-empty tuple"
        " of str/int, got ['h'] of type list."),
    'tag_unhashable': (
        lambda: sow(X, name='h', tag=['t']),
        "TypeError: sow(name='h'): tag must be hashable (it is static), got"
        " ['t'] of type list."),
    'mode_unknown': (
        lambda: sow(X, name='h', mode='stack'),
        "ValueError: sow(name='h'): mode must be one of ('append', 'clobber'),"
        " got 'stack'."),
    'name_traced': (
        lambda: jax.jit(lambda i: sow(X, name=f'h{i}'))(1),
        "TypeError: sow(name='hJitTracer(~int32[])'): the name"
        " 'hJitTracer(~int32[])' was formatted from a traced value. A name is"
        ' static: build it from Python values (the index of a Python loop),'
        ' or sow the traced value under a fixed name (lax.scan and fori_loop'
        ' stack its entries along the loop axis).'),
    'name_traced_part': (
        lambda: jax.jit(lambda i: sow(X, name=('h', i)))(0),
        "TypeError: sow(name=('h', JitTracer(~int32[]))): a name must be"
        ' static, known while tracing: a str or a tuple of str/int (the index'
        " of a Python loop, not of a traced one); got ('h',"
        ' JitTracer(~int32[])), which holds a traced value.'),
    'leaf_str': (
        lambda: sow({'x': X, 'label': 'hello'}, name='h'),
        "TypeError: sow(name='h'): every leaf must be an array or a Python"
        " number, got 'hello' of type str at value['label']."),
    'leaf_function': (
        lambda: sow({'f': len}, name='h'),
        "TypeError: sow(name='h'): every leaf must be an array or a Python"
        " number, got <built-in function len> of type"
        " builtin_function_or_method at value['f']."),
    'leaf_numpy_str': (
        lambda: sow(np.array(['a', 'b']), name='h'),
        "TypeError: sow(name='h'): a NumPy array of dtype <U1 cannot be sown"
        ' (JAX arrays are numeric or boolean), at value.'),
    'perturb_integer': (
        lambda: perturb(jnp.arange(3, dtype=jnp.int32), name='g'),
        "TypeError: perturb(name='g'): only floating-point values have"
        ' gradients, got dtype int32 at value.'),
    'capture_not_callable': (
        lambda: capture(3),
        'TypeError: capture: expected a callable, got 3 of type int.'),
    'capture_names_type': (
        lambda: capture(_h, names=3),
        'TypeError: capture: names must be None, a name, a collection of'
        ' names or a predicate, got 3 of type int.'),
    'capture_names_element': (
        lambda: capture(_h, names=[1.5]),
        'TypeError: capture: name must be a str or a non-empty tuple of'
        ' str/int, got 1.5 of type float.'),
    'capture_tag_unhashable': (
        lambda: capture(_h, tag={'t'}),
        "TypeError: capture: tag must be hashable (it is static), got {'t'}"
        ' of type set.'),
    'capture_name_selects_nothing': (
        lambda: capture(_h, names='hh')(X),
        "ValueError: capture(names='hh') selected no sow of this call."
        " Closest names it sows: 'h'. It sows 1 name(s): 'h'."),
    'capture_tag_selects_nothing': (
        lambda: capture(_h, tag='metrics')(X),
        "ValueError: capture(tag='metrics') selected no sow of this call. It"
        " sows 1 name(s): 'h'. Its tags: None."),
    'capture_tuple_of_names': (
        lambda: capture(_layers, names=('layers', 0, 'h')),
        "TypeError: capture: names=('layers', 0, 'h') is a tuple, which"
        ' names= reads as a collection of names; to select the tuple name,'
        " put it in a list: names=[('layers', 0, 'h')]."),
    'capture_names_traced': (
        lambda: jax.jit(
            lambda i: capture(_layers, names=[('layers', i, 'h')])(X))(0),
        'TypeError: capture: a name must be static, known while tracing: a'
        ' str or a tuple of str/int (the index of a Python loop, not of a'
        " traced one); got ('layers', JitTracer(~int32[]), 'h'), which holds"
        ' a traced value.'),
    'plant_not_callable': (
        lambda: plant(3, {}),
        'TypeError: plant: expected a callable, got 3 of type int.'),
    'plant_values_not_mapping': (
        lambda: plant(_h, [X]),
        'TypeError: plant: values must map names to tuples of values (the'
        ' shape capture returns), got list.'),
    'plant_entries_not_tuple': (
        lambda: plant(_h, {'h': X}),
        "TypeError: plant: values['h'] must be a tuple with one value per"
        ' sow or a function fn(value, index), got ArrayImpl.'),
    'plant_bad_name': (
        lambda: plant(_h, {3: (X,)}),
        'TypeError: plant: name must be a str or a non-empty tuple of'
        ' str/int, got 3 of type int.'),
    'plant_structure': (
        lambda: plant(_h, {'h': ((X,),)})(X),
        "ValueError: plant: values['h'][0] has structure PyTreeDef((*,)), but"
        ' the sow has structure PyTreeDef(*).'),
    'plant_shape': (
        lambda: plant(_h, {'h': (jnp.zeros(4, jnp.float32),)})(X),
        "ValueError: plant: values['h'][0] has a leaf of float32[4], but the"
        ' sow has float32[3].'),
    'plant_dtype': (
        lambda: plant(_h, {'h': (jnp.zeros(3, jnp.int32),)})(X),
        "ValueError: plant: values['h'][0] has a leaf of int32[3], but the"
        ' sow has float32[3].'),
    'plant_too_many': (
        lambda: plant(_h, {'h': (X, X)})(X),
        "ValueError: plant: values['h'] has 2 entries but the function sows"
        " 'h' 1 time."),
    'plant_too_few': (
        lambda: plant(lambda x: _h(_h(x)), {'h': (X,)})(X),
        "ValueError: plant: values['h'] has 1 entries but the function sows"
        " 'h' more often."),
    'plant_never_sown': (
        lambda: plant(_h, {'nope': (X,)})(X),
        "ValueError: plant: the function never sows 'nope'."),
    'plant_never_sown_close': (
        lambda: plant(_layers, {('layers', 0, 'hh'): (X,)})(X),
        "ValueError: plant: the function never sows ('layers', 0, 'hh');"
        " closest names it sows: ('layers', 0, 'h'), ('layers', 1, 'h')."),
    'plant_function_arity': (
        lambda: plant(_h, {'h': lambda v: v}),
        "TypeError: plant: the function for the name 'h' is called as"
        ' fn(value, index) (index: the execution of that name); its'
        ' signature is <lambda>(v).'),
    'plant_pattern_function_arity': (
        lambda: plant(_layers, {'layers.*.h': lambda v, i: v}),
        "TypeError: plant: the function for the pattern 'layers.*.h' is"
        ' called as fn(value, index, name) (index: the execution of that'
        ' name, name: the static name it plants at); its signature is'
        ' <lambda>(v, i).'),
    'plant_taken_by_an_inner_capture': (
        lambda: plant(capture(h), {'h': (X,)})(X),
        "ValueError: plant: the function never sows 'h'. plant: 'h' was"
        ' taken by capture(h) inside the call (a capture or plant takes the'
        ' sows it selects: the calls around it do not see them). Plant'
        ' inside that call instead: capture(plant(f, ...), see_through=True)'
        ' plants the value and collects it.'),
    'plant_clobber': (
        lambda: plant(lambda x: sow(x, name='c', mode='clobber'),
                      {'c': (X,)})(X),
        "ValueError: plant: 'c' is sown with mode='clobber', so capture keeps"
        ' only its last value and there is no value per sow to plant; sow it'
        " with mode='append' to plant it."),
    'plant_shard_map': (
        lambda: plant(jax.pmap(lambda x: sow(x * 2.0, name='v')),
                      {'v': (X[:1],)})(X[:1]),
        'NotImplementedError: plant: planting into a shard_map is not'
        ' supported yet; plant outside the shard_map or capture only.'),
    'plant_pattern_selects_nothing': (
        lambda: plant(_layers, {'layers.*.g': lambda v, i, n: v})(X),
        "ValueError: plant: the pattern 'layers.*.g' selects no sow of this"
        " call; closest names: ('layers', 1, 'h'), ('layers', 0, 'h')."),
    'plant_pattern_values': (
        lambda: plant(_layers, {'layers.*.h': (X, X)}),
        "TypeError: plant: values['layers.*.h'] is a pattern, which takes a"
        ' function fn(value, index, name) called at each sow it selects; got'
        ' tuple.'),
    'cond_names_differ': (
        lambda: capture(_cond(lambda v: sow(v, name='a'),
                              lambda v: sow(v, name='b')))(X),
        'ValueError: capture: the branches of a cond/switch (at <location>)'
        ' must sow the same names, modes, structures, shapes and dtypes in'
        ' the same order:\n'
        "  branch 0 sows 'b' (append, PyTreeDef(*), float32[3])\n"
        "  branch 1 sows 'a' (append, PyTreeDef(*), float32[3])"),
    'cond_one_branch_sows': (
        lambda: capture(_cond(lambda v: sow(v, name='a'), lambda v: v))(X),
        'ValueError: capture: the branches of a cond/switch (at <location>)'
        ' must sow the same names, modes, structures, shapes and dtypes in'
        ' the same order:\n'
        '  branch 0 sows nothing\n'
        "  branch 1 sows 'a' (append, PyTreeDef(*), float32[3])"),
    'cond_shapes_differ': (
        lambda: capture(_cond(lambda v: (sow(v, name='a'), v)[1],
                              lambda v: (sow(v[:2], name='a'), v)[1]))(X),
        'ValueError: capture: the branches of a cond/switch (at <location>)'
        ' must sow the same names, modes, structures, shapes and dtypes in'
        ' the same order:\n'
        "  branch 0 sows 'a' (append, PyTreeDef(*), float32[2])\n"
        "  branch 1 sows 'a' (append, PyTreeDef(*), float32[3])"),
    'cond_modes_differ': (
        lambda: capture(_cond(lambda v: sow(v, name='a', mode='clobber'),
                              lambda v: sow(v, name='a')))(X),
        'ValueError: capture: the branches of a cond/switch (at <location>)'
        ' must sow the same names, modes, structures, shapes and dtypes in'
        ' the same order:\n'
        "  branch 0 sows 'a' (append, PyTreeDef(*), float32[3])\n"
        "  branch 1 sows 'a' (clobber, PyTreeDef(*), float32[3])"),
    'vmap_of_cond_with_batched_index': (
        lambda: capture(jax.vmap(_cond(lambda v: sow(v, name='b'),
                                       lambda v: sow(-v, name='b'))))(
                                           jnp.stack([X, -X])),
        'NotImplementedError: capture: jax.vmap of a cond/switch whose index'
        ' depends on the mapped inputs runs every branch on every example, so'
        " its sows ('b') cannot tell which branch an example took. Use"
        ' jax.vmap(capture(f)) instead of capture(jax.vmap(f)), or sow'
        ' outside the cond.'),
    'vmap_of_cond_backward_rule_sows': (
        lambda: capture(jax.grad(lambda v: jnp.sum(jax.vmap(_cond(
            _scaled, lambda u: -_scaled(u)))(v))))(jnp.stack([X, -X])),
        'NotImplementedError: capture: jax.vmap of a cond/switch whose index'
        ' depends on the mapped inputs runs every branch on every example, so'
        " its sows ('b') cannot tell which branch an example took ('b' is"
        ' sown by a custom_vjp or custom_jvp rule of a branch, which runs for'
        ' every example when the program is differentiated). Use'
        ' jax.vmap(capture(f)) instead of capture(jax.vmap(f)), or sow'
        ' outside the cond.'),
    'while_append': (
        lambda: capture(_while_append)(X),
        'NotImplementedError: capture: a while_loop (at <location>) sows'
        " 'step' with mode='append'; its trip count is only known at run"
        ' time, so appended values need a bound: capture(f, max_steps=N) (or'
        ' max_steps={name or pattern: N}) keeps N steps of each, with the'
        " count of steps run. Or use mode='clobber' (keeps the last value),"
        ' lax.scan or a fori_loop with static bounds.'),
    'discover_while_append': (
        lambda: discover(_while_append)(X),
        'NotImplementedError: discover: a while_loop (at <location>) sows'
        " 'step' with mode='append'; its trip count is only known at run"
        ' time, so appended values need a bound: discover(f, max_steps=N)'
        ' (or max_steps={name or pattern: N}) keeps N steps of each, with the'
        " count of steps run. Or use mode='clobber' (keeps the last value),"
        ' lax.scan or a fori_loop with static bounds.'),
    'max_steps_two_bounds': (
        lambda: capture(_while_append,
                        max_steps={'step': 3, 's*': 4})(X),
        "ValueError: capture: max_steps gives 'step' two bounds: 'step': 3,"
        " 's*': 4; give each name one."),
    'fori_loop_traced_bounds_append': (
        lambda: jax.jit(capture(lambda x, n: lax.fori_loop(
            0, n, lambda i, c: sow(c + 1.0, name='step'), x)))(
                X, jnp.int32(3)),
        'NotImplementedError: capture: a while_loop (at <location>) sows'
        " 'step' with mode='append'; its trip count is only known at run"
        ' time, so appended values need a bound: capture(f, max_steps=N) (or'
        ' max_steps={name or pattern: N}) keeps N steps of each, with the'
        " count of steps run. Or use mode='clobber' (keeps the last value),"
        ' lax.scan or a fori_loop with static bounds.'),
    'while_append_past_max_steps': (
        lambda: capture(_while_append, max_steps=3)(X),
        'ValueError: capture: a while_loop (at <location>) ran 5 steps,'
        " more than the 3 kept of 'step' (max_steps). Raise max_steps, or"
        " pass on_overflow='truncate' to keep the first steps (Steps.count"
        ' says how many ran).'),
    'while_append_past_max_steps_under_jit': (
        lambda: jax.jit(capture(_while_append, max_steps=3))(X),
        'ValueError: capture: a while_loop (at <location>) ran 5 steps,'
        " more than the 3 kept of 'step' (max_steps). Raise max_steps, or"
        " pass on_overflow='truncate' to keep the first steps (Steps.count"
        ' says how many ran).'),
    'plant_fewer_steps_than_the_loop': (
        lambda: jax.jit(plant(_while_append,
                              {'step': (jnp.zeros((3, 3)),)}))(X),
        'ValueError: plant: a while_loop (at <location>) ran 5 steps, but the'
        " values planted into 'step' hold 3: plant a value for every step."),
    'max_steps_not_positive': (
        lambda: capture(_while_append, max_steps=0),
        'ValueError: capture: max_steps must be a positive int (the steps'
        ' kept), got 0.'),
    'max_steps_unused_name': (
        lambda: capture(_while_append, max_steps={'step': 8, 'stpe': 8})(X),
        "ValueError: capture: max_steps bounds 'stpe', which no while_loop"
        " of the call sowed with mode='append' (returned as Steps:"
        " 'step')."),
    'on_overflow_unknown': (
        lambda: capture(_while_append, max_steps=8, on_overflow='drop'),
        "ValueError: capture: on_overflow must be one of ('error',"
        " 'truncate'), got 'drop'."),
    'while_clobber_without_prior': (
        lambda: capture(_while_no_prior)(X),
        'NotImplementedError: capture: a while_loop (at <location>) clobbers'
        " 'c' but may run zero times, and nothing was sown under that name"
        ' before the loop (in the same function body). The loop sows'
        " 'c' (clobber, PyTreeDef(*), float32[3]); a zero-trip loop has no"
        ' true value to return, so sow a value like it before the loop, e.g.'
        " sow(init, name=..., mode='clobber')."),
    'while_clobber_prior_mismatch': (
        lambda: capture(_while_prior_mismatch)(X),
        'NotImplementedError: capture: a while_loop (at <location>) clobbers'
        " 'c' but may run zero times, and the value sown under that name"
        " before the loop, 'c' (clobber, PyTreeDef(*), float32[2]), differs"
        ' from it in structure, shapes or dtypes. The loop sows'
        " 'c' (clobber, PyTreeDef(*), float32[3]); a zero-trip loop has no"
        ' true value to return, so sow a value like it before the loop, e.g.'
        " sow(init, name=..., mode='clobber')."),
    'while_condition_sows': (
        lambda: capture(lambda x: lax.while_loop(
            lambda c: sow(c, name='c')[0] < 5.0, lambda c: c + 1.0, x))(X),
        'NotImplementedError: capture: the condition of a while_loop (at'
        ' <location>) sows; move the sows into the body or out of the'
        ' loop.'),
    'loop_axis_ambiguous': (
        lambda: capture(lambda c: lax.scan(_vmapped_grad_step, c, None,
                                           length=2)[0])(jnp.stack([X, -X])),
        "NotImplementedError: capture: cannot tell where a loop puts its axis"
        " in the values of sow 'p': 2 vmap(s) batch it, and the transforms it"
        ' was staged under, vmap(transpose(jvp(vmap(jvp())))), read as more'
        ' than one count of them applied inside the loop. Capture inside the'
        ' loop body (or around the vmaps) instead.'),
    'unsupported_primitive': (
        lambda: capture(lambda b: lax.custom_linear_solve(
            lambda v: sow(v * 2.0, name='mv'), b, lambda mv, r: r / 2.0,
            symmetric=True))(X),
        "NotImplementedError: capture: the higher-order primitive"
        " 'custom_linear_solve' (at <location>) contains sows 'mv' and has"
        ' no capture rule; move the sows out of it or exclude them with'
        ' capture(..., tag=..., names=...).'),
    'derivative_rule_sows': (
        lambda: jax.grad(
            lambda v: jnp.sum(capture(_sowing_sin)(v)[0]))(X),
        "NotImplementedError: capture: the forward rule of the"
        " 'custom_vjp_call' (at <location>) sows 'fwd_only', which its"
        ' function does not; under differentiation inside a capture such a'
        ' sow cannot be collected. Sow it in the function instead.'),
}

_LOCATION = re.compile(r'\(at [^\n]*?:\d+(?::\d+)? \([^()\n]*\)\)')


def error_text(thunk) -> str:
  """``'Type: message'`` of the error ``thunk`` raises, locations elided."""
  try:
    thunk()
  except Exception as e:  # pylint: disable=broad-except
    return _LOCATION.sub('(at <location>)', f'{type(e).__name__}: {e}')
  raise AssertionError('no error raised')


class BadInputTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(case, case) for case in CASES])
  def test_bad_input(self, case):
    thunk, expected = CASES[case]
    self.assertEqual(error_text(thunk), expected)
    # A refused call leaves nothing behind.
    self.assertFalse(primitive.harvesting.value)


if __name__ == '__main__':
  absltest.main()
