"""A stand-in for an NCA library such as CAX, shaped as CAX is (not its code).

The system runs ``nnx.scan`` over itself and sows its state when asked; the
update holds its layers in an ``nnx.List``. The codemod's tests put this
folder on its search path, as an installed package would be.
"""

from nca_lib.core import ComplexSystem, NCAUpdate, Perceive
