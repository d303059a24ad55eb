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
"""The codemod's readings of code: Flax's names, calls, methods, the State.

Unit tests of ``sow_migrate``'s first modules, on small sources parsed with
libcst: which Flax API a name is (``names``), how a call's arguments are
classified (``calls``), which methods of a class may sow (``methods``,
``functions``) and what an attribute set from a parameter may hold
(``attributes``). The collector they serve (``facts.Collector``) comes with
the facts of a module; here ``codemod_testing.Probe`` gives them the
metadata they ask for.
"""

import textwrap
import types

import codemod_testing
from absl.testing import absltest, parameterized

codemod_testing.require_libcst()

# pylint: disable=g-import-not-at-top,wrong-import-position
import libcst as cst
from libcst import metadata
from libcst.helpers import ModuleNameAndPackage

attributes = codemod_testing.codemod_module('attributes')
calls = codemod_testing.codemod_module('calls')
functions = codemod_testing.codemod_module('functions')
methods = codemod_testing.codemod_module('methods')
names = codemod_testing.codemod_module('names')
# pylint: enable=g-import-not-at-top,wrong-import-position


def _expression(code):
  return cst.parse_expression(code)


class NamesTest(parameterized.TestCase):

  def test_canonical_names_of_flax_nnx(self):
    self.assertEqual(names.canonical('flax.nnx.variablelib.Intermediate'),
                     names.INTERMEDIATE)
    self.assertEqual(names.canonical('flax.experimental.nnx.Module'),
                     names.MODULE)
    self.assertEqual(names.canonical('flax.nnx.graph.other'),
                     'flax.nnx.graph.other')
    self.assertEqual(names.canonical('jax.numpy.sum'), 'jax.numpy.sum')

  def test_linen(self):
    self.assertTrue(names.is_linen('flax.linen'))
    self.assertTrue(names.is_linen('flax.linen.Module.sow'))
    self.assertFalse(names.is_linen('flax.linenx'))

  def test_qualified_names_follow_the_imports(self):
    probe, module = codemod_testing.probe('''\
        from flax import nnx
        from flax.nnx import variablelib as v
        a = nnx.Intermediate
        b = v.Intermediate
        ''')
    values = [s.body[0].value for s in module.body[2:]]
    for value in values:
      self.assertEqual(probe.qnames(value), {names.INTERMEDIATE})

  @parameterized.parameters(('a.b.c.mod', 'a.b.c'), ('a.b.c', 'a.b.c'),
                            ('a.b.c.d.mod', 'a.b.c.d'))
  def test_qualified_names_are_libcsts_fully_qualified_names(self, module,
                                                             package):
    # The oracle: libcst's FullyQualifiedNameProvider, which resolves every
    # node of the unit (the codemod asks the scope of the nodes it needs).
    source = textwrap.dedent('''\
        import os.path
        from flax import nnx
        from . import layers
        from .layers import Block as B
        from .. import up
        from ...top import far


        class Local(nnx.Module):
          pass


        def f(x):
          y = layers.Dense(x) + B(x) + up.g(x) + far.h(x) + Local()
          return os.path.join(y, len(x), nnx.List)
        ''')
    wrapper = metadata.MetadataWrapper(
        cst.parse_module(source), unsafe_skip_copy=True,
        cache={metadata.FullyQualifiedNameProvider:
               ModuleNameAndPackage(module, package)})
    oracle = wrapper.resolve(metadata.FullyQualifiedNameProvider)
    scopes = wrapper.resolve(metadata.ScopeProvider)
    nodes = []

    class Names(cst.CSTVisitor):

      def on_visit(self, node):
        if isinstance(node, (cst.Name, cst.Attribute, cst.Call)):
          nodes.append(node)
        return True

    wrapper.module.visit(Names())
    self.assertLen(nodes, 52)
    found = {id(n): names.qualified_names(scopes.get(n), n, module, package)
             for n in nodes}
    self.assertIn('flax.nnx.List', set().union(*found.values()))
    self.assertIn('builtins.len', set().union(*found.values()))
    self.assertIn(f'{package.rsplit(".", 2)[0]}.top.far.h',
                  set().union(*found.values()))
    for node in nodes:
      self.assertEqual(found[id(node)],
                       {names.canonical(q.name) for q in oracle[node]},
                       msg=cst.Module([]).code_for_node(node))

  def test_a_relative_import_above_the_top_package_names_no_class(self):
    source = 'from ...top import far\nfar\n'
    module = cst.parse_module(source)
    wrapper = metadata.MetadataWrapper(module, unsafe_skip_copy=True)
    node = module.body[1].body[0].value
    scope = wrapper.resolve(metadata.ScopeProvider)[node]
    self.assertEqual(names.qualified_names(scope, node, 'pkg.mod', 'pkg'),
                     {'...top.far'})
    self.assertEqual(names.qualified_names(scope, node, 'a.b.c.mod', 'a.b.c'),
                     {'a.top.far'})


