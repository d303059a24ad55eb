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
"""The overlay on a released Flax: ``install`` and ``uninstall``.

They point ``nnx.capture``, ``flax.nnx.module.capture``, ``Module.sow`` and
``Module.perturb`` at this package's functions and back, for the process or,
as context managers, for a block, coherently across threads (see
:func:`install`). In a Flax whose ``module.py`` already calls this package
there is nothing to point, and they change nothing that matters.
"""

from __future__ import annotations

import sys
import threading
import types
import typing as tp

from flax.nnx import module as module_lib
from flax.nnx.capture_compat import replaced
from flax.nnx.capture_compat.capture import capture
from flax.nnx.capture_compat.module_methods import perturb
from flax.nnx.capture_compat.module_methods import sow
from flax.nnx.sow.lift import module_paths

Module = module_lib.Module


_INSTALL_LOCK = threading.Lock()
_METHODS = {'sow': sow, 'perturb': perturb}

# How install()/uninstall() stay coherent across threads. Both the plain
# calls and the `with` blocks change one process-wide state, so it is kept
# here, under _INSTALL_LOCK, and the four names are repointed after every
# change to what it says (`_apply`):
#
# * the running blocks of each thread, innermost last; within a thread the
#   innermost holds, as nested blocks always did;
# * a request (call or block entry) that another thread's block opposes is
#   refused (`_refuse_opposed`); so when blocks run in several threads, they
#   all hold one state, and whatever exits, those still running agree;
# * the resting state, for when no block runs: what the latest plain call
#   outside any block set.
#
# A call cannot know whether a `with` will enter it, yet must take effect at
# once. So each thread's latest call stays pending: entering it discards its
# effect, which then belongs to the block alone; the thread's next request,
# or a block exit, makes it final (a plain call). A pending call outside any
# block is kept in call order with the others, so that discarding one never
# undoes another thread's call.


class _Block:
  """One running ``with install()`` or ``with uninstall()`` block."""

  __slots__ = ('installed', 'kind', 'thread', 'thread_name')

  def __init__(self, installed: bool):
    # Final plain calls inside the block set it, until it exits.
    self.installed = installed
    self.kind = 'install' if installed else 'uninstall'
    self.thread = threading.get_ident()
    self.thread_name = threading.current_thread().name


# The running blocks of each thread that has any, innermost last.
_BLOCKS: dict[int, list[_Block]] = {}
# Each thread's latest call, until entered or made final.
_PENDING: dict[int, _Restore] = {}
# The pending calls made outside any block, in call order; the latest sets
# the resting state.
_RESTING_CALLS: list[_Restore] = []
# The resting state the final calls set.
_resting = False


def is_installed() -> bool:
  """Whether Flax's ``nnx.capture`` is this package's :func:`capture`."""
  return module_lib.capture is capture


def delegates(fn: tp.Callable[..., tp.Any]) -> bool:
  """Whether ``fn``, an ``nnx.capture``, runs on the sow transform.

  True for this package's :func:`capture`, a ``functools.wraps`` wrapper of
  it, and Flax's own ``nnx.capture`` where Flax carries this package (its
  ``module.py`` hands the call here and declares so). False for the
  ``nnx.capture`` of a Flax release without it, such as 0.12.8's, and for
  any other function: decided by identity, never by reading code.

  >>> from flax.nnx import capture_compat
  >>> capture_compat.delegates(capture_compat.capture)
  True
  """
  return module_paths.runs_on_transform(fn)


def _namespaces() -> tuple[types.ModuleType, ...]:
  """The modules that export ``capture``: looked up when (un)installing, as
  this package is imported while ``flax.nnx`` itself is."""
  return (module_lib, sys.modules['flax.nnx'])


def _switch(installed: bool) -> None:
  """Points the four names at this package or back (the lock is held)."""
  if installed == is_installed():
    return
  if installed:
    replaced.ORIGINALS.update(
        capture=module_lib.capture,
        sow=Module.sow,
        perturb=Module.perturb,
    )
    targets = {'capture': capture, **_METHODS}
  else:
    targets = dict(replaced.ORIGINALS)
  for namespace in _namespaces():
    namespace.capture = targets['capture']
  # The overlay's whole purpose: Flax's methods, pointed here (setattr:
  # type checkers rightly refuse assigning to a method).
  setattr(Module, 'sow', targets['sow'])
  setattr(Module, 'perturb', targets['perturb'])


def _held(block: _Block) -> bool:
  """The state ``block`` holds: a pending call inside it holds for it."""
  call = _PENDING.get(block.thread)
  if call is not None and call.target is block:
    return call.installed
  return block.installed


def _state() -> bool:
  """What the blocks, or with none the latest calls, say."""
  for blocks in _BLOCKS.values():
    # Any thread's innermost block: with several threads in blocks, all of
    # them hold one state.
    return _held(blocks[-1])
  if _RESTING_CALLS:
    return _RESTING_CALLS[-1].installed
  return _resting


def _apply() -> None:
  _switch(_state())


def _make_final(thread: int) -> None:
  """Makes ``thread``'s pending call, not entered, a plain call."""
  global _resting
  call = _PENDING.pop(thread, None)
  if call is None:
    return
  if call.target is not None:
    call.target.installed = call.installed
  elif call in _RESTING_CALLS:
    # The latest final call: it supersedes the calls before it.
    _resting = call.installed
    del _RESTING_CALLS[:_RESTING_CALLS.index(call) + 1]


def _discard(call: _Restore) -> None:
  """Undoes a pending call: a block enters it."""
  if _PENDING.get(call.thread) is call:
    del _PENDING[call.thread]
    if call in _RESTING_CALLS:
      _RESTING_CALLS.remove(call)


