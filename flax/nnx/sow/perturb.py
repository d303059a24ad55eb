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
"""``perturb``: an identity whose backward pass sows the incoming gradient."""

from __future__ import annotations

import functools
import typing as tp

import jax
import jax.numpy as jnp

from flax.nnx.sow.transform import primitive


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _perturb(value, name, tag):
  del name, tag
  return value


def _perturb_fwd(value, name, tag):
  del name, tag
  return value, None


def _perturb_bwd(name, tag, residual, cotangent):
  # The backward rule is staged flat into the gradient program when it is
  # traced, so this sow is an ordinary top-level sow for `capture`.
  del residual
  return (primitive.sow(cotangent, name=name, tag=tag),)


_perturb.defvjp(_perturb_fwd, _perturb_bwd)


def perturb(value: tp.Any, *, name: primitive.Name, tag: tp.Hashable = None):
  """Identity on ``value``; under ``jax.grad`` it sows d(output)/d(value).

  Example::

    >>> import jax, jax.numpy as jnp
    >>> from flax.nnx.sow import capture, perturb
    >>> def loss(x):
    ...   return jnp.sum(perturb(x, name='grad_x') ** 2)
    >>> x = jnp.arange(3.0)
    >>> grad, collected = capture(jax.grad(loss))(x)
    >>> collected['grad_x'][0]
    Array([0., 2., 4.], dtype=float32)

  When JAX can prove that the gradient with respect to ``value`` is zero
  (the result is discarded, or only reaches the loss through
  ``lax.stop_gradient``), it never runs the backward pass, so nothing is sown
  for that call.

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
  return _perturb(jax.tree_util.tree_unflatten(treedef, leaves), name, tag)
