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
"""Rules for call primitives: ``jit``, ``call``/``closed_call``,
``eval_jaxpr`` (evaluated in place) and ``checkpoint``/``remat``."""

from __future__ import annotations

import functools

import jax.extend.core as core
from jax.extend.core import primitives as prims

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import interpreter
from flax.nnx.sow.transform.rules import support
from flax.nnx.sow.transform.scope import Scope


UNSPECIFIED = _jax.UNSPECIFIED


@interpreter.register(prims.jit_p)
def _jit(scope: Scope, eqn, invals):
  """Re-binds ``jit`` with a body that also returns the sown leaves.

  The transformed body is cached by the identity of the original one, so an
  eager ``capture(jax.jit(f))`` runs compiled code and compiles only once.
  """
  t = support.transformed(scope, eqn.params['jaxpr'])
  planted = [
      *support.take_planted(scope, eqn, t.planted_sites),
      *t.fn_inputs(scope),
  ]
  n_in, n_out = len(planted), t.num_sown_leaves + len(t.fn_names)
  p = eqn.params
  outs = interpreter.bind(
      eqn,
      [*invals, *planted],
      jaxpr=t.jaxpr,
      in_shardings=(*p['in_shardings'], *[UNSPECIFIED] * n_in),
      in_layouts=(*p['in_layouts'], *[None] * n_in),
      donated_invars=(*p['donated_invars'], *[False] * n_in),
      out_shardings=(*p['out_shardings'], *[UNSPECIFIED] * n_out),
      out_layouts=(*p['out_layouts'], *[None] * n_out),
  )
  return support.finish(scope, eqn, outs, t)


def inline(scope: Scope, eqn, invals, body_param: str = 'call_jaxpr'):
  """Evaluates a call primitive's body in place."""
  body = eqn.params[body_param]
  with scope.inlined(eqn):
    if isinstance(body, core.ClosedJaxpr):
      return interpreter.evaluate(body.jaxpr, body.consts, invals, scope)
    return interpreter.evaluate(body, (), invals, scope)


interpreter.register(prims.call_p, prims.closed_call_p)(inline)
interpreter.register(_jax.eval_jaxpr_p)(
    functools.partial(inline, body_param='jaxpr')
)


@interpreter.register(prims.remat_p)
def _remat(scope: Scope, eqn, invals):
  """Re-binds ``checkpoint`` with a body that also returns sown leaves."""
  p = eqn.params
  t = support.transformed(scope, _jax.close_jaxpr(p['jaxpr']))
  planted = [
      *support.take_planted(scope, eqn, t.planted_sites),
      *t.fn_inputs(scope),
  ]
  consts = t.jaxpr.consts
  prevent_cse = p['prevent_cse']
  if isinstance(prevent_cse, tuple):
    prevent_cse = (
        *([False] * len(consts)), *prevent_cse, *([False] * len(planted))
    )
  outs = prims.remat_p.bind(
      *consts,
      *invals,
      *planted,
      jaxpr=_jax.convert_constvars_jaxpr(t.jaxpr.jaxpr),
      prevent_cse=prevent_cse,
      differentiated=p['differentiated'],
      policy=p['policy'],
  )
  return support.finish(scope, eqn, outs, t)
