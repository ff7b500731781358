"""The ``npu`` backend (torchair's) is built once per process, by whichever comes first, and used by every compile.

torch_npu < 2.15 builds torchair's backend while ``torch.compile(..., backend="npu")``
runs (its ``torch._dynamo.optimize`` hook), so that the first call does not
pay for it; the first call then goes through ``_lazy_exec``, which must find
that backend and not build a second. A backend callable passed directly
(``lookup_backend("npu")``) skips the hook: the first call builds the backend
itself and must run what it built. Without torchair's proxy in
``sys.modules`` the error says so.

torchair's ``get_npu_backend`` is replaced by a recording backend that runs
the captured graph on the CPU: what is pinned is how often torch_npu asks for
a backend and which one runs, not torchair's compiler, which needs a device.
"""

from __future__ import annotations

import sys

import pytest
from facts import needs_deferred_setup
from test_non_inductor_backends import skip_unless_torchair_imports

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]


class RecordingTorchair:
    """Stands in for ``torchair.get_npu_backend``: counts the backends built and the graphs each compiled."""

    def __init__(self):
        self.built = []  # the compiler_config of each backend built
        self.graphs = []  # (backend number, graph module) for every graph compiled

    def get_npu_backend(self, *, compiler_config=None):
        number = len(self.built)
        self.built.append(compiler_config)

        def backend(graph_module, example_inputs, **kwargs):
            self.graphs.append((number, graph_module))
            return graph_module.forward

        return backend


@pytest.fixture
def torchair(monkeypatch):
    skip_unless_torchair_imports()
    import torch_npu.dynamo.torchair as real

    recording = RecordingTorchair()
    monkeypatch.setattr(real, "get_npu_backend", recording.get_npu_backend)
    return recording


def _models(torch):
    return (lambda x: torch.sin(x) + 1), (lambda x: torch.cos(x) * 2)


def test_the_npu_backend_is_built_once_and_every_compile_runs_it(torchair):
    import torch

    first, second = _models(torch)
    x = torch.randn(8)
    compiled_first = torch.compile(first, backend="npu", fullgraph=True)
    torch.testing.assert_close(compiled_first(x), first(x))
    torch.testing.assert_close(compiled_first(x), first(x))
    compiled_second = torch.compile(second, backend="npu", fullgraph=True)
    torch.testing.assert_close(compiled_second(x), second(x))
    assert len(torchair.built) == 1, (
        f"torchair's npu backend was built {len(torchair.built)} times for two compiles in one process; torch_npu "
        "keeps the backend it built (at the first torch.compile) and must not build another")
    assert [number for number, _ in torchair.graphs] == [0, 0], (
        f"expected both functions' graphs compiled by the one backend built, got {torchair.graphs}")


def test_a_backend_callable_passed_directly_builds_torchair_at_the_first_call_and_runs_it(torchair):
    import torch
    import torch._dynamo

    backend = torch._dynamo.lookup_backend("npu")
    first, _ = _models(torch)
    compiled = torch.compile(first, backend=backend, fullgraph=True)
    assert torchair.built == [], "a backend callable was given: nothing may be built before the first call"
    x = torch.randn(8)
    torch.testing.assert_close(compiled(x), first(x))
    assert len(torchair.built) == 1 and len(torchair.graphs) == 1, (
        f"the first call built {len(torchair.built)} backend(s) and compiled {len(torchair.graphs)} graph(s) "
        "through them; expected it to build one and compile its graph with it")


def test_without_torchairs_proxy_the_npu_backend_says_torchair_is_missing(monkeypatch):
    """The proxy is removed after the Dynamo set-up (which installs it again when it is missing)."""
    import torch
    import torch._dynamo

    monkeypatch.delitem(sys.modules, "torchair")
    first, _ = _models(torch)
    with pytest.raises(Exception, match=r"Could not find module torchair\. Please check if torchair is removed "
                                        r"from sys\.modules"):
        torch.compile(first, backend="npu", fullgraph=True)(torch.randn(8))


class RecordingNpuGraphEx:
    """Stands in for ``npugraph_ex.get_npu_backend``: records the configuration each backend was built with."""

    def __init__(self):
        self.configs = []
        self.graphs = []

    def get_npu_backend(self, *, compiler_config=None):
        self.configs.append(compiler_config)

        def backend(graph_module, example_inputs, **kwargs):
            self.graphs.append(graph_module)
            return graph_module.forward

        return backend


@pytest.mark.npu_lazy(preload=["torch"])
def test_the_npugraph_ex_entry_point_sets_up_dynamo_and_builds_its_backend_in_npugraph_ex_mode(npu_lazy, monkeypatch):
    """``backend="npugraph_ex"`` found through the wheel's entry point (torch_npu not imported): the compile has
    torch_npu's Dynamo integration set up, and the entry builds npugraph_ex's backend with ``mode="npugraph_ex"``
    and runs it."""
    import torch

    skip_unless_torchair_imports("npugraph_ex (torchair)")
    from importlib import metadata

    [entry] = [ep for ep in metadata.entry_points(group="torch_dynamo_backends") if ep.name == "npugraph_ex"]
    entry_function = entry.load()  # imports torch_npu, as Dynamo's registry does
    import torch_npu.dynamo.npugraph_ex as real
    from torch_npu.utils._dynamo import _lazy_dynamo_setup

    recording = RecordingNpuGraphEx()
    monkeypatch.setattr(real, "get_npu_backend", recording.get_npu_backend)
    # as before any first call: the package is in sys.modules (with the stand-in) but not yet an attribute of
    # torch_npu.dynamo, so the backend finds it only through `import npugraph_ex` and the proxy
    import torch_npu.dynamo

    monkeypatch.delattr(torch_npu.dynamo, "npugraph_ex")
    first, _ = _models(torch)
    x = torch.randn(8)
    torch.testing.assert_close(torch.compile(first, backend=entry_function, fullgraph=True)(x), first(x))
    assert _lazy_dynamo_setup.has_run, "the npugraph_ex entry point compiled without torch_npu's Dynamo set-up"
    assert len(recording.configs) == 1 and len(recording.graphs) == 1, (recording.configs, recording.graphs)
    config = recording.configs[0]
    assert isinstance(config, real.CompilerConfig) and config.mode.value == "npugraph_ex", (
        f"npugraph_ex's backend was built with {config!r}; expected a CompilerConfig in mode 'npugraph_ex'")


