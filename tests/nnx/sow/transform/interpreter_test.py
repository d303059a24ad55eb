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
"""The interpreter over plain jaxprs (``transform/interpreter.py``): which
variables an evaluation can drop after each equation."""

from absl.testing import absltest
import jax
import jax.numpy as jnp

from flax.nnx.sow.transform import interpreter


class DeadAfterTest(absltest.TestCase):

  def test_each_variable_dies_once_at_its_last_read(self):
    def f(x, unused):
      del unused
      a = jnp.sin(x)
      b = a * 2.0
      return b + a, x

    closed = jax.make_jaxpr(f)(1.0, 2.0)
    jaxpr = closed.jaxpr
    dead = interpreter.dead_after(jaxpr)
    x, unused = jaxpr.invars
    sin, mul, add = jaxpr.eqns
    a, (b,) = sin.outvars[0], mul.outvars
    self.assertLen(dead, len(jaxpr.eqns) + 1)
    self.assertEqual(dead[0], (unused,))  # read by nothing
    self.assertEqual(dead[1], ())  # x is returned; a read again below
    self.assertEqual(dead[2], ())
    self.assertCountEqual(dead[3], (a, b))  # both last read by the add
    self.assertNotIn(add.outvars[0], {v for vs in dead for v in vs})
    self.assertNotIn(x, {v for vs in dead for v in vs})


if __name__ == '__main__':
  absltest.main()
