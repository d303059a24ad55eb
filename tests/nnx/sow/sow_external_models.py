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
"""Public NNX models that sow, loaded at run time from checkouts of their code.

The parity suite (``parity_test.py --models_from=PATH``) runs these
models under Flax 0.12.8's ``nnx.capture`` and the transform-backed one. No
code of theirs is copied here: each model is imported from a checkout under
``PATH``, one directory per source::

  PATH/flax     google/flax at 3a491108 (Flax 0.12.8): examples/gemma
  PATH/cax      maxencefaldor/cax: src/cax (and its Lenia patterns)
  PATH/tunix    google/tunix: tunix/
  PATH/jasmine  p-doom/jasmine: jasmine/

A directory is a git work tree, or a plain ``git archive`` extraction with its
commit in a file ``.commit`` (the report names the commit of every row)::

  mkdir -p PATH/cax && git -C MIRROR archive COMMIT | tar -x -C PATH/cax
  echo COMMIT > PATH/cax/.commit

(For tunix and Jasmine the ``tunix/`` and ``jasmine/`` directories suffice;
for Flax, ``examples/gemma``.) The commits this suite was last run on:
google/flax 3a49110824001614baf35c6ee8934479fcdb133a, maxencefaldor/cax
474b785fa1f1dec9c58dfebdb2da15031ba25b08, google/tunix
c7d8950f12a9c55a976bf2e1a0d8b447d71c20b3, p-doom/jasmine
420859bc99eecf6b07a7e9edf65d5d145935f1e1.

What each source needs installed, besides this project's test extras:
jaxtyping (Gemma, tunix), sentencepiece (Gemma's sampler), pillow (CAX),
einops (tunix's Gemma 3, Jasmine). Shims, each the least that lets the model
modules import:

* Flax's ``examples/gemma/train.py`` imports ``clu`` and ``grain`` for its
  training loop; the train steps use neither, so while it is imported both
  are placeholder modules (whose attributes are empty classes, for the
  annotations that name them).
* tunix's package ``__init__`` files import its whole framework (vLLM,
  datasets, ...): the ``tunix`` packages are created without running them,
  and only the model modules and what they import are loaded. Importing them
  sets ``flax_always_shard_variable`` to False (tunix's own setting, restored
  after the import and set again while a tunix case runs).
* Jasmine keeps its blocks in a plain list, which Flax 0.12 refuses as a
  Module attribute; its ``AxialTransformer`` is subclassed with ``blocks``
  declared ``nnx.data()``, nothing else.

Without a checkout for a source, its cases are skipped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.abc
import importlib.machinery
import os
import pickle
import subprocess
import sys
import types
import typing as tp
import warnings

import flax
from flax import nnx
from flax.nnx.sow import sow
import jax
import jax.numpy as jnp
import numpy as np
import optax

# ---------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------

# key -> (repository, the directory the loaders need inside the checkout).
SOURCES = {
    'flax': ('google/flax', 'examples/gemma'),
    'cax': ('maxencefaldor/cax', 'src/cax'),
    'tunix': ('google/tunix', 'tunix'),
    'jasmine': ('p-doom/jasmine', 'jasmine'),
}


class MissingSource(Exception):
  """The checkout of a source is not under the models directory."""


@dataclasses.dataclass(frozen=True)
class Source:
  """A checkout: its key in ``SOURCES``, repository, directory and commit."""

  key: str
  repo: str
  root: str
  commit: str

  def describe(self, path: str) -> str:
    """``repo@commit path``, as the report names a row's code."""
    return f'{self.repo}@{self.commit[:12]} {path}'


def _git(root: str, *args: str) -> str:
  return subprocess.run(['git', '-C', root, *args], check=True,
                        capture_output=True, text=True).stdout.strip()


def _commit_of(root: str) -> str:
  """The ``.commit`` file's, or the work tree's HEAD (if ``root`` is one)."""
  marker = os.path.join(root, '.commit')
  if os.path.exists(marker):
    with open(marker) as f:
      return f.read().strip()
  try:
    # Not the commit of a repository that merely contains the directory.
    if os.path.realpath(_git(root, 'rev-parse', '--show-toplevel')) == (
        os.path.realpath(root)):
      return _git(root, 'rev-parse', 'HEAD')
  except (OSError, subprocess.CalledProcessError):
    pass
  return 'unknown'


