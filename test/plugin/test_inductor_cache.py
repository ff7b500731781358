"""The Inductor cache each isolated test starts with (--npu-lazy-inductor-cache), and what a first call does on it.

What is pinned, on the CPU path (the host stub) and on the NPU path (the emulated NPU that computes): a first
compiled call loads the same modules on an empty cache, on the default policy's (every graph lookup misses, the
run's kernels reused: a fraction of the cost) and with the graph caches off (the mutation runner's), and fewer
on a warm graph cache, which skips Inductor's lowering passes. A guarantee
about a first call can therefore pass or fail by what an earlier test or run left on disk, unless the plugin
gives each test a defined cache; the report says which each test got.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import types

import pytest

from pytest_npu_lazy.probe import inductor_cache as policy
from pytest_npu_lazy.probe import inductor_cache as measured

FIRST_CALLS = '''
import os
import pytest

pytestmark = pytest.mark.npu_lazy(preload=["torch", "torch_npu"])


def _first_call(npu_lazy, tmp_path_factory, label):
    import torch

    fn = npu_lazy.compile(lambda x: torch.sin(x) * 2 + x.sum(), backend="inductor")
    fn(torch.randn(64, device=npu_lazy.device))
    where = tmp_path_factory.getbasetemp().parent / f"cache-dir-{label}"
    where.write_text(os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""))


@pytest.mark.npu_lazy(inductor_cache="empty")
def test_empty(npu_lazy, tmp_path_factory):
    _first_call(npu_lazy, tmp_path_factory, "empty")


def test_default(npu_lazy, tmp_path_factory):
    _first_call(npu_lazy, tmp_path_factory, "default")


def test_default_again(npu_lazy, tmp_path_factory):
    _first_call(npu_lazy, tmp_path_factory, "default-again")


def test_graph_caches_off(npu_lazy, tmp_path_factory, monkeypatch):
    import torch._inductor.config
    import torch._functorch.config

    monkeypatch.setattr(torch._inductor.config, "fx_graph_cache", False)
    monkeypatch.setattr(torch._functorch.config, "enable_autograd_cache", False)
    _first_call(npu_lazy, tmp_path_factory, "graph-caches-off")


@pytest.mark.npu_lazy(inductor_cache="shared")
def test_shared_first(npu_lazy, tmp_path_factory):
    _first_call(npu_lazy, tmp_path_factory, "shared")


@pytest.mark.npu_lazy(inductor_cache="shared")
def test_shared_again(npu_lazy, tmp_path_factory):
    _first_call(npu_lazy, tmp_path_factory, "shared-again")
'''


#: the module Inductor loads a generated kernel as; its name hashes the kernel's source, which names its directory
KERNEL_MODULE = "torch._inductor.runtime.compile_tasks."


def _first_call_modules(test: dict) -> set[str]:
    phase = next(p for p in test["phases"] if p["name"] == "first_call")
    return {KERNEL_MODULE + "<kernel>" if m["name"].startswith(KERNEL_MODULE) else m["name"] for m in phase["modules"]}


@pytest.mark.needs("torch", "torch_npu")
@pytest.mark.parametrize("mode", ["stub", "compute"], ids=["cpu-path", "npu-path"])
def test_a_first_call_loads_the_same_on_every_cold_cache_and_less_when_warm(
        run_pytest, pytester, monkeypatch, tmp_path, mode):
    pytester.path.joinpath("test_first_calls.py").write_text(FIRST_CALLS)
    user_cache = tmp_path / "users-own-cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(user_cache))
    monkeypatch.delenv(policy.RUN_DIRECTORY_ENV, raising=False)  # this run owns its directory, and removes it
    run = run_pytest("-p", "npu_lazy", f"--npu-lazy-cann={mode}", "--npu-lazy-json=r.json",
                     "--npu-lazy-json-modules", "-v")  # -v: the header explains the cache policy
    assert set(run.outcomes.values()) == {"passed"}, run.text()
    assert "npu_lazy: Inductor cache of isolated tests: cold (every graph lookup misses" in run.text()
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["run"]["inductor_cache_policy"] == "cold"
    tests = {t["nodeid"].rpartition("::")[2]: t for t in report["tests"]}
    got = {name: (t["inductor_cache_policy"], t["inductor_cache"]) for name, t in tests.items()}
    assert got == {"test_empty": ("empty", "cold"), "test_default": ("cold", "cold"),
                   "test_default_again": ("cold", "cold"), "test_graph_caches_off": ("cold", "uncached"),
                   "test_shared_first": ("shared", "cold"), "test_shared_again": ("shared", "warm")}

    cold = _first_call_modules(tests["test_empty"])
    for name in ("test_default", "test_default_again", "test_graph_caches_off", "test_shared_first"):
        other = _first_call_modules(tests[name])
        assert other == cold, (f"{name}'s first call no longer loads what one on an empty cache does: only "
                               f"empty {sorted(cold - other)}, only {name} {sorted(other - cold)}")
    warm = _first_call_modules(tests["test_shared_again"])
    assert warm < cold, sorted(warm - cold)
    assert any(name.startswith("torch._inductor.fx_passes.") for name in cold - warm), sorted(cold - warm)
    if mode == "compute":  # the NPU backend's set-up happens in the first call either way
        assert {"torch_npu._inductor", "torch_npu._inductor.lowering"} <= warm

    seen = {label: (pytester.path / f"cache-dir-{label}").read_text()
            for label in ("empty", "default", "default-again", "shared", "shared-again")}
    assert seen["shared"] == seen["shared-again"] == str(user_cache)
    assert seen["default"] == seen["default-again"] != seen["empty"]  # the run's kernels, shared
    assert str(user_cache) not in (seen["empty"], seen["default"])
    for label in ("empty", "default"):
        assert not os.path.exists(seen[label]), f"the run left {label}'s cache behind"


def test_a_bad_policy_is_refused_where_it_is_given(pytester, run_pytest, monkeypatch):
    pytester.path.joinpath("test_bad.py").write_text(textwrap.dedent('''
        import pytest

        @pytest.mark.npu_lazy(preload=[], inductor_cache="colt")
        def test_typo():
            pass
    '''))
    run = run_pytest("-p", "npu_lazy")
    assert run.outcomes == {"test_bad.py::test_typo": "error"}, run.text()
    assert "inductor_cache='colt' is not a policy. Did you mean 'cold'?" in run.text()
    monkeypatch.setenv("PYTEST_NPU_LAZY_INDUCTOR_CACHE", "warm")
    refused = run_pytest("-p", "npu_lazy")
    assert refused.result.ret == pytest.ExitCode.USAGE_ERROR
    assert "PYTEST_NPU_LAZY_INDUCTOR_CACHE = 'warm' is not valid; choose one of cold, empty, shared" in (
        refused.text())


def test_apply_sets_the_cache_of_a_child_and_the_tag_of_a_loaded_config(monkeypatch, tmp_path):
    config = types.ModuleType("torch.compiler.config")
    config.cache_key_tag = ""
    monkeypatch.setitem(sys.modules, "torch.compiler.config", config)
    environ: dict[str, str] = {"TORCH_COMPILE_CACHE_KEY_TAG": "users-own"}
    changes = policy.apply("cold", str(tmp_path), environ)
    assert environ == changes and changes["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "run")
    assert changes["TORCH_COMPILE_CACHE_KEY_TAG"].startswith("users-own|npu-lazy-cold-")
    assert config.cache_key_tag == changes["TORCH_COMPILE_CACHE_KEY_TAG"]
    again = policy.apply("cold", str(tmp_path), {})
    assert again["TORCH_COMPILE_CACHE_KEY_TAG"] not in changes["TORCH_COMPILE_CACHE_KEY_TAG"]  # a tag per test
    empty: dict[str, str] = {}
    policy.apply("empty", str(tmp_path), empty)
    other: dict[str, str] = {}
    policy.apply("empty", str(tmp_path), other)
    assert set(empty) == {"TORCHINDUCTOR_CACHE_DIR"} and empty != other  # a fresh directory per test
    assert policy.apply("shared", None, environ) == {}
    with pytest.raises(ValueError, match="needs the run's cache directory"):
        policy.apply("empty", None, {})


def test_the_run_directory_belongs_to_the_process_that_made_it(tmp_path):
    environ: dict[str, str] = {}
    outer = policy.RunDirectory(environ)
    inner = policy.RunDirectory(dict(environ))  # an xdist worker, or a pytest run inside a test
    assert inner.get() == outer.get() and not inner.owned
    inner.remove()
    assert os.path.isdir(outer.get())
    outer.remove()
    assert not os.path.exists(inner.get()) and policy.RUN_DIRECTORY_ENV not in environ


@pytest.mark.parametrize("before, after, state", [
    ({}, {"fxgraph_cache_miss": 1, "total": 1}, "cold"),
    ({}, {"fxgraph_cache_hit": 1, "total": 1}, "warm"),
    ({}, {"fxgraph_cache_hit": 1, "autograd_cache_miss": 1, "total": 2}, "mixed"),
    ({"total": 3}, {"total": 4}, "uncached"),
    ({"total": 3}, {"total": 3}, None),
])
def test_the_state_a_test_met(before, after, state):
    assert measured.state(before, after) == state


def test_uncached_and_cold_are_judged_alike_by_the_budget():
    assert measured.not_comparable("cold", "uncached") is None
    assert measured.not_comparable("uncached", "cold") is None
    assert measured.not_comparable("warm", "uncached") == "Inductor cache uncached now, warm in the baseline"
