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
"""Rules for primitives that carry a user rule and a body: ``custom_jvp``,
``custom_vjp`` and ``custom_vmap``."""

from __future__ import annotations

import dataclasses
import functools

import jax.extend.core as core
import jax.extend.linear_util as lu
from jax.extend.core import primitives as prims

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.transform.request import Request
from flax.nnx.sow.transform.rules import calls
from flax.nnx.sow.transform.scope import Scope
from flax.nnx.sow.transform.sites import describe_names
from flax.nnx.sow.transform.sites import where


def _custom_rule(body_param: str) -> interpreter.Rule:
  """For primitives that carry a user rule (custom_jvp/vjp/vmap) and a body.

  The sown values come from evaluating the body in place; the outputs from
  re-binding the primitive with the sows this scope handles removed from its
  body and rules, so the user's rule still applies (XLA merges the duplicate
  under ``jit``). The sows it does not handle stay in the re-bound primitive
  only, where an enclosing interpretation sees them with the values that
  reach the outputs (a ``plant`` there changes them). The body goes first,
  so that eagerly its intermediates are freed before the re-bound outputs
  exist. Planting changes the function itself, so its custom rule no longer
  applies: then only the body is evaluated.
  """

  def rule(scope: Scope, eqn, invals):
    body = eqn.params[body_param]
    if interpreter.plants_into(body, scope.request):
      return calls.inline(scope, eqn, invals, body_param)
    removing = scope.request.removing()
    stripped = interpreter.transform(body, removing).jaxpr
    rule_params = {
        param: _stripped_rule(eqn, param, body.jaxpr, removing)
        for param in _DERIVATIVE_RULES
        if param in eqn.params
    }
    _take_in_place(scope, eqn, invals, body_param)
    return interpreter.bind(
        eqn, invals, **{body_param: stripped}, **rule_params
    )

  return rule


interpreter.register(prims.custom_jvp_call_p)(_custom_rule('call_jaxpr'))
interpreter.register(prims.custom_vjp_call_p)(_custom_rule('call_jaxpr'))
interpreter.register(_jax.custom_vmap_p)(_custom_rule('call'))


def _take_in_place(scope: Scope, eqn, invals, body_param: str) -> None:
  """Records the sows ``scope`` handles in the body of ``eqn``, evaluated in
  place; the others are dropped there, as the re-bound primitive keeps them
  (re-binding them here too would show them twice to an enclosing capture,
  once with a value nothing reads)."""
  if not scope.request.rebind_unhandled:
    calls.inline(scope, eqn, invals, body_param)
    return
  dropping = dataclasses.replace(scope.request, rebind_unhandled=False)
  inner = Scope(dropping, scope.planter, scope.fns)
  inner.inline_vmaps = scope.inline_vmaps
  calls.inline(inner, eqn, invals, body_param)
  for site, leaves in inner.records:
    scope.record_arrays(site, leaves)


def _stripped_rule(eqn, param: str, body: core.Jaxpr, removing: Request):
  """A custom derivative rule (a jaxpr thunk) without the handled sows.

  Under differentiation JAX runs the user's forward (``custom_vjp``) or JVP
  (``custom_jvp``) rule in place of the body, and such a rule usually calls
  the function itself: its sows would run again, outside this capture. The
  values of those this capture handles already come from evaluating the
  body, so ``removing`` strips them; the others stay, as in the re-bound
  body. A rule that sows a name the body does not is refused, since that
  value could be collected by no capture.
  """
  what, wrap = _DERIVATIVE_RULES[param]

  def strip(jaxpr: core.Jaxpr, consts) -> core.ClosedJaxpr:
    extra = primitive.sow_keys(jaxpr) - primitive.sow_keys(body)
    if extra:
      raise NotImplementedError(
          f'capture: the {what} rule of the {eqn.primitive.name!r}'
          f' (at {where(eqn)}) sows'
          f' {describe_names(name for name, _ in extra)}, which'
          ' its function does not; under differentiation inside a capture'
          ' such a sow cannot be collected. Sow it in the function instead.'
      )
    closed = core.ClosedJaxpr(jaxpr, consts)
    return interpreter.transform(closed, removing).jaxpr

  return wrap(eqn.params[param], strip)


_MEMO_SIZE = 32


def _memoize(thunk_body):
  """Runs ``thunk_body`` once per argument tuple, outside any trace.

  A custom rule's jaxpr thunk may be called several times (forward and
  transpose, say) and JAX expects the same jaxpr each time; it is traced at
  the top level, like the thunk it replaces. The arguments are JAX's
  symbolic-zero flags of the inputs, so a thunk sees few patterns (one, in
  practice); the bound only keeps a pathological caller from growing the
  memo, which goes with the thunk.
  """

  @functools.lru_cache(maxsize=_MEMO_SIZE)
  def memoized(*args):
    with core.set_current_trace(None):
      return thunk_body(*args)

  return memoized


def _stripped_fwd(thunk, strip):
  @_memoize
  def fwd(*zeros):
    stripped = strip(*thunk.call_wrapped(*zeros))
    return stripped.jaxpr, stripped.consts

  return lu.wrap_init(fwd, debug_info=thunk.debug_info)


def _stripped_jvp(thunk, strip):
  @_memoize
  def jvp(*zeros):
    jaxpr, consts, out_zeros = thunk.call_wrapped(*zeros)
    stripped = strip(jaxpr, consts)
    return stripped.jaxpr, stripped.consts, out_zeros

  return lu.wrap_init(jvp, debug_info=thunk.debug_info)


# The derivative-rule parameters of custom_vjp_call and custom_jvp_call:
# what the rule is called, and how to wrap its thunk.
_DERIVATIVE_RULES = {
    'fwd_jaxpr_thunk': ('forward', _stripped_fwd),
    'jvp_jaxpr_fun': ('JVP', _stripped_jvp),
}