def test_the_npu_entry_point_runs_the_backend_that_backend_npu_built(torchair):
    """Dynamo's registry may hand out the wheel's entry function for "npu" (torch_npu imported after the lookup):
    its first call must run the torchair backend the process already has, not build a second one."""
    import torch
    from importlib import metadata

    [entry] = [ep for ep in metadata.entry_points(group="torch_dynamo_backends") if ep.name == "npu"]
    first, second = _models(torch)
    x = torch.randn(8)
    torch.testing.assert_close(torch.compile(first, backend="npu", fullgraph=True)(x), first(x))
    torch.testing.assert_close(torch.compile(second, backend=entry.load(), fullgraph=True)(x), second(x))
    assert len(torchair.built) == 1 and [n for n, _ in torchair.graphs] == [0, 0], (
        f"{len(torchair.built)} torchair backends built, graphs compiled by {[n for n, _ in torchair.graphs]}: the "
        "entry function must reuse the npu backend")


@pytest.mark.parametrize("warnings_off", [False, True], ids=["warnings", "TORCH_NPU_WARNING_DISABLE=1"])
def test_without_torchair_the_npu_backend_is_eager_and_says_so_once(npu_lazy, monkeypatch, recwarn, warnings_off):
    """A torch_npu built without torchair registers an eager "npu" backend, warning that it does (unless torch_npu's
    warnings are switched off): the graph runs as captured, with no compiler."""
    import torch
    import torch_npu.dynamo as npu_dynamo

    if warnings_off:
        monkeypatch.setenv("TORCH_NPU_WARNING_DISABLE", "1")
    monkeypatch.setattr(npu_dynamo, "_install_lazy_torchair", lambda: False)  # as if dynamo/torchair were absent
    import torch._dynamo  # the set-up registers the backends now

    backend = torch._dynamo.lookup_backend("npu")
    assert backend is npu_dynamo._eager_npu_backend, f"without torchair, 'npu' is {backend!r}"
    first, _ = _models(torch)
    x = torch.randn(8)
    torch.testing.assert_close(torch.compile(first, backend=backend, fullgraph=True)(x), first(x))
    said = [str(w.message) for w in recwarn if "not compiled with torchair" in str(w.message)]
    assert len(said) == (0 if warnings_off else 1), (
        f"{len(said)} 'not compiled with torchair' warnings with torch_npu's warnings "
        f"{'off' if warnings_off else 'on'}: {said}")


@pytest.mark.parametrize("name", ["npugraph_ex", "torchair"])
def test_the_dynamo_setup_installs_the_lazy_proxy_the_backends_import(npu_lazy, monkeypatch, name):
    """The backends run ``import npugraph_ex`` and ``import torchair``: names only torch_npu's proxies answer.
    A proxy gone from sys.modules before the Dynamo set-up (a sys.modules snapshot restored, say) is put back."""
    import torch_npu.dynamo as npu_dynamo

    monkeypatch.delitem(sys.modules, name)
    import torch._dynamo  # noqa: F401  (the set-up registers the backends now)

    proxy_type = {"npugraph_ex": npu_dynamo._LazyNpuGraphEx, "torchair": npu_dynamo._LazyTorchair}[name]
    assert isinstance(sys.modules.get(name), proxy_type), (
        f"after the Dynamo set-up sys.modules[{name!r}] is {sys.modules.get(name)!r}, not torch_npu's lazy proxy: "
        f"the backend's `import {name}` would fail")


def test_a_torch_npu_without_its_bundled_torchair_installs_no_proxy_and_registers_the_eager_backend(
        npu_lazy, monkeypatch, tmp_path):
    """Whether torch_npu was built with torchair is read from its files (``torch_npu/dynamo/torchair``): without
    them no ``torchair`` proxy is installed (an ``import torchair`` must fail as it would without torch_npu) and
    the "npu" backend is the eager one; with them the proxy is installed."""
    import torch_npu.dynamo as npu_dynamo

    real_file = npu_dynamo.__file__
    monkeypatch.delitem(sys.modules, "torchair", raising=False)
    monkeypatch.setattr(npu_dynamo, "__file__", str(tmp_path / "__init__.py"))  # a torch_npu/dynamo without torchair
    monkeypatch.setenv("TORCH_NPU_WARNING_DISABLE", "1")
    assert npu_dynamo._install_lazy_torchair() is False
    assert "torchair" not in sys.modules, f"a proxy for a torchair that is not there: {sys.modules['torchair']!r}"
    assert npu_dynamo._get_default_backend("npu") is npu_dynamo._eager_npu_backend
    monkeypatch.setattr(npu_dynamo, "__file__", real_file)
    assert npu_dynamo._install_lazy_torchair() is True
    assert isinstance(sys.modules.get("torchair"), npu_dynamo._LazyTorchair)
