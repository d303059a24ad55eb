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
"""Random NNX models and calls, for ``compat_differential_fuzz_test``.

A *model spec* is a small frozen tree: layers (``nnx.Linear``,
``nnx.BatchNorm``, ``nnx.Dropout``, a layer that counts its calls in a
Variable, a parameter-free one) that ``Module.sow`` and ``Module.perturb``
with random Variable types, names, reducers and values, held in blocks
(``nnx.List``, ``nnx.Dict`` or attributes, a child shared under a second
attribute) that may run their children through ``nnx.remat``, ``nnx.cond``,
``nnx.switch``, ``nnx.fori_loop`` or ``nnx.while_loop``, and stacks of
layers built with ``nnx.vmap`` and run with ``nnx.scan`` or ``nnx.vmap``.
A *call spec* says how the model is captured: ``nnx.capture`` of some
Variable types, eagerly or under ``nnx.jit`` (graph or tree mode), with
``method_outputs=``, under ``nnx.grad`` or ``nnx.value_and_grad`` with
perturbations as ``init=``, in train or eval mode.

``build(spec, rngs)`` makes the model; every build from the same seeds is an
identical clone, so Flax 0.12.8's ``nnx.capture`` and the compat layer run
on equal models. ``run(capture, model, x, call)`` is one call, with either
implementation's ``capture``.

The arithmetic stays in float32 with inputs of shape ``(2, D)``.
"""

from __future__ import annotations

import dataclasses
import typing as tp

import hypothesis.strategies as st
import jax
import jax.numpy as jnp

from flax import nnx

D = 3  # every layer maps (batch, D) to (batch, D)


class Custom(nnx.Intermediate):
  """A user subclass of Intermediate: selected by ``nnx.Intermediate``."""


class Other(nnx.Variable):
  """A Variable type no call selects unless it asks for it."""


VAR_TYPES = {'intermediate': nnx.Intermediate, 'custom': Custom,
             'other': Other}


def _add(a, b):
  return a + b


def _last(_, b):
  return b


def _zero():
  return 0.0


# reducer name -> Module.sow keyword arguments (module-level functions: the
# same objects in every clone).
REDUCERS = {
    'tuple': {},
    'sum': {'reduce_fn': _add, 'init_fn': _zero},
    'last': {'reduce_fn': _last},
    'max': {'reduce_fn': jnp.maximum, 'init_fn': lambda: -jnp.inf},
}


# Each sow name has one reducer wherever it is sown, so that the values a
# name collects can be reduced again from the functional capture's.
NAME_REDUCERS = {'h': 'tuple', 'a': 'tuple', 'total': 'sum', 'last': 'last',
                 'peak': 'max'}


@dataclasses.dataclass(frozen=True)
class SowSpec:
  var: str  # a key of VAR_TYPES
  name: str  # a key of NAME_REDUCERS
  value: str  # 'h' | 'mean' | 'dict': what of the layer's output is sown

  @property
  def reducer(self) -> str:
    return NAME_REDUCERS[self.name]


@dataclasses.dataclass(frozen=True)
class LayerSpec:
  kind: str  # 'linear' | 'batchnorm' | 'dropout' | 'counter' | 'plain'
  sows: tuple[SowSpec, ...]
  perturb: str | None  # the name of a Module.perturb of the output


@dataclasses.dataclass(frozen=True)
class StackSpec:
  """``n`` layers made by ``nnx.vmap``, run by ``nnx.scan`` or ``nnx.vmap``."""

  mode: str  # 'scan' | 'vmap'
  n: int
  layer: LayerSpec
  out_axis: int = 0  # nnx.vmap's out_axes (the members' axis of the output)


@dataclasses.dataclass(frozen=True)
class BlockSpec:
  container: str  # 'list' | 'dict' | 'dict_iter' (iterated) | 'attrs'
  children: tuple[tp.Any, ...]  # LayerSpec | BlockSpec | StackSpec
  shared: int | None  # a child held again as `self.again`, and called again
  wrap: str  # 'none' | 'remat' | 'cond' | 'switch' | 'fori' | 'while'
  sows: tuple[SowSpec, ...]