def source(key: str, models_from: str) -> Source:
  """The checkout of source ``key`` (a key of ``SOURCES``) in ``models_from``.

  Raises:
    MissingSource: it is not there.
  """
  repo, needed = SOURCES[key]
  root = os.path.abspath(os.path.join(models_from, key))
  if not os.path.isdir(os.path.join(root, needed)):
    raise MissingSource(f'no {repo} checkout with {needed}/ at {root}')
  return Source(key, repo, root, _commit_of(root))


# ---------------------------------------------------------------------------
# Importing without their packaging
# ---------------------------------------------------------------------------


def _python_modules(directory: str) -> set[str]:
  return {f[:-3] for f in os.listdir(directory) if f.endswith('.py')}


@contextlib.contextmanager
def warnings_of_their_code(models_from: str):
  """Ignores deprecation warnings that the external code itself raises.

  Their code targets other versions of JAX and Flax (``jax.experimental
  .shard_map``, ``Variable.value``...); that is theirs to fix, and this
  suite's pytest setting (every warning an error) must not fail on it. Only
  warnings attributed to their modules are ignored: those of this project
  still fail.
  """
  names = {'cax', 'tunix', 'jasmine'}
  gemma = os.path.join(models_from, 'flax', 'examples', 'gemma')
  if os.path.isdir(gemma):
    names |= _python_modules(gemma)  # imported by bare name
  pattern = '|'.join(sorted(names))
  with warnings.catch_warnings():
    for category in (DeprecationWarning, FutureWarning):
      warnings.filterwarnings('ignore', category=category,
                              module=rf'({pattern})(\.|$)')
    for message in _FLAX_DEPRECATIONS_THEY_TRIGGER:
      warnings.filterwarnings('ignore', message=message,
                              category=DeprecationWarning)
    yield


# Deprecations of Flax 0.12.8 that their code triggers but that Flax
# attributes to its own frames (tunix creates its Params with sharding=).
_FLAX_DEPRECATIONS_THEY_TRIGGER = (
    r"'sharding' is deprecated, use 'out_sharding' instead",
)


def _placeholder_attribute(attr: str) -> type:
  # Not a dunder: whoever scans the modules of the process (hypothesis reads
  # each one's `__file__`) must see an ordinary module without one.
  if attr.startswith('__') and attr.endswith('__'):
    raise AttributeError(attr)
  return type(attr, (), {})


def _placeholder_modules(*names: str) -> dict[str, types.ModuleType]:
  """Modules whose every attribute is a new, empty class: enough for code
  that names them in annotations and signatures but never calls them."""
  modules = {}
  for name in names:
    module = types.ModuleType(name)
    module.__getattr__ = _placeholder_attribute
    modules[name] = module
    parent, _, child = name.rpartition('.')
    if parent:
      setattr(modules[parent], child, module)
  return modules


@contextlib.contextmanager
def _flat_imports(directory: str, shims: dict[str, types.ModuleType]):
  """Imports a directory of modules that import each other by bare name.

  Flax's examples do (``import layers``, ``import modules``...): names common
  enough to clash with anything else in the process. They are importable
  only inside this context; afterwards ``sys.modules`` and ``sys.path`` are
  as before (the loaded modules live on through the references to them).
  """
  names = _python_modules(directory) | set(shims)
  saved = {n: sys.modules.pop(n) for n in list(sys.modules)
           if n.split('.')[0] in names}
  sys.modules.update(shims)
  sys.path.insert(0, directory)
  try:
    yield
  finally:
    sys.path.remove(directory)
    for n in list(sys.modules):
      if n.split('.')[0] in names:
        del sys.modules[n]
    sys.modules.update(saved)


