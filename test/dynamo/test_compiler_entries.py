"""Guarantee 10: public compiler entries that torch_npu adds work before any compile, without the compiler.

``torch.compiler.npugraph_mark_step_begin`` and ``torch.compiler.list_backends``
are callable straight after ``import torch_npu``; the top-level ``npugraph_ex``
and ``torchair`` names are lazy proxies that import nothing until used and
then expose their submodules through the proxy and the real package alike.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
import types

import pytest
from facts import DEFERRED, DYNAMO_SETUP, INDUCTOR_SETUP, needs_deferred_setup
from breakage import caught
from regressions import mark_step_through_graph_trees
from test_non_inductor_backends import skip_unless_torchair_imports

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

NPU_BACKENDS = {"npu", "npugraph_ex", "npugraphs"}


def test_mark_step_begin_works_before_any_compile_and_loads_no_compiler(npu_lazy):
    import torch
    from torch_npu.npu._graph_tree_state import MarkStepBox

    mark_step_begin = torch.compiler.npugraph_mark_step_begin
    assert mark_step_begin.__name__ == "npugraph_mark_step_begin"
    assert str(inspect.signature(mark_step_begin)) == "()"
    counter = MarkStepBox.mark_step_counter
    with npu_lazy.phase("mark_step"):
        mark_step_begin()
        mark_step_begin()
    assert MarkStepBox.mark_step_counter == counter - 2, (
        f"two step marks moved the counter from {counter} to {MarkStepBox.mark_step_counter}, expected {counter - 2}")
    npu_lazy.assert_not_loaded(*DEFERRED)
    npu_lazy.assert_not_loaded("torch_npu.npu._graph_tree")
    assert not npu_lazy.ran(DYNAMO_SETUP) and not npu_lazy.ran(INDUCTOR_SETUP)


def test_list_backends_before_compile_sets_up_dynamo_only(npu_lazy):
    import torch

    with npu_lazy.phase("list"):
        backends = set(torch.compiler.list_backends(exclude_tags=None))
    assert NPU_BACKENDS <= backends, f"missing backends: {sorted(NPU_BACKENDS - backends)}"
    assert npu_lazy.ran(DYNAMO_SETUP)
    assert npu_lazy.first_loaded("torch._dynamo") == "list"
    assert not npu_lazy.ran(INDUCTOR_SETUP)
    npu_lazy.assert_not_loaded("torch_npu._inductor")


def test_lazy_proxies_are_installed_by_import_and_import_nothing(npu_lazy):
    import torch_npu.dynamo as npu_dynamo

    assert isinstance(sys.modules.get("npugraph_ex"), npu_dynamo._LazyNpuGraphEx)
    assert isinstance(sys.modules.get("torchair"), npu_dynamo._LazyTorchair)
    with pytest.raises(AttributeError, match="before npugraph_ex is initialized") as excinfo:
        sys.modules["npugraph_ex"].get_npu_backend  # noqa: B018 - touching it is the test
    # the proxy writes torch_npu's error-code line itself (pta_error would import submodules lazily): it must still
    # end the message in that format, with this process's id
    assert re.search(rf"\n\[ERROR\] \S+ \(PID:{os.getpid()}, Device:-1, RankID:-1\) ERR00005 PTA internal error$",
                     str(excinfo.value)), str(excinfo.value)
    with pytest.raises(AttributeError, match="before torchair is initialized"):
        sys.modules["torchair"].get_npu_backend  # noqa: B018 - touching it is the test
    npu_lazy.assert_not_loaded("torch_npu.dynamo.npugraph_ex", "torch_npu.dynamo.torchair", *DEFERRED)


@pytest.mark.parametrize("name", ["npugraph_ex", "torchair"])
def test_lazy_proxy_binds_submodules_on_the_proxy_and_the_package(npu_lazy, monkeypatch, name):
    """A proxy whose real package is loaded answers `import <name>`, `from <name>.<child> import ...`, and
    a child that shows up only later is bound to both proxy and package by the proxy's fallback."""
    import torch_npu.dynamo as npu_dynamo

    proxy_type, real_attribute = {"npugraph_ex": (npu_dynamo._LazyNpuGraphEx, "_npugraph_ex"),
                                  "torchair": (npu_dynamo._LazyTorchair, "_torchair")}[name]
    package = types.ModuleType(f"torch_npu.dynamo.{name}")
    package.__path__ = []
    child = types.ModuleType(f"{name}.npu_fx_compiler")
    child.marker = object()
    proxy = proxy_type(name)
    setattr(proxy, real_attribute, package)
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(sys.modules, name, proxy)
    monkeypatch.setitem(sys.modules, child.__name__, child)

    namespace: dict = {}
    exec(f"import {name}\nfrom {name}.npu_fx_compiler import marker", namespace)
    assert namespace[name] is proxy
    assert namespace["marker"] is child.marker

    proxy.__dict__.pop("npu_fx_compiler", None)
    package.__dict__.pop("npu_fx_compiler", None)
    assert proxy.npu_fx_compiler is child, "the proxy's fallback did not find the loaded child module"
    assert package.npu_fx_compiler is child, "the fallback bound the child to the proxy but not to the package"


def test_zoo_mark_step_through_graph_trees_is_caught(npu_lazy):
    """(g) A step mark that goes through the graph-tree module loads Inductor on first use: caught above."""
    mark_step_through_graph_trees()
    caught(test_mark_step_begin_works_before_any_compile_and_loads_no_compiler, npu_lazy,
           says=("must not be loaded yet, but it was loaded during phase 'mark_step'",
                 "in mark_step_through_graph_trees.<locals>.patch.<locals>.mark_step_begin"))