@dataclasses.dataclass(frozen=True)
class CallSpec:
  outer: str  # 'eager' | 'jit' | 'jit_tree'
  grad: bool  # the call is the loss of nnx.grad, perturbations as init=
  train: bool
  types: tuple[str, ...]  # keys of VAR_TYPES captured
  method_outputs: bool
  # With grad: nnx.value_and_grad (the loss returned too) for nnx.grad.
  value_and_grad: bool = False


# ---------------------------------------------------------------------------
# Building and running
# ---------------------------------------------------------------------------


def _sown_value(spec: SowSpec, h):
  if spec.value == 'mean':
    return jnp.mean(h, axis=-1)
  if spec.value == 'dict':
    return {'h': h, 'norm': jnp.sqrt(jnp.sum(h * h, axis=-1))}
  return h


def _sow_all(module: nnx.Module, sows, h):
  for s in sows:
    value = _sown_value(s, h)
    module.sow(VAR_TYPES[s.var], s.name, value, **REDUCERS[s.reducer])


class Layer(nnx.Module):

  def __init__(self, spec: LayerSpec, rngs: nnx.Rngs):
    self.spec = spec
    if spec.kind == 'linear':
      self.linear = nnx.Linear(D, D, rngs=rngs)
    elif spec.kind == 'batchnorm':
      self.norm = nnx.BatchNorm(D, rngs=rngs)
    elif spec.kind == 'dropout':
      self.dropout = nnx.Dropout(0.5, rngs=rngs)
    elif spec.kind == 'counter':
      self.calls = nnx.BatchStat(jnp.zeros((), jnp.float32))

  def __call__(self, x):
    kind = self.spec.kind
    if kind == 'linear':
      h = jnp.tanh(self.linear(x))
    elif kind == 'batchnorm':
      h = self.norm(x)
    elif kind == 'dropout':
      h = self.dropout(x)
    elif kind == 'counter':
      self.calls[...] = self.calls[...] + 1.0
      h = jnp.sin(x) + self.calls[...]
    else:
      h = jnp.sin(x)
    _sow_all(self, self.spec.sows, h)
    if self.spec.perturb is not None:
      h = self.perturb(self.spec.perturb, h)
    return h


class Stack(nnx.Module):

  def __init__(self, spec: StackSpec, rngs: nnx.Rngs):
    self.spec = spec

    @nnx.split_rngs(splits=spec.n)
    @nnx.vmap(in_axes=0, out_axes=0)
    def make(rngs):
      return Layer(spec.layer, rngs)

    self.layers = make(rngs)

  def __call__(self, x):
    state_axes = nnx.StateAxes({nnx.Intermediate: 0, Other: 0, ...: 0})
    if self.spec.mode == 'scan':

      @nnx.scan(in_axes=(nnx.Carry, state_axes), out_axes=nnx.Carry)
      def forward(x, layer):
        return layer(x)

      return forward(x, self.layers)

    @nnx.vmap(in_axes=(state_axes, None), out_axes=self.spec.out_axis)
    def members(layer, x):
      return layer(x)

    return jnp.mean(members(self.layers, x), axis=self.spec.out_axis)


def build(spec, rngs: nnx.Rngs) -> nnx.Module:
  if isinstance(spec, LayerSpec):
    return Layer(spec, rngs)
  if isinstance(spec, StackSpec):
    return Stack(spec, rngs)
  return Block(spec, rngs)