class _PackagesWithoutInits(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Makes every package under ``top`` a plain namespace: no ``__init__``."""

  def __init__(self, top: str, parent_dir: str):
    self.top, self.parent_dir = top, parent_dir

  def find_spec(self, name, path=None, target=None):
    del path, target
    if name != self.top and not name.startswith(self.top + '.'):
      return None
    directory = os.path.join(self.parent_dir, *name.split('.'))
    if not os.path.isdir(directory):
      return None  # a module: found by the usual finders on __path__
    spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
    spec.submodule_search_locations = [directory]
    return spec

  def create_module(self, spec):
    return None

  def exec_module(self, module):
    pass


def _check_from(module: types.ModuleType, root: str) -> None:
  if not os.path.abspath(module.__file__).startswith(root + os.sep):
    raise ImportError(f'{module.__name__} was imported from {module.__file__},'
                      f' not from the checkout at {root}')


@functools.cache
def load_gemma(root: str) -> types.SimpleNamespace:
  """Flax's examples/gemma: the model, its sampler and its train steps."""
  directory = os.path.join(root, 'examples', 'gemma')
  shims = _placeholder_modules('clu', 'clu.metric_writers',
                               'clu.periodic_actions', 'grain')
  with _flat_imports(directory, shims):
    loaded = {name: importlib.import_module(name) for name in (
        'transformer', 'modules', 'sow_lib', 'sampler', 'train')}
  for module in loaded.values():
    _check_from(module, root)
  return types.SimpleNamespace(**loaded)


@functools.cache
def _cax(root: str) -> types.SimpleNamespace:
  src = os.path.join(root, 'src')
  sys.path.insert(0, src)
  try:
    loaded = {name: importlib.import_module(f'cax.cs.{name}')
              for name in ('life', 'lenia')}
  finally:
    sys.path.remove(src)
  _check_from(loaded['life'], root)
  return types.SimpleNamespace(**loaded)


@contextlib.contextmanager
def _tunix_sharding_setting():
  """tunix's models run with ``flax_always_shard_variable`` off; see above."""
  previous = flax.config.flax_always_shard_variable
  flax.config.update('flax_always_shard_variable', False)
  try:
    yield
  finally:
    flax.config.update('flax_always_shard_variable', previous)


@functools.cache
def _tunix(root: str) -> types.SimpleNamespace:
  finder = _PackagesWithoutInits('tunix', root)
  sys.meta_path.insert(0, finder)
  try:
    with _tunix_sharding_setting():
      loaded = {
          name: importlib.import_module(f'tunix.models.{name}.model')
          for name in ('gemma', 'gemma3', 'qwen2', 'qwen3')}
      loaded['sowed_module'] = importlib.import_module(
          'tunix.distillation.feature_extraction.sowed_module')
  finally:
    sys.meta_path.remove(finder)
  for module in loaded.values():
    _check_from(module, root)
  return types.SimpleNamespace(**loaded)


@functools.cache
def load_tunix_sampler(root: str) -> types.ModuleType:
  """tunix's ``generate/sampler.py``. Through ``tunix.common.configs`` it
  imports tunix's metrics logger, which names ``metrax`` (a metrics
  library this suite does not install) in its configuration classes only:
  a placeholder stands for it."""
  _tunix(root)  # the models, with the same finder
  shims = {name: module for name, module in _placeholder_modules(
      'metrax', 'metrax.logging').items() if name not in sys.modules}
  sys.modules.update(shims)
  finder = _PackagesWithoutInits('tunix', root)
  sys.meta_path.insert(0, finder)
  try:
    with _tunix_sharding_setting():
      sampler = importlib.import_module('tunix.generate.sampler')
  finally:
    sys.meta_path.remove(finder)
  _check_from(sampler, root)
  return sampler


def tunix_model(name: str, root: str):
  """The tiny tunix model of family ``name`` the parity cases use."""
  return _tunix_model(name, _tunix(root))


@functools.cache
def _jasmine(root: str) -> types.SimpleNamespace:
  sys.path.insert(0, root)
  try:
    lam = importlib.import_module('jasmine.models.lam')
    nn = importlib.import_module('jasmine.utils.nn')
  finally:
    sys.path.remove(root)
  _check_from(lam, root)

  # Flax 0.12 refuses a plain list of Modules as a Module attribute unless it
  # is declared data; Jasmine targets older Flax. The shim declares it and
  # changes nothing else.
  class AxialTransformer(nn.AxialTransformer):
    blocks: list = nnx.data()

  lam.AxialTransformer = AxialTransformer
  return types.SimpleNamespace(lam=lam, nn=nn)


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------

Capture = tp.Callable[..., tp.Any]


@dataclasses.dataclass(frozen=True)
class ExternalCase:
  """A model from public code, as the parity suite runs it.

  Same fields as the suite's own cases (``make``, ``inputs``, ``run``), plus
  where the code comes from and the context it runs in.
  """

  name: str
  source: Source
  paths: tuple[str, ...]  # the files of the model and of how it is run
  make: tp.Callable[[], tp.Any]
  inputs: tp.Callable[[], tuple[tp.Any, ...]]
  run: tp.Callable[..., tp.Any]  # run(capture, model, *inputs) -> result
  context: tp.Callable[[], tp.ContextManager[tp.Any]] = contextlib.nullcontext
  # As the suite's cases: these run everywhere, and the new implementation
  # is compared with the legacy one, not with an oracle.
  legacy_error: str | None = None
  oracle: None = None
  hijax_modes: tuple[str, ...] = ()

  def describe(self) -> str:
    return self.source.describe(', '.join(self.paths))


@dataclasses.dataclass(frozen=True)
class _Spec:
  source: str
  modes: tuple[str, ...]
  build: tp.Callable[[Source], ExternalCase]


SPECS: dict[str, _Spec] = {}
BOTH = ('eager', 'jit')


def _register(name: str, source_key: str, modes: tuple[str, ...] = BOTH):
  def decorator(build):
    SPECS[name] = _Spec(source_key, modes, build)
    return build
  return decorator


def case(name: str, models_from: str) -> ExternalCase:
  """The case ``name``; raises :class:`MissingSource` without its checkout."""
  spec = SPECS[name]
  return spec.build(source(spec.source, models_from))


def _forward(capture: Capture, model, *inputs, **kwargs):
  return capture(model, nnx.Intermediate)(*inputs, **kwargs)


@contextlib.contextmanager
def _deprecated_sow_allowed():
  """Code that sows outside any capture warns, under both implementations."""
  with warnings.catch_warnings():
    warnings.filterwarnings(
        'ignore', message=r'Using .Module\.sow\(\). outside of',
        category=DeprecationWarning)
    yield


# -- Flax's examples/gemma ---------------------------------------------------

GEMMA_SOW_OPTIONS = ('embeddings', 'rs_after_attention', 'rs_after_ffw',
                     'mlp_hidden_topk', 'attn_logits_topk')
# A top-k option is on when non-zero; these k fit the sizes below.
_GEMMA_OPTION_VALUES = {'mlp_hidden_topk': 3, 'attn_logits_topk': 2}
_GEMMA_TRANSFORMER = 'examples/gemma/transformer.py'
_GEMMA_FILES = (_GEMMA_TRANSFORMER, 'examples/gemma/modules.py',
                'examples/gemma/sow_lib.py')


def gemma_sow_config(gemma, options: tp.Iterable[str]):
  fields = tuple(f.name for f in dataclasses.fields(gemma.sow_lib.SowConfig))
  if fields != GEMMA_SOW_OPTIONS:
    # A failure, not a skip: every option must be turned on by some case.
    raise AssertionError(
        f'examples/gemma SowConfig has the options {fields}; this suite turns'
        f' on {GEMMA_SOW_OPTIONS}: add a case for each new one.')
  return gemma.sow_lib.SowConfig(
      **{o: _GEMMA_OPTION_VALUES.get(o, True) for o in options})


def _gemma_config(gemma, dropout_rate: float = 0.0):
  """Three layers, tiny sizes, and every architectural switch of Gemma 1-3
  that changes what the sown values are computed from."""
  types_ = gemma.modules.AttentionType
  return gemma.transformer.TransformerConfig(
      num_layers=3, num_embed=17, embed_dim=8, hidden_dim=12, num_heads=2,
      head_dim=4, num_kv_heads=1, final_logit_softcap=30.0,
      use_post_attn_norm=True, use_post_ffw_norm=True,
      attention_types=(types_.GLOBAL, types_.LOCAL_SLIDING, types_.GLOBAL),
      attn_logits_soft_cap=50.0, sliding_window_size=2, use_qk_norm=True,
      dropout_rate=dropout_rate)


def gemma_mesh():
  # As examples/gemma/transformer_test.py runs the model: a one-device mesh
  # with explicit axis names, so that sow_lib's auto_axes has a mesh.
  mesh = jax.make_mesh((1, 1, 1), ('data', 'fsdp', 'tensor'),
                       axis_types=(jax.sharding.AxisType.Auto,) * 3)
  return jax.set_mesh(mesh)


_TOKENS = np.array([[3, 9, 4, 12, 5, 8], [7, 2, 15, 6, 11, 0]], np.int32)


def _gemma_forward_inputs():
  tokens = jnp.asarray(_TOKENS)
  batch, length = tokens.shape
  positions = jnp.tile(jnp.arange(length), (batch, 1))
  mask = jnp.tril(jnp.ones((batch, length, length), jnp.bool_))
  return tokens, positions, None, mask


def _gemma_forward_case(name: str, options: tuple[str, ...]):

  def build(src: Source) -> ExternalCase:
    gemma = load_gemma(src.root)
    sow_config = gemma_sow_config(gemma, options)

    def make():
      return gemma.transformer.Transformer(
          _gemma_config(gemma), rngs=nnx.Rngs(params=0),
          sow_config=sow_config)

    return ExternalCase(name, src, _GEMMA_FILES, make, _gemma_forward_inputs,
                        _forward, context=gemma_mesh)

  _register(name, 'flax')(build)


for _option in GEMMA_SOW_OPTIONS:
  _gemma_forward_case(f'gemma_sow_{_option}', (_option,))
_gemma_forward_case('gemma_sow_all', GEMMA_SOW_OPTIONS)


class _TrainState(nnx.Module):
  """What examples/gemma/train.py's train steps update, in one graph node."""

  def __init__(self, model, optimizer, rngs, metrics):
    self.model = model
    self.optimizer = optimizer
    self.rngs = rngs
    self.metrics = metrics


def _gemma_train_case(name: str, step_name: str, dropout_rate: float):

  def build(src: Source) -> ExternalCase:
    gemma = load_gemma(src.root)
    sow_config = gemma_sow_config(gemma, GEMMA_SOW_OPTIONS)

    def make():
      # As train.py sets them up, at tiny sizes.
      rngs = nnx.Rngs(params=0, dropout=0)
      model = gemma.transformer.Transformer(
          _gemma_config(gemma, dropout_rate=dropout_rate), rngs=rngs,
          sow_config=sow_config)
      optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
      metrics = nnx.MultiMetric(loss=nnx.metrics.Average('loss'),
                                accuracy=nnx.metrics.Accuracy())
      return _TrainState(model, optimizer, rngs, metrics)

    def inputs():
      # A packed batch as train.py's input pipeline makes them: the second
      # row holds two sequences, and its trailing 0 is padding.
      tokens = jnp.asarray(_TOKENS)
      segments = jnp.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 2, 2, 0]])
      positions = jnp.array([[0, 1, 2, 3, 4, 5], [0, 1, 2, 0, 1, 0]])
      return ({'inputs': tokens, 'inputs_position': positions,
               'inputs_segmentation': segments,
               'targets': jnp.roll(tokens, -1, axis=1)},)

    def run(capture, state, batch):
      del capture  # train.py calls nnx.capture itself
      return getattr(gemma.train, step_name)(
          state.model, state.optimizer, state.rngs, batch, state.metrics,
          0.0, 0, with_capture=True)

    return ExternalCase(name, src, ('examples/gemma/train.py', *_GEMMA_FILES),
                        make, inputs, run, context=gemma_mesh)

  _register(name, 'flax')(build)