#: proxy name -> (its real package, an attribute the package defines)
PROXIED = {"npugraph_ex": ("torch_npu.dynamo.npugraph_ex", "CompilerConfig"),
           "torchair": ("torch_npu.dynamo.torchair", "get_npu_backend")}


@pytest.mark.parametrize("name", PROXIED)
def test_a_lazy_proxy_imports_its_package_on_import_and_then_answers_for_it(npu_lazy, name):
    """``import <name>`` asks the proxy for ``__spec__``: that, and nothing before it, imports the real package;
    from then on the proxy answers with the package's own attributes."""
    skip_unless_torchair_imports("torchair and npugraph_ex")
    package_name, attribute = PROXIED[name]
    proxy = sys.modules[name]
    npu_lazy.assert_not_loaded(package_name)
    namespace: dict = {}
    exec(f"import {name}\nfrom {name} import {attribute} as value", namespace)
    package = sys.modules.get(package_name)
    assert package is not None, f"`import {name}` did not import {package_name}"
    assert namespace[name] is proxy and namespace["value"] is getattr(package, attribute)
    assert getattr(proxy, attribute) is getattr(package, attribute)
    assert proxy.__spec__ is package.__spec__ and list(proxy.__path__) == list(package.__path__)


@pytest.mark.parametrize("name", PROXIED)
def test_a_lazy_proxy_whose_package_fails_to_import_raises_that_error_again_on_every_use(npu_lazy, monkeypatch, name):
    """CPython's import swallows an error raised while it reads ``__spec__``; the proxy keeps it and raises it,
    with a note naming the package, on every later use instead of answering as if nothing had happened."""
    package_name, attribute = PROXIED[name]
    monkeypatch.setitem(sys.modules, package_name, None)  # importing the real package now fails
    proxy = sys.modules[name]
    with pytest.raises(ImportError) as first:
        proxy.__spec__  # noqa: B018 - touching it is the test
    for touch in (lambda: getattr(proxy, attribute), lambda: proxy.__path__, lambda: proxy.anything):
        with pytest.raises(ImportError) as again:
            touch()
        assert again.value is first.value, f"a later use raised {again.value!r}, not the import's {first.value!r}"
    note = first.value.args[0]  # what the proxy added (an ImportError's str() is its msg, without the note)
    assert f"An error occurred when import `{name}`" in note and "ERR00005" in note, note


@pytest.mark.parametrize("name", ["npugraph_ex", "torchair"])
def test_a_proxy_binds_children_loaded_under_the_packages_real_name_and_skips_blocked_ones(npu_lazy, monkeypatch,
                                                                                          name):
    """The real package imports its children as ``torch_npu.dynamo.<name>.<child>``: those are bound to the proxy
    too; an entry that is None in sys.modules (an import blocked on purpose) is bound to neither."""
    import torch_npu.dynamo as npu_dynamo

    proxy_type, real_attribute = {"npugraph_ex": (npu_dynamo._LazyNpuGraphEx, "_npugraph_ex"),
                                  "torchair": (npu_dynamo._LazyTorchair, "_torchair")}[name]
    package = types.ModuleType(f"torch_npu.dynamo.{name}")
    package.__path__ = []
    child = types.ModuleType(f"torch_npu.dynamo.{name}.core")
    grandchild = types.ModuleType(f"torch_npu.dynamo.{name}.core.deep")
    proxy = proxy_type(name)
    setattr(proxy, real_attribute, package)
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(sys.modules, child.__name__, child)
    monkeypatch.setitem(sys.modules, grandchild.__name__, grandchild)
    monkeypatch.setitem(sys.modules, f"{name}.blocked", None)

    before = {"proxy": set(vars(proxy)), "package": set(vars(package))}
    npu_dynamo._bind_lazy_submodules(proxy, package, name)
    bound = {"proxy": set(vars(proxy)) - before["proxy"], "package": set(vars(package)) - before["package"]}
    # on the proxy itself, not through its fallback to the package: what `from <name> import core` reads first
    assert bound == {"proxy": {"core"}, "package": {"core"}}, (
        f"bound {bound}; expected the one child 'core' on both (not the grandchild, not the blocked import)")
    assert vars(proxy)["core"] is child and package.core is child


@pytest.mark.parametrize("name", PROXIED)
def test_importing_a_proxy_binds_the_loaded_children_to_the_proxy_and_the_package(npu_lazy, name):
    """The real package's children load as ``<name>.<child>`` or ``torch_npu.dynamo.<name>.<child>``: after
    ``import <name>`` each is an attribute of the proxy and of the real package, as a package's children are."""
    skip_unless_torchair_imports("torchair and npugraph_ex")
    package_name, _ = PROXIED[name]
    exec(f"import {name}", {})
    proxy, package = sys.modules[name], sys.modules[package_name]
    children = {}
    for prefix in (f"{name}.", f"{package_name}."):
        children.update({module_name[len(prefix):]: module for module_name, module in list(sys.modules.items())
                         if module is not None and module_name.startswith(prefix)
                         and "." not in module_name[len(prefix):]})
    assert children, f"importing {package_name} loaded no child module: nothing here to check"
    unbound = sorted(child for child, module in children.items()
                     if vars(proxy).get(child) is not module or vars(package).get(child) is not module)
    assert not unbound, f"children of {package_name} not bound to both the proxy and the package: {unbound}"