class Block(nnx.Module):

  def __init__(self, spec: BlockSpec, rngs: nnx.Rngs):
    self.spec = spec
    children = [build(child, rngs) for child in spec.children]
    if spec.container == 'list':
      self.children_ = nnx.List(children)
    elif spec.container in ('dict', 'dict_iter'):
      self.children_ = nnx.Dict({f'c{i}': c for i, c in enumerate(children)})
    else:
      for i, child in enumerate(children):
        setattr(self, f'c{i}', child)
    if spec.shared is not None:
      self.again = children[spec.shared]

  def _children_in_order(self) -> list[nnx.Module]:
    n = len(self.spec.children)
    if self.spec.container == 'list':
      order = list(self.children_)
    elif self.spec.container == 'dict':
      order = [self.children_[f'c{i}'] for i in range(n)]
    elif self.spec.container == 'dict_iter':
      order = list(self.children_.values())
    else:
      order = [getattr(self, f'c{i}') for i in range(n)]
    if self.spec.shared is not None:
      order.append(self.again)
    return order

  def body(self, x):
    for child in self._children_in_order():
      x = child(x)
    _sow_all(self, self.spec.sows, x)
    return x

  def __call__(self, x):
    wrap = self.spec.wrap
    if wrap == 'none':
      return self.body(x)
    if wrap == 'remat':
      return nnx.remat(lambda m, x: m.body(x))(self, x)
    if wrap == 'cond':
      return nnx.cond(
          jnp.sum(x) > 0, lambda m, x: m.body(x),
          lambda m, x: m.body(x * 2.0), self, x)
    if wrap == 'switch':
      index = jnp.int32(jnp.sum(x) > 0) + jnp.int32(jnp.sum(x) > 1)
      return nnx.switch(
          index,
          [lambda m, x: m.body(x), lambda m, x: m.body(-x),
           lambda m, x: m.body(x + 1.0)], self, x)
    if wrap == 'fori':
      _, x = nnx.fori_loop(
          0, 2, lambda i, carry: (carry[0], carry[0].body(carry[1])),
          (self, x))
      return x
    assert wrap == 'while', wrap

    def cond_fn(carry):
      return carry[0] < 2

    def body_fn(carry):
      i, m, x = carry
      return i + 1, m, m.body(x)

    _, _, x = nnx.while_loop(cond_fn, body_fn, (jnp.int32(0), self, x))
    return x


def run(capture: tp.Callable[..., tp.Any], model: nnx.Module, x,
        call: CallSpec):
  """One call of ``model`` as ``call`` says, with ``capture`` (legacy's or
  the compat layer's ``nnx.capture``). Returns what the user would keep."""
  if call.train:
    model.train()
  else:
    model.eval()
  types = tuple(VAR_TYPES[t] for t in call.types)
  outputs = nnx.Intermediate if call.method_outputs else None

  def forward(model, x):
    if not call.grad:
      return capture(model, *types, method_outputs=outputs)(x)
    _, perturbations = capture(model, nnx.Perturbation)(x)

    def loss(model, perturbations):
      # One State per captured type.
      out, *sown = capture(model, *types, init=perturbations,
                           method_outputs=outputs)(x)
      return jnp.sum(out * out), sown

    if call.value_and_grad:
      (value, sown), (grads, perturbation_grads) = nnx.value_and_grad(
          loss, argnums=(0, 1), has_aux=True)(model, perturbations)
      return grads, perturbation_grads, sown, value
    (grads, perturbation_grads), sown = nnx.grad(
        loss, argnums=(0, 1), has_aux=True)(model, perturbations)
    return grads, perturbation_grads, sown

  if call.outer == 'jit':
    forward = nnx.jit(forward)
  elif call.outer == 'jit_tree':
    forward = nnx.jit(forward, graph=False)
  return forward(model, x)


def input_for(seed: int = 0):
  return jax.random.normal(jax.random.key(seed), (2, D), jnp.float32)


# ---------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------