class CallsTest(parameterized.TestCase):

  def test_arguments_are_classified(self):
    call = _expression('m.f(x, False, *rest, sow=True, y=g(z), k=p)')
    self.assertEqual(
        calls.of_call(call, 'f', frozenset({'p'})),
        calls.CallArgs('f', ('name:x', 'False'),
                       (('sow', 'True'), ('y', '?'), ('k', '?')), True))

  @parameterized.named_parameters(
      # x is the caller's; the lambda's own parameters are not.
      ('call', 'nnx.vmap(lambda m: m(x))(model)', '__call__', ('name:x',)),
      ('method', 'nnx.split_rngs(splits=2)(nnx.vmap(lambda m, i: m.step(i,'
       ' sow=False)))(model, x)', 'step', ('?',)),
  )
  def test_a_call_through_a_transform_of_a_lambda(self, code, method,
                                                  positional):
    found = calls.through_lambda(_expression(code))
    self.assertEqual((found.method, found.positional), (method, positional))
    if method == 'step':
      self.assertEqual(found.keywords, (('sow', 'False'),))

  @parameterized.named_parameters(
      ('not_a_transform', 'f(model)'),
      ('two_lambdas', 'g(lambda m: m(1), lambda m: m(2))(model)'),
      ('body_calls_another', 'nnx.vmap(lambda m: other(m))(model)'),
  )
  def test_what_is_not_a_call_through_a_lambda(self, code):
    self.assertIsNone(calls.through_lambda(_expression(code)))

  def test_parameters_flags_bindings_and_attributes(self):
    module = cst.parse_module(textwrap.dedent('''\
        def step(self, x, n=1, sow=False, *, debug=False):
          y = self.layer(x)
          for i in range(n):
            z: int = i
          if sow and debug:
            self.sow(nnx.Intermediate, 'y', y)
          return self.head(y)
        '''))
    function = module.body[0]
    self.assertEqual(calls.params_of(function),
                     (('x', 'n', 'sow'), frozenset({'sow', 'debug'})))
    self.assertEqual(calls.assigned_in(function), {'y', 'i', 'z'})
    self.assertEqual(calls.attributes_of(function, 'self'),
                     {'layer', 'sow', 'head'})
    test = function.body.body[2].test
    self.assertEqual(calls.truthy_names(test), {'sow', 'debug'})
    self.assertEqual(calls.truthy_names(_expression('a or b')), frozenset())


def _project(classes, sows=(), closure=None):
  """The part of ``decide.Project`` that methods.py reads."""
  return types.SimpleNamespace(
      classes={k: types.SimpleNamespace(methods=v[0], bases=v[1])
               for k, v in classes.items()},
      sows=[types.SimpleNamespace(owner=o) for o in sows],
      closure=lambda root: closure)