_gemma_train_case('gemma_train_step', 'nnx_train_step', dropout_rate=0.25)
# Without dropout: jax_train_step closes jax.value_and_grad over the Rngs, and
# Flax 0.12.8 refuses to advance its count inside the grad trace
# (TraceContextError), with or without nnx.capture.
_gemma_train_case('gemma_jax_train_step', 'jax_train_step', dropout_rate=0.0)


class _CharVocab:
  """The SentencePiece methods the sampler calls, one id per character."""

  def __init__(self, size: int):
    self.size = size

  def pad_id(self):
    return 0

  def eos_id(self):
    return 1

  def bos_id(self):
    return 2

  def EncodeAsIds(self, text: str) -> list[int]:  # pylint: disable=invalid-name
    return [3 + ord(c) % (self.size - 3) for c in text]

  def DecodeIds(self, ids) -> str:  # pylint: disable=invalid-name
    return ''.join(chr(ord('a') + i % 26) for i in ids)


@_register('gemma_sampler', 'flax', modes=('eager',))
def _gemma_sampler(src: Source) -> ExternalCase:
  """The sampler's nnx.capture, in a jax.lax.while_loop under jax.jit."""
  gemma = load_gemma(src.root)
  sow_config = gemma_sow_config(gemma, GEMMA_SOW_OPTIONS)
  config = _gemma_config(gemma)

  def make():
    return gemma.transformer.Transformer(
        config, rngs=nnx.Rngs(params=0), sow_config=sow_config)

  def run(capture, model):
    del capture  # sampler.py calls nnx.capture itself
    sampler = gemma.sampler.Sampler(vocab=_CharVocab(config.num_embed),
                                    cache_size=16)
    out = sampler(['abc', 'de'], total_generation_steps=4, echo=True,
                  transformer=model)
    # The text is a function of the tokens: compared as numbers. The sampler
    # copies each captured value into a buffer of TransformerIntermediates;
    # wrapped as Intermediates, the suite counts them as sown values.
    return {'tokens': np.asarray(out.tokens), 'logits': np.asarray(out.logits),
            'intermediates': jax.tree.map(nnx.Intermediate, out.intermediates)}

  return ExternalCase('gemma_sampler', src,
                      ('examples/gemma/sampler.py', *_GEMMA_FILES), make,
                      lambda: (), run, context=gemma_mesh)