class Generator:
  """Draws model and call specs; ``budget`` bounds the number of modules."""

  def __init__(self, draw, budget: int, plain: bool = False):
    self.draw = draw
    self.budget = budget
    # Plain Python calls only: no NNX transform in the model.
    self.plain = plain

  def one_of(self, options):
    return self.draw(st.sampled_from(list(options)))

  def sows(self) -> tuple[SowSpec, ...]:
    sows = []
    for _ in range(self.one_of([0, 1, 1, 2])):
      name = self.one_of(sorted(NAME_REDUCERS))
      # An arithmetic reducer takes arrays: a dict is sown under 'h'/'a'.
      values = (['h', 'mean', 'dict'] if NAME_REDUCERS[name] == 'tuple'
                else ['h', 'mean'])
      var = self.one_of(['intermediate', 'intermediate', 'custom', 'other'])
      value = self.one_of(values)
      # One Variable type per name in a module (Flax keeps one Variable), and
      # one shape for a reducer that combines values.
      for s in sows:
        if s.name == name:
          var = s.var
          value = value if NAME_REDUCERS[name] == 'tuple' else s.value
      sows.append(SowSpec(var, name, value))
    return tuple(sows)

  def layer(self, kinds=('linear', 'linear', 'batchnorm', 'dropout',
                         'counter', 'plain')) -> LayerSpec:
    self.budget -= 1
    return LayerSpec(self.one_of(kinds), self.sows(),
                     self.one_of([None, None, 'p']))

  def node(self, depth: int):
    choice = self.one_of(['layer', 'layer', 'block'] if self.plain
                         else ['layer', 'layer', 'block', 'stack'])
    if choice == 'block' and depth < 3 and self.budget > 1:
      return self.block(depth + 1)
    if choice == 'stack' and self.budget > 0:
      # The layers of a stack: kinds whose state nnx.vmap/nnx.scan split.
      layer = self.layer(('linear', 'counter'))  # each has an array
      return StackSpec(self.one_of(['scan', 'vmap']), self.one_of([1, 2, 3]),
                       layer, self.one_of([0, 1]))
    return self.layer()

  def block(self, depth: int = 0) -> BlockSpec:
    self.budget -= 1
    n = self.one_of([1, 1, 2, 3])
    children = tuple(self.node(depth) for _ in range(n))
    shared = self.one_of([None, None, None, *range(n)])
    if shared is not None and not isinstance(children[shared], LayerSpec):
      shared = None
    return BlockSpec(
        self.one_of(['list', 'dict', 'dict', 'dict_iter', 'attrs']), children,
        shared,
        'none' if self.plain else self.one_of(
            ['none', 'none', 'none', 'remat', 'cond', 'switch', 'fori',
             'while']),
        self.sows())

  def call(self) -> CallSpec:
    types = self.one_of([('intermediate',), ('intermediate',), ('custom',),
                         ('intermediate', 'other')])
    return CallSpec(
        self.one_of(['eager', 'jit', 'jit', 'jit_tree']),
        self.one_of([False, False, True]),
        self.one_of([True, False]),
        types,
        self.one_of([False, False, False, True]),
        self.one_of([False, True]))


def _has_shared(spec) -> bool:
  if isinstance(spec, BlockSpec):
    return spec.shared is not None or any(map(_has_shared, spec.children))
  return False


def _has_wrap(spec, wrap: str) -> bool:
  if isinstance(spec, BlockSpec):
    return spec.wrap == wrap or any(
        _has_wrap(child, wrap) for child in spec.children)
  return False


def models(max_budget: int = 6):
  """A hypothesis strategy of ``(BlockSpec, CallSpec)``."""

  @st.composite
  def strategy(draw):
    gen = Generator(draw, draw(st.integers(1, max_budget)))
    spec, call = gen.block(), gen.call()
    if call.outer == 'jit_tree' and _has_shared(spec):
      # Tree mode refuses shared references (Flax's own error, both ways).
      call = dataclasses.replace(call, outer='jit')
    if call.grad and _has_wrap(spec, 'while'):
      # JAX has no reverse-mode derivative of a while_loop.
      call = dataclasses.replace(call, grad=False)
    return spec, call

  return strategy()


def plain_models(max_budget: int = 6):
  """A strategy of ``(BlockSpec, CallSpec)``: models of plain Python calls
  (no NNX transform inside), called eagerly with ``method_outputs``, where a
  ``tap`` and Flax 0.12.8's ``method_outputs`` see the same calls."""

  @st.composite
  def strategy(draw):
    gen = Generator(draw, draw(st.integers(1, max_budget)), plain=True)
    call = CallSpec('eager', False, gen.one_of([True, False]),
                    ('intermediate',), True)
    return gen.block(), call

  return strategy()
