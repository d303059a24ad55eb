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
"""The primitives of ``perturb``: identities whose transposition sows.

``perturb_p`` is the identity on the leaves of a value. Its JVP is
``(perturb_p(x), tangent_p(t))``, where ``tangent_p`` is a *linear*
identity whose transpose rule sows the incoming cotangent with ``sow_p``,
under the perturbation's name and tag. So:

* forward mode (``jax.jvp``, ``jacfwd``, ``linearize``) evaluates only
  identities and sows nothing: no tangent is ever transposed;
* reverse mode transposes ``tangent_p`` and sows d(output)/d(value), the
  cotangent, where the backward pass computes it: a plain top-level sow of
  the gradient program for ``capture``;
* ``jax.hessian`` (``jacfwd`` of ``jacrev``) sows the cotangents of the
  inner ``jacrev``; the outer forward pass differentiates that sow as any
  other, keeping the primal value (``sow_p``'s JVP).

A ``jax.custom_vjp`` would give the same reverse mode, but JAX refuses the
forward mode of a ``custom_vjp`` function, hence primitives. Every rule is
the identity, the lowering included (no HLO op), and neither primitive has
an effect: a perturbation whose result or tangent is unused is removed as
dead code, which is exactly when its gradient is symbolically zero and
nothing is to be sown (a transpose rule given only zero cotangents sows
nothing either).

The vmaps of a sown cotangent are counted as ``sow_p`` counts its own
(``vmapped``: leading axes, outermost first): a vmap applied *inside* the
differentiated function batches ``perturb_p`` (or ``tangent_p``), not the
sow that the backward pass binds later, so their batching rules count it
and the transpose rule hands the count to the sow. A vmap outside the
differentiation batches the sow itself, whose own rule counts it.

``jax.vmap`` of a ``cond`` whose index is batched runs every branch on every
example, and a perturbation in a branch is then transposed for every
example too (with a zero cotangent where the branch was not taken), after
the cond's batching rule returned: a sow in the branch is refused there
(``primitive``), and so is a perturbation's cotangent. While capturing,
a perturbation bound while that rule evaluates its batched branches is
marked (``in_batched_cond``, kept by every rule, through loops and caches
of the program around the cond), and its transposition refuses. It is not
marked while the rule batches the branches: JAX caches those batched
branches and may reuse them for a cond whose index is not batched. A
perturbation in a ``jit`` (or another higher-order primitive) within a
branch escapes as a custom call there does (see ``primitive``).
"""

from __future__ import annotations

import typing as tp

import jax
import jax.extend.core as jex_core
from jax.interpreters import ad
from jax.interpreters import batching
from jax.interpreters import mlir

from flax.nnx.sow.transform import _jax
from flax.nnx.sow.transform import primitive


class _PerturbPrimitive(jex_core.Primitive):
  """The type of ``perturb_p`` and ``tangent_p``: marks, while capturing, a
  perturbation bound in a branch of a cond whose index is batched (see the
  module docstring)."""

  def bind(self, *args, **params):
    if (primitive.harvesting.value and not params.get('in_batched_cond')
        and _jax.branches_of_batched_cond(evaluating=True) is not None):
      params['in_batched_cond'] = True
    return super().bind(*args, **params)


# Kept across a reload of this module, as `primitive.sow_p` is.
perturb_p = globals().get('perturb_p') or _PerturbPrimitive('perturb')
perturb_p.multiple_results = True
tangent_p = globals().get('tangent_p') or _PerturbPrimitive(
    'perturb_tangent')
tangent_p.multiple_results = True


def perturb(
    leaves: tp.Sequence[jax.Array],
    *,
    name: primitive.Name,
    tag: tp.Hashable,
    tree: tp.Any,
) -> list[jax.Array]:
  """Binds ``perturb_p`` on the (checked) ``leaves`` of a value of ``tree``.

  Example::

    >>> import jax, jax.numpy as jnp
    >>> from flax.nnx.sow.transform import perturbation
    >>> tree = jax.tree_util.tree_structure(0.0)
    >>> def f(x):
    ...   (y,) = perturbation.perturb([x], name='x', tag=None, tree=tree)
    ...   return y**2
    >>> [float(v) for v in jax.jvp(f, (3.0,), (1.0,))]
    [9.0, 6.0]
  """
  return perturb_p.bind(*leaves, sow_name=name, tag=tag, tree=tree, vmapped=0)


def _identity(*leaves, **params):
  del params
  return list(leaves)


def _abstract_eval(*avals, **params):
  del params
  return list(avals)


def _lowering(ctx, *leaves, **params):
  # The operands themselves: a perturbation costs no HLO op under `jit`.
  del ctx, params
  return list(leaves)