class MethodsTest(absltest.TestCase):

  def test_a_sow_guarded_by_a_flag_left_false_does_not_run(self):
    step = methods.MethodFact(sow_guards=[frozenset({'sow'})],
                              params=('x', 'sow'),
                              false_defaults=frozenset({'sow'}))
    project = _project({'p.M': ({'step': step}, ())}, closure={'p.M'})
    self.assertFalse(methods.may_sow(project, 'p.M', 'step',
                                     calls.CallArgs('step', ('name:x',))))
    self.assertTrue(methods.may_sow(
        project, 'p.M', 'step', calls.CallArgs('step', ('?', 'True'))))
    self.assertTrue(methods.may_sow(
        project, 'p.M', 'step', calls.CallArgs('step', (), (), True)))

  def test_a_flag_passed_on_as_a_false_name_stays_false(self):
    step = methods.MethodFact(
        params=('sow',), false_defaults=frozenset({'sow'}),
        calls=[calls.CallArgs('inner', ('name:sow',))])
    inner = methods.MethodFact(sow_guards=[frozenset({'sow'})],
                               params=('sow',),
                               false_defaults=frozenset({'sow'}))
    project = _project({'p.M': ({'step': step, 'inner': inner}, ())},
                       closure={'p.M'})
    self.assertFalse(methods.may_sow(project, 'p.M', 'step',
                                     calls.CallArgs('step')))
    # Arguments not known: any flag may be True.
    self.assertTrue(methods.may_sow(project, 'p.M', 'step'))
    self.assertTrue(methods.may_sow(
        project, 'p.M', 'step', calls.CallArgs('step', ('True',))))

  def test_inherited_escaping_and_unknown_methods(self):
    render = methods.MethodFact()
    sows = methods.MethodFact(sow_guards=[frozenset()])
    project = _project({'p.Base': ({'render': render, 'call': sows}, ()),
                        'p.M': ({}, ('p.Base',))}, closure={'p.M'})
    self.assertFalse(methods.may_sow(project, 'p.M', 'render'))
    self.assertTrue(methods.may_sow(project, 'p.M', 'call'))
    self.assertEqual(methods.ancestors(project, 'p.M'), {'p.M', 'p.Base'})
    render.escapes = True  # passes self on, or calls super()
    self.assertTrue(methods.may_sow(project, 'p.M', 'render'))
    # Module's own sow always may; an attribute (a submodule) may if a
    # submodule sows, and any name may where a base class is not known.
    self.assertTrue(methods.may_sow(project, 'p.M', 'sow'))
    self.assertFalse(methods.may_sow(project, 'p.M', 'embed'))
    self.assertTrue(methods.may_sow(
        _project({'p.M': ({}, ('other.Base',))}, closure={'p.M'}),
        'p.M', 'embed'))

  def test_a_submodule_call_may_sow_if_a_submodule_class_sows(self):
    call = methods.MethodFact(attribute_calls=True)
    classes = {'p.M': ({'__call__': call}, ()), 'p.Sub': ({}, ())}
    quiet = _project(classes, sows=['p.M'], closure={'p.M', 'p.Sub'})
    self.assertFalse(methods.may_sow(quiet, 'p.M', '__call__'))
    loud = _project(classes, sows=['p.Sub'], closure={'p.M', 'p.Sub'})
    self.assertTrue(methods.may_sow(loud, 'p.M', '__call__'))
    unknown = _project(classes, sows=[], closure=None)
    self.assertTrue(methods.may_sow(unknown, 'p.M', '__call__'))

  def test_may_touch_counts_reads_of_sown_names(self):
    render = methods.MethodFact(self_reads=frozenset({'frames'}))
    project = _project({'p.M': ({'render': render}, ())}, closure={'p.M'})
    self.assertFalse(methods.may_touch(project, 'p.M', 'render', None,
                                       frozenset({'h'})))
    self.assertTrue(methods.may_touch(project, 'p.M', 'render', None,
                                      frozenset({'frames'})))
    self.assertTrue(methods.may_touch(project, 'p.M', 'render', None, None))


class FunctionsTest(absltest.TestCase):

  def test_a_function_calling_methods_that_cannot_sow_leaves_nothing(self):
    render = methods.MethodFact()
    call = methods.MethodFact(sow_guards=[frozenset()])
    project = _project({'p.M': ({'render': render, '__call__': call}, ())},
                       closure={'p.M'})
    facts = {
        'show': functions.FunctionFact(
            'show', ((('call', 'm.render(x)', 'render', None),),)),
        'train': functions.FunctionFact(
            'train', ((('call', 'm(x)', '__call__', None), ('pop',)),)),
        'run': functions.FunctionFact(
            'run', ((('call', 'm(x)', '__call__', None),),)),
        'outer': functions.FunctionFact(
            'outer', ((('function', 'show(m)', 'show', 0),),)),
        'decorated': functions.FunctionFact(
            'decorated', ((),), plain=False),
        'rebinds': functions.FunctionFact('rebinds', (None,)),
    }
    leaves = lambda name, root='p.M': functions.leaves_nothing(  # noqa: E731
        project, root, facts, name, 0)
    self.assertTrue(leaves('show'))
    self.assertTrue(leaves('train'))  # popped after the call
    self.assertTrue(leaves('outer'))
    self.assertFalse(leaves('run'))
    self.assertFalse(leaves('show', root=None))
    self.assertFalse(leaves('decorated'))
    self.assertFalse(leaves('rebinds'))
    self.assertFalse(leaves('missing'))


class AttributesTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ('int', 'size: int', 'size', {'builtins.int'}),
      ('callable', 'fn: tp.Callable[[int], int]', 'fn',
       {'typing.Callable'}),
      ('module', 'sub: nnx.Linear', 'sub', {'flax.nnx.Linear'}),
      ('field', 'params: Params', 'params.weight', {'pkg.mod.Params'}),
      ('unannotated', 'sub', 'sub', {'unannotated'}),
      ('not_a_parameter', 'sub', 'other', {'unknown'}),
  )
  def test_what_an_attribute_set_from_a_parameter_may_hold(
      self, param, value, expected):
    probe, module = codemod_testing.probe(f'''\
        import typing as tp
        from flax import nnx
        class Params: ...
        other = 1
        class M(nnx.Module):
          def __init__(self, {param}):
            self.x = {value}
        ''')
    assign = codemod_testing.find(module, cst.Assign)[-1]
    self.assertEqual(attributes.passed_in_types(probe, assign.value),
                     expected)


if __name__ == '__main__':
  absltest.main()