def _sync() -> None:
  """What every request does first, before it changes anything."""
  global _resting
  if not _BLOCKS and _state() != is_installed():
    # Something else pointed the names: with no block running, the current
    # state is the resting one.
    _resting = is_installed()
    _RESTING_CALLS.clear()


def _refuse_opposed(installed: bool, request: str) -> None:
  """Raises if a block of another thread holds the other state."""
  thread = threading.get_ident()
  for other, blocks in _BLOCKS.items():
    for block in blocks if other != thread else ():
      # Its pending call can still be discarded, and the block go back.
      if installed != block.installed or installed != _held(block):
        held = 'off' if installed else 'on'
        raise RuntimeError(
            f'capture_compat.{request}: thread {block.thread_name!r} is'
            f' inside a `with capture_compat.{block.kind}():` block, which'
            f' holds the overlay {held} until it exits; switching it now'
            ' would change it under that block. Run the two in turn, or'
            ' make them agree.'
        )


def _request(installed: bool, request: str) -> _Restore:
  """A call of :func:`install` or :func:`uninstall`."""
  with _INSTALL_LOCK:
    thread = threading.get_ident()
    _sync()
    _make_final(thread)
    _refuse_opposed(installed, request)
    blocks = _BLOCKS.get(thread)
    call = _Restore(installed, request, blocks[-1] if blocks else None)
    _PENDING[thread] = call
    if call.target is None:
      _RESTING_CALLS.append(call)
    _apply()
    return call


class _Restore:
  """Returned by :func:`install`/:func:`uninstall`; as a context manager,
  a block that holds the state the call set until it exits.

  Entering it undoes the call's own effect, which then belongs to the block
  alone: ``with install(): ...`` leaves the state as it found it.
  """

  def __init__(self, installed: bool, request: str, target: _Block | None):
    self.installed = installed
    self.request = request
    self.thread = threading.get_ident()
    # The caller's innermost block, which the call sets; None: outside any
    # block, the call sets the resting state.
    self.target = target
    self.blocks: list[_Block] = []

  def __enter__(self):
    with _INSTALL_LOCK:
      _sync()
      # Undone also if refused below: the `with` statement then changed
      # nothing.
      _discard(self)
      _make_final(threading.get_ident())
      try:
        _refuse_opposed(self.installed, f'{self.request} (entering)')
      except RuntimeError:
        _apply()
        raise
      block = _Block(self.installed)
      _BLOCKS.setdefault(block.thread, []).append(block)
      self.blocks.append(block)
      _apply()
    return self

  def __exit__(self, *exc_info):
    with _INSTALL_LOCK:
      _make_final(threading.get_ident())
      block = self.blocks.pop()
      blocks = _BLOCKS.get(block.thread, [])
      if block in blocks:
        blocks.remove(block)
      if not blocks:
        _BLOCKS.pop(block.thread, None)
      _apply()


def install() -> _Restore:
  """Points Flax's ``nnx.capture``, ``Module.sow`` and ``Module.perturb``
  here (the overlay on a released Flax).

  Idempotent. A plain call switches the overlay on until :func:`uninstall`
  (inside a ``with`` block of the calling thread, until that block exits,
  as the block's state). Used as a context manager (``with install():``),
  it holds the overlay on for the block, across threads: overlapping blocks
  in different threads never switch it off under each other, and once the
  last block exits the state is what the latest plain call outside any block
  left (as the first block found it, if none).

  A block nests in one thread with ``with uninstall():`` blocks (the
  innermost holds). Across threads the two kinds cannot overlap: this raises
  ``RuntimeError``, naming the other thread, if a ``with uninstall():`` block
  runs in another thread (as :func:`uninstall` does, plain or as a block,
  while another thread is inside a ``with install():`` block).

  >>> from flax.nnx import capture_compat
  >>> before = capture_compat.is_installed()
  >>> with capture_compat.install():
  ...   with capture_compat.install():  # nested, or in another thread
  ...     pass
  ...   capture_compat.is_installed()
  True
  >>> capture_compat.is_installed() == before
  True

  With it, ``Module.sow`` under a functional ``capture`` is named by the
  module's path from the call's arguments
  (:mod:`flax.nnx.sow.lift.module_paths`): from the first positional
  argument, and prefixed by its keyword for another:

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> from flax.nnx import capture_compat
  >>> from flax.nnx.sow import capture
  >>> class Block(nnx.Module):
  ...   def __call__(self, x):
  ...     self.sow(nnx.Intermediate, 'h', 2 * x)
  ...     return x
  >>> class Model(nnx.Module):
  ...   def __init__(self):
  ...     self.blocks = nnx.List([Block(), Block()])
  ...   def __call__(self, x):
  ...     for block in self.blocks:
  ...       x = block(x)
  ...     return x
  >>> def f(model, x, cache):
  ...   return cache(model(x))
  >>> with capture_compat.install():  # always so in Flax itself
  ...   _, collected = capture(f)(Model(), jnp.ones(2), cache=Block())
  >>> list(collected)
  [('blocks', 0, 'h'), ('blocks', 1, 'h'), ('cache', 'h')]

  Raises:
    RuntimeError: another thread is inside a ``with uninstall():`` block.
  """
  return _request(True, 'install()')


def uninstall() -> _Restore:
  """Points them back at what :func:`install` replaced.

  Idempotent. The mirror of :func:`install`: a plain call switches the
  overlay off (or sets the calling thread's innermost block to off), and
  ``with uninstall():`` holds it off for the block; either raises
  ``RuntimeError``, naming the other thread, while another thread is inside
  a ``with install():`` block, rather than switch the overlay off under it.

  Raises:
    RuntimeError: another thread is inside a ``with install():`` block.
  """
  return _request(False, 'uninstall()')
