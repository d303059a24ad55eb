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
"""Random small NNX projects of several files, for the codemod's fuzzer.

A project (``project_testing.py``) is made of block classes that sow
(``Module.sow`` with the append or keep-last reducer, ``nnx.Intermediate``
or a subclass, a literal name or a class constant, and at times
``Module.perturb``), each in a file of its own or beside the model; a model
class that holds them (attributes, an ``nnx.List`` made in a loop, an
``nnx.Dict``, a module passed in, one instance held twice) and may sow
itself; and a ``main.py`` whose ``run()`` reads the sown values the ways the
codemod knows: a call then ``nnx.pop`` (the call plain, or under
``nnx.vmap`` or ``nnx.scan`` with ``nnx.StateAxes``), ``nnx.capture``, an
attribute read (direct or through the list), ``getattr`` with a literal or a
computed name, ``nnx.state(..., nnx.Intermediate)``, or nothing. ``Spec.readers`` are the
lines of the readers the codemod must report when it does not rewrite them.
The blocks may be a library's (``Spec.library``), which the project
imports.
"""

import dataclasses
import textwrap

from hypothesis import strategies as st

NAMES = ('h', 'out', 'feat')


@dataclasses.dataclass
class Spec:
  files: dict[str, str]
  # (file, line, text) of each reader that is no pop nor capture.
  readers: list[tuple[str, int, str]]
  sites: int  # sows and perturbs written
  # A library's files (the package ``fuzzlib``), outside the project: the
  # blocks are then its classes, imported by the project.
  library: dict[str, str] = dataclasses.field(default_factory=dict)


@st.composite
def _sow(draw, index: int) -> tuple[str, str, str]:
  """(class body lines, call line, name) of one sow in a block."""
  name = draw(st.sampled_from(NAMES))
  constant = draw(st.booleans())
  kind = draw(st.sampled_from(['sow'] * 6 + ['perturb']))
  head = [f"  NAME{index} = '{name}'\n"] if constant else []
  spelled = f'self.NAME{index}' if constant else repr(name)
  if kind == 'perturb':
    return head, f'    y = self.perturb({spelled}, y)\n', name
  variable = draw(st.sampled_from(['nnx.Intermediate'] * 4 + ['Tagged']))
  reducer = draw(st.sampled_from(['', '', ', reduce_fn=lambda a, b: b']))
  return head, f'    self.sow({variable}, {spelled}, y{reducer})\n', name


@st.composite
def _block(draw, number: int):
  sows = [draw(_sow(i)) for i in range(draw(st.integers(1, 2)))]
  head = ''.join(line for h, _, _ in sows for line in h)
  calls = ''.join(call for _, call, _ in sows)
  source = (f'class Block{number}(nnx.Module):\n' + head +
            '\n  def __init__(self, rngs):\n'
            '    self.linear = nnx.Linear(2, 2, rngs=rngs)\n\n'
            '  def __call__(self, x):\n'
            '    y = self.linear(x)\n' + calls + '    return y\n')
  return source, [n for _, _, n in sows], len(sows)


_HEADER = 'from flax import nnx\n'
_TAGGED = '\n\nclass Tagged(nnx.Intermediate):\n  pass\n'