def _perturb_jvp(primals, tangents, **params):
  # The primal output stays a perturbation, so that a further reverse-mode
  # transformation of this JVP (`grad` of `grad`) still sows its cotangent.
  out = perturb_p.bind(*primals, **primitive.as_jvp_primal(params))
  if all(type(t) is ad.Zero for t in tangents):
    # No tangent reaches the value: its gradient is symbolically zero.
    return out, list(tangents)
  # Every leaf gets a tangent, as a custom_vjp's backward rule gets a
  # cotangent for every output, so the sown value keeps the whole tree.
  return out, tangent_p.bind(*map(ad.instantiate_zeros, tangents),
                             **primitive.not_jvp_primal(params))


def _tangent_jvp(primals, tangents, **params):
  # Only the primal tangent_p is ever transposed into a sow: the tangent of a
  # tangent is not the value the user perturbed, so it is passed on as is
  # (what `grad` of a `jvp` sows is the cotangent of the primal value).
  out = tangent_p.bind(*primals, **primitive.as_jvp_primal(params))
  return out, list(tangents)


def _transpose(cotangents, *leaves, sow_name, tag, tree, vmapped,
               in_batched_cond=False, jvp_primal=False, skipped=()):
  """Sows the cotangents (the identity's transpose) unless all are zero."""
  del jvp_primal  # a cotangent is sown as any sow is
  if all(type(ct) is ad.Zero for ct in cotangents):
    return [
        ad.Zero(leaf.aval.to_ct_aval()) if ad.is_undefined_primal(leaf) else None
        for leaf in leaves
    ]
  if in_batched_cond and primitive.harvesting.value:
    primitive.refuse_batched_cond(
        sow_name, (),
        why='is a perturb of a branch, whose gradient is sown for every'
        ' example when the program is differentiated')
  sown = primitive.sow_p.bind(
      *map(ad.instantiate_zeros, cotangents), sow_name=sow_name, tag=tag,
      mode='append', tree=tree, vmapped=vmapped,
      **({'skipped': skipped} if skipped else {}),
  )
  # A leaf that is not linear (a tangent instantiated as zeros by the JVP)
  # has no cotangent; the sow still saw its zero, as the tree needs.
  return [
      ct if ad.is_undefined_primal(leaf) else None
      for ct, leaf in zip(sown, leaves)
  ]


def _batcher(prim):
  """The batching rule of ``prim``: ``sow_p``'s placement of the axis."""

  def batch(axis_data, leaves, dims, *, vmapped, **params):
    if (not primitive.harvesting.value
        or primitive.keeps_unbatched(dims, params)):
      # Outside a capture no sow is collected: the leaves keep their axes
      # and the rule adds no op to a plain program. A JVP's primal output
      # that this vmap does not batch (`jax.jacfwd`'s) stays unbatched too:
      # its tangent, if batched, is counted by tangent_p's rule. While
      # capturing, the vmap is noted as one that did not batch it.
      if primitive.harvesting.value:
        params = primitive.with_vmap_skipped(params, vmapped)
      out = _bind_as_batched(prim, *leaves, vmapped=vmapped, **params)
      return out, list(dims)
    # While capturing, the cotangent this perturbation sows must carry the
    # mapped axis leading, every leaf batched, and count it, as a sow
    # batched here would (see `primitive._sow_batch`): the backward pass
    # binds the sow later, outside this vmap.
    moved = primitive.mapped_axis_leading(leaves, dims, axis_data.size)
    out = _bind_as_batched(prim, *moved, vmapped=vmapped + 1, **params)
    return out, [0] * len(out)

  return batch


def _bind_as_batched(prim, *args, **params):
  # A batching rule keeps the mark its bind was given: under a cond's
  # batching rule, that bind (into the rule's own batch trace) is the
  # batching of a branch, which JAX caches, not its evaluation.
  return jex_core.Primitive.bind(prim, *args, **params)


for _prim in (perturb_p, tangent_p):
  _prim.def_impl(_identity)
  _prim.def_abstract_eval(_abstract_eval)
  # Not cached, as `sow_p`: each perturbation has parameters of its own.
  mlir.register_lowering(_prim, _lowering, cacheable=False)
  batching.fancy_primitive_batchers[_prim] = _batcher(_prim)
  # A perturbation of a linear input (`jax.linear_transpose`) is reverse
  # mode too: its cotangent is sown as tangent_p's is.
  ad.primitive_transposes[_prim] = _transpose

ad.primitive_jvps[perturb_p] = _perturb_jvp
ad.primitive_jvps[tangent_p] = _tangent_jvp
