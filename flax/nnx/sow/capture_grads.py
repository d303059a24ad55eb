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
"""``capture_grads``: values and gradients at sow and tap sites, one pass."""

from __future__ import annotations

import functools
import typing as tp

import jax
import jax.numpy as jnp

from flax.nnx.sow.capture import Collected, capture
from flax.nnx.sow.perturb import perturb
from flax.nnx.sow.plant import WithName
from flax.nnx.sow.plant import plant
from flax.nnx.sow.transform import names as names_lib
from flax.nnx.sow.transform import primitive


class _Value:
  """The tag of the values ``capture_grads`` sows (private: no user sow
  has it)."""


class _Grad:
  """The tag of the gradients ``capture_grads`` sows."""


_NO_SITE = ('capture_grads', 'none')


def capture_grads(
    f: tp.Callable[..., tp.Any],
    names: tp.Any,
    *,
    tag: tp.Hashable = None,
) -> tp.Callable[..., tuple[tp.Any, Collected, Collected]]:
  """Returns a function giving ``f``'s output, and the values and gradients
  of the output at the sites ``names`` selects, in one forward and backward
  pass.

  ``capture_grads(f, names)(*args)`` returns ``(out, values, grads)``:
  ``out`` is ``f(*args)``, a scalar (a loss); ``values[name]`` are what the
  sows of ``name`` sowed, as ``capture`` returns them, and ``grads[name]``
  the gradients of ``out`` with respect to those values, of the same
  structure: ``jax.grad`` of ``f`` edited by hand to take each value as an
  input. The model is not edited: each selected site is planted with
  itself, plus a zero whose cotangent is taken, so the gradient of every
  site flows through the one backward pass (attribution patching). A site
  of a :func:`~flax.nnx.sow.tap` is one too; a ``Module.sow`` site is not
  (``Module.sow`` discards the value it sows, so nothing depends on it, and
  planting there is refused): tap the module, or use ``Module.perturb``. A
  site the output provably does not depend on has zero gradients.

  Example::

    >>> import jax.numpy as jnp
    >>> from flax.nnx.sow import capture_grads, sow
    >>> def loss(x):
    ...   h = sow(jnp.sin(x), name=('layers', 0, 'h'))
    ...   return jnp.sum(h ** 2)
    >>> out, values, grads = capture_grads(loss, 'layers.*.h')(jnp.ones(2))
    >>> bool(jnp.allclose(grads.one('layers.0.h'), 2 * jnp.sin(1.0)))
    True

  Args:
    f: the function; it returns a real scalar.
    names: the sites: a name, its dotted spelling or a pattern, or a
      collection of them (as for :func:`~flax.nnx.sow.capture`: a tuple name
      goes in a list); each must select a sow of the call.
    tag: only sows with this tag.

  Returns:
    A function with ``f``'s signature returning ``(out, values, grads)``.
  """
  if not callable(f):
    raise TypeError(
        'capture_grads: expected a callable, got'
        f' {f!r} of type {type(f).__name__}.'
    )
  if isinstance(names, str):
    names = [names]
  if not isinstance(names, (list, tuple, set, frozenset)):
    raise TypeError(
        'capture_grads: names must be a name or pattern, or a collection of'
        f' them (a tuple is a collection, as for capture), got {names!r}.'
    )
  keys = [names_lib.key(k, where='capture_grads') for k in names]
  if not keys:
    raise ValueError('capture_grads: names selects no site (it is empty).')

  @functools.wraps(f)
  def run(*args, **kwargs):
    try:
      return _run(*args, **kwargs)
    except (TypeError, ValueError) as e:
      # The plant and capture it runs on are its own: their messages are
      # told as capture_grads's, naming what the user gave it.
      message = str(e)
      for inner in ('plant:', 'capture:'):
        if type(e) in (TypeError, ValueError) and message.startswith(inner):
          error = type(e)('capture_grads:' + message[len(inner):])
          for note in getattr(e, '__notes__', ()):
            error.add_note(note)
          raise error from None
      raise

  def _run(*args, **kwargs):
    def marked(zero):
      def mark(value, index, name):
        del index
        value = primitive.sow(value, name=name, tag=_Value)
        moved = jax.tree.map(lambda v: v + zero.astype(v.dtype), value)
        return perturb(moved, name=name, tag=_Grad)

      entries = {
          k: WithName(mark) if isinstance(k, names_lib.Pattern)
          else functools.partial(_named, mark, k)
          for k in keys
      }
      out = plant(f, entries, tag=tag)(*args, **kwargs)
      if jnp.shape(out) != () or not jnp.issubdtype(
          jnp.result_type(out), jnp.floating
      ):
        raise TypeError(
            'capture_grads: f must return a real scalar (a loss), got'
            f' {jax.typeof(out)}.'
        )
      return out

    def forward_and_backward(zero):
      out, pullback = jax.vjp(marked, zero)
      pullback(jnp.ones_like(out))
      # So that the capture of gradients selects a sow where no site has a
      # gradient (then each is zeros).
      primitive.sow(zero, name=_NO_SITE, tag=_Grad)
      return out

    (out, grads), values = capture(
        capture(forward_and_backward, tag=_Grad), tag=_Value
    )(jnp.zeros((), jnp.float32))
    del grads[_NO_SITE]
    return out, values, _in_forward_order(values, grads)

  return run


def _in_forward_order(values: Collected, grads: Collected) -> Collected:
  """The gradients by the values' names and entries, in forward order.

  The backward pass sows in reverse. A name whose every value JAX proves
  the output does not depend on has no backward pass: its gradients are
  zeros. One where only some entries do is refused, as their order could
  not be told.
  """
  ordered = Collected()
  for name, entries in values.items():
    got = dict.get(grads, name, ())
    if not got:
      ordered[name] = tuple(jax.tree.map(jnp.zeros_like, e) for e in entries)
    elif len(got) == len(entries):
      ordered[name] = tuple(reversed(got))
    else:
      raise NotImplementedError(
          f'capture_grads: the output depends on {len(got)} of the'
          f' {len(entries)} values sown under {name!r}, so which gradient is'
          ' whose cannot be told; give the sows distinct names.'
      )
  return ordered


def _named(fn, name, value, index):
  return fn(value, index, name)