# -- CAX ---------------------------------------------------------------------

_CAX_STEPS = 5
_CAX_SIMULATIONS = 3


def _cax_life(src: Source):
  life = _cax(src.root).life

  def make():
    birth, survival = life.Life.birth_survival_from_string('B3/S23')
    return life.Life(birth=birth, survival=survival, rngs=nnx.Rngs(0))

  def state(key):
    return jax.random.bernoulli(key, 0.3, (12, 12, 1)).astype(jnp.float32)

  return make, state, ('src/cax/cs/life/cs.py', 'src/cax/core/cs.py')


def _cax_lenia(src: Source):
  lenia = _cax(src.root).lenia
  patterns = os.path.join(src.root, 'src', 'cax', 'cs', 'lenia', 'patterns',
                          'Orbium')
  # The rule and the creature CAX ships (its notebooks load them so).
  with open(os.path.join(patterns, 'rule_params.pickle'), 'rb') as f:
    rule_params = pickle.load(f)
  with open(os.path.join(patterns, 'pattern.pickle'), 'rb') as f:
    pattern = jnp.asarray(pickle.load(f), jnp.float32)

  def make():
    return lenia.Lenia(spatial_dims=(32, 32), channel_size=1, R=6, T=10,
                       rule_params=rule_params)

  def state(key):
    offset = jax.random.randint(key, (2,), 0, 12)
    return jax.lax.dynamic_update_slice(
        jnp.zeros((32, 32, 1), jnp.float32), pattern, (*offset, 0))

  return make, state, ('src/cax/cs/lenia/cs.py', 'src/cax/core/cs.py',
                       'src/cax/cs/lenia/patterns/Orbium')


