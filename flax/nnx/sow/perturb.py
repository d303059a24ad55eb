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
"""``perturb``: an identity whose backward pass sows the incoming gradient.

The primitives and their rules are in ``transform/perturbation.py``.
"""

from __future__ import annotations

import typing as tp

import jax
import jax.numpy as jnp

from flax.nnx.sow.transform import perturbation
from flax.nnx.sow.transform import primitive


def perturb(value: tp.Any, *, name: primitive.Name, tag: tp.Hashable = None):
  """Identity on ``value``; under reverse mode it sows d(output)/d(value).

  ``perturb`` is the identity under every transformation: ``jax.jit`` (where
  it compiles to no operation), ``jax.vmap``, loops, and forward as well as
  reverse differentiation. Wherever JAX transposes it, that is under
  ``jax.grad``, ``jax.vjp``, ``jax.jacrev`` and the like, it sows the
  cotangent reaching ``value`` under ``name``, which ``capture`` collects.

  Example::

    >>> import jax, jax.numpy as jnp
    >>> from flax.nnx.sow import capture, perturb
    >>> def loss(x):
    ...   return jnp.sum(perturb(x, name='grad_x') ** 2)
    >>> x = jnp.arange(3.0)
    >>> grad, collected = capture(jax.grad(loss))(x)
    >>> collected['grad_x'][0]
    Array([0., 2., 4.], dtype=float32)

  Forward mode (``jax.jvp``, ``jax.jacfwd``, ``jax.linearize``) transposes
  nothing, so it sows nothing and gives what it gives without ``perturb``::

    >>> out, tangent = jax.jvp(loss, (x,), (jnp.ones(3),))
    >>> tangent
    Array(6., dtype=float32)
    >>> _, collected = capture(jax.jacfwd(loss))(x)
    >>> len(collected)
    0

  ``jax.hessian`` (``jacfwd`` of ``jacrev``) sows the cotangents of its inner
  ``jacrev``, with the axes of the vmaps the two run: one as long as the
  input (``jacfwd``'s basis; the cotangent is the same along it), then one
  as long as the output (``jacrev``'s basis; 1 for a scalar), then the
  value's own::

    >>> _, collected = capture(jax.hessian(loss))(x)
    >>> collected['grad_x'][0].shape
    (3, 1, 3)

  When JAX can prove that the gradient with respect to ``value`` is zero
  (the result is discarded, or only reaches the loss through
  ``lax.stop_gradient``), it never transposes the perturbation, so nothing is
  sown for that call.

  Args:
    value: a pytree of floating-point arrays.
    name: the name the gradient is sown under (a ``str`` or a tuple of
      ``str``/``int``).
    tag: any static hashable value, used by ``capture(f, tag=...)``.

  Returns:
    ``value``, unchanged.
  """
  where = f'perturb(name={name!r})'
  name = primitive.check_name(name, where=where)
  tag = primitive.check_static(tag, what='tag', where=where)
  leaves, treedef = primitive.flatten_value(value, where=where)
  for path, leaf in jax.tree_util.tree_leaves_with_path(
      jax.tree_util.tree_unflatten(treedef, leaves)
  ):
    if not jnp.issubdtype(leaf.dtype, jnp.inexact):
      raise TypeError(
          f'{where}: only floating-point values have gradients, got dtype'
          f' {leaf.dtype} at value{jax.tree_util.keystr(path)}.'
      )
  out = perturbation.perturb(leaves, name=name, tag=tag, tree=treedef)
  return jax.tree_util.tree_unflatten(treedef, out)