@st.composite
def specs(draw) -> Spec:
  """A project (see the module's docstring)."""
  count = draw(st.integers(1, 2))
  blocks = [draw(_block(i)) for i in range(count)]
  files = {}
  sites = sum(b[2] for b in blocks)
  separate = draw(st.booleans())  # blocks in files of their own
  # ... of a library the project imports (installed or not where the
  # codemod runs).
  in_library = separate and draw(st.booleans())
  library = {'fuzzlib/__init__.py': ''} if in_library else {}
  where = 'fuzzlib.' if in_library else ''
  target = library if in_library else files
  prefix = 'fuzzlib/' if in_library else ''
  holding = draw(st.sampled_from(
      ['attributes', 'list', 'dict', 'passed_in', 'shared']))
  model_sows = draw(st.booleans())
  imports = ''
  block_code = ''
  uses_tagged = any('Tagged' in b[0] for b in blocks)
  for i, (source, _, _) in enumerate(blocks):
    if separate:
      tagged = (f'from {where}tagged import Tagged\n'
                if 'Tagged' in source else '')
      target[f'{prefix}block{i}.py'] = _HEADER + tagged + '\n\n' + source
      imports += f'from {where}block{i} import Block{i}\n'
    else:
      block_code += '\n\n' + source
  if uses_tagged:
    target[f'{prefix}tagged.py'] = _HEADER + _TAGGED
    if not separate:
      imports += 'from tagged import Tagged\n'
  made = [f'Block{i}(rngs)' for i in range(count)]
  if holding == 'attributes':
    init = ''.join(f'    self.b{i} = {m}\n' for i, m in enumerate(made))
    call = ''.join(f'    x = self.b{i}(x)\n' for i in range(count))
    params, build = 'rngs', 'Model(rngs)'
  elif holding == 'list':
    length = draw(st.integers(1, 3))
    init = (f'    self.layers = nnx.List([{made[0]} for _ in '
            f'range({length})])\n')
    init += ''.join(f'    self.b{i} = {m}\n' for i, m in
                    enumerate(made[1:], 1))
    call = '    for layer in self.layers:\n      x = layer(x)\n'
    call += ''.join(f'    x = self.b{i}(x)\n' for i in range(1, count))
    params, build = 'rngs', 'Model(rngs)'
  elif holding == 'dict':
    items = ', '.join(f"'k{i}': {m}" for i, m in enumerate(made))
    init = f'    self.parts = nnx.Dict({{{items}}})\n'
    call = ''.join(f"    x = self.parts['k{i}'](x)\n" for i in range(count))
    params, build = 'rngs', 'Model(rngs)'
  elif holding == 'passed_in':
    init = '    self.inner = inner\n'
    init += ''.join(f'    self.b{i} = {m}\n' for i, m in
                    enumerate(made[1:], 1))
    call = '    x = self.inner(x)\n'
    call += ''.join(f'    x = self.b{i}(x)\n' for i in range(1, count))
    params, build = 'inner, rngs', f'Model({made[0]}, rngs)'
  else:  # one instance held twice
    init = f'    shared = {made[0]}\n    self.a = shared\n    self.b = shared\n'
    call = '    x = self.b(self.a(x))\n'
    params, build = 'rngs', 'Model(rngs)'
  own = "    self.sow(nnx.Intermediate, 'top', x)\n" if model_sows else ''
  sites += int(model_sows)
  model = (f'class Model(nnx.Module):\n\n  def __init__(self, {params}):\n'
           + init + '\n  def __call__(self, x):\n' + call + own
           + '    return x\n')
  model_file = draw(st.sampled_from(['model.py', 'main.py']))
  model_code = _HEADER + imports + block_code + '\n\n' + model
  reader, readers_text = draw(_reader(blocks, holding, model_sows))
  main = textwrap.dedent('''\
      import jax.numpy as jnp
      from flax import nnx
      ''')
  if model_file == 'model.py':
    files['model.py'] = model_code
    main += 'from model import Model\n'
    main += ''.join(f'from {where}block{i} import Block{i}\n'
                    for i in range(count)
                    if separate and holding == 'passed_in' and i == 0)
    if not separate and holding == 'passed_in':
      main += 'from model import Block0\n'
  else:
    main = main + model_code.replace(_HEADER, '', 1)
  main += textwrap.dedent(f'''\


      def build():
        rngs = nnx.Rngs(0)
        return {build}, jnp.linspace(-1.0, 1.0, 6).reshape(3, 2)


      def run():
        model, x = build()
      ''') + reader
  files['main.py'] = main
  lines = main.splitlines()
  readers = [('main.py', lines.index(text) + 1, text.strip())
             for text in readers_text]
  return Spec(files, readers, sites, library)


@st.composite
def _reader(draw, blocks, holding: str, model_sows: bool):
  """(the body of run(), the lines of its readers that are no sites)."""
  names = [n for _, ns, _ in blocks for n in ns]
  kind = draw(st.sampled_from(['pop', 'pop', 'capture', 'capture',
                               'attribute', 'getattr', 'state', 'none',
                               'vmap', 'scan']))
  name = draw(st.sampled_from(names))
  part = {'attributes': 'model.b0', 'list': 'model.layers[0]',
          'dict': "model.parts['k0']", 'passed_in': 'model.inner',
          'shared': 'model.a'}[holding]
  if kind == 'pop':
    consume = draw(st.sampled_from(['s', "s['top'][0]"] if model_sows
                                   else ['s']))
    return ('  y = model(x)\n  s = nnx.pop(model, nnx.Intermediate)\n'
            f'  return y, {consume}\n'), []
  if kind == 'capture':
    consume = draw(st.sampled_from(['s', "s['top'][0]"] if model_sows
                                   else ['s']))
    return ('  y, s = nnx.capture(model, nnx.Intermediate)(x)\n'
            f'  return y, {consume}\n'), []
  if kind in ('vmap', 'scan'):
    # The call under a transform, the sown values given an axis of their
    # own by nnx.StateAxes (as CAX runs its systems), then nnx.pop.
    rest = 'None' if kind == 'vmap' else 'nnx.Carry'
    axes = (f'  axes = nnx.StateAxes({{nnx.Intermediate: 0, ...: {rest}}})'
            '\n')
    if kind == 'vmap':
      call = ('  y = nnx.vmap(lambda m, x: m(x), in_axes=(axes, 0))'
              '(model, x)\n')
    else:
      call = ('  y = nnx.scan(lambda m, c: m(c), in_axes=(axes, nnx.Carry),'
              ' out_axes=nnx.Carry, length=2)(model, x)\n')
    return (axes + call + '  s = nnx.pop(model, nnx.Intermediate)\n'
            '  return y, s\n'), []
  if kind == 'attribute':
    # Only a sown name is read: a block that perturbs it has no Intermediate
    # of that name (reading it raises, which the fuzzer's oracle would see).
    text = f'  return {part}.{name}.value[0]'
    return f'  model(x)\n{text}\n', [text]
  if kind == 'getattr':
    text = f'  return getattr({part}, name).value[0]'
    return f"  model(x)\n  name = '{name}'\n{text}\n", [text]
  if kind == 'state':
    text = '  return nnx.state(model, nnx.Intermediate)'
    return f'  model(x)\n{text}\n', [text]
  return '  return model(x)\n', []