def _cax_cases(name: str, system):

  @_register(f'cax_{name}', 'cax')
  def _single(src: Source) -> ExternalCase:
    """One simulation through CAX's own nnx.jit + nnx.scan driver."""
    make, state, paths = system(src)

    def run(capture, cs, state):
      return _forward(capture, cs, state, num_steps=_CAX_STEPS, sow=True)

    return ExternalCase(f'cax_{name}', src, paths, make,
                        lambda: (state(jax.random.key(1)),), run)

  @_register(f'cax_{name}_vmap', 'cax')
  def _vmapped(src: Source) -> ExternalCase:
    """Several simulations under nnx.vmap, as CAX's getting-started does."""
    make, state, paths = system(src)

    def inputs():
      keys = jax.random.split(jax.random.key(2), _CAX_SIMULATIONS)
      return (jax.vmap(state)(keys),)

    def run(capture, cs, states):
      state_axes = nnx.StateAxes(
          {nnx.RngState: 0, nnx.Intermediate: 0, ...: None})
      simulate = nnx.split_rngs(splits=_CAX_SIMULATIONS)(nnx.vmap(
          lambda cs, s: cs(s, num_steps=_CAX_STEPS, sow=True),
          in_axes=(state_axes, 0)))
      return capture(simulate, nnx.Intermediate)(cs, states)

    return ExternalCase(f'cax_{name}_vmap', src,
                        (*paths, 'examples/00_getting_started.ipynb'), make,
                        inputs, run)

  @_register(f'cax_{name}_pop', 'cax')
  def _popped(src: Source) -> ExternalCase:
    """CAX's documented use: sow outside any capture, then nnx.pop."""
    make, state, paths = system(src)

    def run(capture, cs, state):
      del capture
      with _deprecated_sow_allowed():
        final = cs(state, num_steps=_CAX_STEPS, sow=True)
      return final, nnx.pop(cs, nnx.Intermediate)

    return ExternalCase(f'cax_{name}_pop', src, (*paths, 'README.md'), make,
                        lambda: (state(jax.random.key(1)),), run)


