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
"""``capture(..., method_outputs=T)`` without touching any class.

Flax 0.12.8 wraps the methods of the captured modules' classes while the
capture runs, which every other instance of those classes (in other threads)
sees too. Here it is a tap (:mod:`flax.nnx.sow.lift.taps`) of every module of
the capture, on the public methods (and ``__call__``) each class defines itself,
that sows what they return as ``Module.sow(T, method, result)`` would: only
the module copies the capture runs on (private to it) change class, for the
duration of the call; the classes themselves, and every other instance, are
left as they are, and no profile or trace function is installed.

Inside the call, ``type(copy)`` is therefore a subclass of the class
(``isinstance`` holds, and it has the class's name), and a
``super().method()`` call into a base class is not sown, whereas legacy wraps
the base class too when a module of it is captured.
"""

from __future__ import annotations

import typing as tp

from flax.nnx import module as module_lib
from flax.nnx.capture_compat import module_methods
from flax.nnx.sow.transform import primitive
from flax.nnx.sow.lift import taps

Module = module_lib.Module


def tap_spec(var_type: type) -> taps.TapSpec:
  """The tap of ``method_outputs=var_type``: every module, the methods its
  class defines, outputs sown as ``Module.sow(var_type, method, ...)``."""

  def on_output(module: Module, method: str, result: tp.Any) -> None:
    if primitive.is_sowable(result):
      module_methods.sow(module, var_type, method, result)

  return taps.TapSpec(
      patterns=None, methods=None, inputs=False, outputs=False,
      tag=var_type, on_output=on_output,
  )
