"""Makes ``flax.nnx.sow`` and ``flax.nnx.capture_compat`` import from here.

``pip install .`` puts them inside the installed Flax package; putting this
tree's ``flax/nnx`` first on ``flax.nnx.__path__`` makes them resolve to this
working tree (never a stale installed copy), while every other ``flax.nnx``
module still comes from Flax itself. Imported by the root ``conftest.py``,
and by scripts and tests that run outside pytest.
"""

import os

import flax.nnx

_HERE = os.path.dirname(os.path.abspath(__file__))
_TREE_NNX = os.path.join(_HERE, 'flax', 'nnx')
if _TREE_NNX not in flax.nnx.__path__:
  flax.nnx.__path__.insert(0, _TREE_NNX)

import flax.nnx.sow  # noqa: E402

assert flax.nnx.sow.__file__.startswith(_TREE_NNX), flax.nnx.sow.__file__