_cax_cases('life', _cax_life)
_cax_cases('lenia', _cax_lenia)


# -- tunix -------------------------------------------------------------------

_TUNIX_VOCAB = 17


def _tunix_inputs():
  tokens, positions, _, mask = _gemma_forward_inputs()
  return tokens, positions, None, mask


def _tunix_model(name: str, tunix):
  """A tiny model of each family that sows ``all_hidden_states``, with
  nnx.remat around its blocks or layers (RematConfig) and, for Qwen3,
  mixture-of-experts layers."""
  module = getattr(tunix, name)
  remat = module.RematConfig
  small = dict(num_layers=2, embed_dim=8, hidden_dim=12, num_heads=2,
               head_dim=4, num_kv_heads=1)
  rngs = nnx.Rngs(params=0)
  if name == 'gemma':
    types_ = module.AttentionType
    config = module.ModelConfig(
        **small, num_embed=_TUNIX_VOCAB, final_logit_softcap=30.0,
        use_post_attn_norm=True, use_post_ffw_norm=True,
        attention_types=(types_.LOCAL_SLIDING, types_.GLOBAL),
        attn_logits_soft_cap=50.0, sliding_window_size=2,
        remat_config=remat.BLOCK)
    return module.Gemma(config, rngs=rngs)
  if name == 'gemma3':
    config = module.ModelConfig(
        **small, num_embed=_TUNIX_VOCAB, sliding_window_size=2,
        param_dtype=jnp.float32, remat_config=remat.DECODER)
    return module.Gemma3(config, rngs=rngs)
  if name == 'qwen2':
    config = module.ModelConfig(
        **small, vocab_size=_TUNIX_VOCAB, rope_theta=10_000, norm_eps=1e-6,
        use_tied_embedding=True, remat_config=remat.DECODER)
    return module.Qwen2(config, rngs=rngs)
  config = module.ModelConfig(
      **small, vocab_size=_TUNIX_VOCAB, rope_theta=10_000, norm_eps=1e-6,
      num_experts=4, num_experts_per_tok=2, remat_config=remat.BLOCK)
  return module.Qwen3(config, rngs=rngs)


def _tunix_case(name: str):

  @_register(f'tunix_{name}', 'tunix')
  def build(src: Source) -> ExternalCase:
    tunix = _tunix(src.root)

    def run(capture, model, *inputs):
      return _forward(capture, model, *inputs, output_hidden_states=True)

    return ExternalCase(
        f'tunix_{name}', src, (f'tunix/models/{name}/model.py',),
        lambda: _tunix_model(name, tunix), _tunix_inputs, run,
        context=_tunix_sharding_setting)


for _name in ('gemma', 'gemma3', 'qwen2', 'qwen3'):
  _tunix_case(_name)

_SOWED_MODULE = 'tunix/distillation/feature_extraction/sowed_module.py'


def _tunix_wrapped_qwen3(tunix):
  """tunix's distillation feature extraction: every decoder layer wrapped in
  a SowedModule that sows its output (here a tuple with a None cache)."""
  model = _tunix_model('qwen3', tunix)
  tunix.sowed_module.wrap_model_with_sowed_modules(
      model, [tunix.qwen3.DecoderLayer])
  return model


@_register('tunix_sowed_layers', 'tunix')
def _tunix_sowed_layers(src: Source) -> ExternalCase:
  tunix = _tunix(src.root)

  def run(capture, model, *inputs):
    return _forward(capture, model, *inputs, output_hidden_states=True)

  return ExternalCase(
      'tunix_sowed_layers', src, ('tunix/models/qwen3/model.py',
                                  _SOWED_MODULE),
      lambda: _tunix_wrapped_qwen3(tunix), _tunix_inputs, run,
      context=_tunix_sharding_setting)


@_register('tunix_sowed_layers_pop', 'tunix')
def _tunix_sowed_layers_pop(src: Source) -> ExternalCase:
  """As tunix's distillation strategies use it: call, then pop."""
  tunix = _tunix(src.root)

  def run(capture, model, *inputs):
    del capture
    with _deprecated_sow_allowed():
      out = model(*inputs)
    return out, tunix.sowed_module.pop_sowed_intermediate_outputs(model)

  return ExternalCase(
      'tunix_sowed_layers_pop', src, ('tunix/models/qwen3/model.py',
                                      _SOWED_MODULE),
      lambda: _tunix_wrapped_qwen3(tunix), _tunix_inputs, run,
      context=_tunix_sharding_setting)


# -- Jasmine -----------------------------------------------------------------


@_register('jasmine_lam', 'jasmine')
def _jasmine_lam(src: Source) -> ExternalCase:
  """Jasmine's latent action model: two axial transformers whose blocks run
  under nnx.remat, and a VQ bottleneck with codebook dropout (training)."""
  jasmine = _jasmine(src.root)

  def make():
    model = jasmine.lam.LatentActionModel(
        in_dim=3, model_dim=8, ffn_dim=16, latent_dim=4, num_latents=5,
        patch_size=2, num_blocks=2, num_heads=2, dropout=0.0,
        codebook_dropout=0.5, param_dtype=jnp.float32, dtype=jnp.float32,
        use_flash_attention=False, rngs=nnx.Rngs(0))
    # Every sow switch on, as Jasmine's train_lam.enable_sowing sets them.
    for transformer in (model.encoder, model.decoder):
      transformer.sow_logits = True
      for block in transformer.blocks:
        block.sow_weights = True
        block.sow_activations = True
    return model

  def inputs():
    return (jax.random.uniform(jax.random.key(3), (2, 3, 4, 4, 3)),)

  def run(capture, model, videos):
    return _forward(capture, model, {'videos': videos}, training=True)

  return ExternalCase('jasmine_lam', src,
                      ('jasmine/models/lam.py', 'jasmine/utils/nn.py'), make,
                      inputs, run)


# -- Decode loops --------------------------------------------------------------


class SowedLayer(nnx.Module):
  """A decoder layer whose output residual stream is sown; the call and
  its cache are the layer's own."""

  def __init__(self, layer: nnx.Module, index: int):
    self.layer, self.index = layer, index

  def __call__(self, *args, **kwargs):
    cache, x = self.layer(*args, **kwargs)
    return cache, sow(x, name=('layers', self.index, 'residual'))

  def init_cache(self, *args, **kwargs):
    return self.layer.init_cache(*args, **kwargs)


def instrument_decoder(model: nnx.Module) -> nnx.Module:
  """``model``, a decoder of Flax's examples/gemma or tunix (``layers``
  called as ``cache, x = layer(...)``, returning ``logits, cache``), with
  each layer's output residual stream sown as ``('layers', i,
  'residual')`` and its logits as ``'logits'``: a subclass of its class and
  a wrapper of each layer, made here; their code is not changed."""
  transformer_class = type(model)

  class SowingTransformer(transformer_class):

    def __call__(self, *args, **kwargs):
      logits, cache = super().__call__(*args, **kwargs)
      return sow(logits, name='logits'), cache

  SowingTransformer.__name__ = 'Sowing' + transformer_class.__name__
  model.__class__ = SowingTransformer
  model.layers = nnx.List(
      [SowedLayer(layer, i) for i, layer in enumerate(model.layers)])
  return model


# What the decode-loop tests (decode_samplers_test.py) build on.
tunix_sharding_setting = _tunix_sharding_setting
gemma_config = _gemma_config
CharVocab = _CharVocab
