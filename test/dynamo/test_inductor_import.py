"""What importing ``torch_npu._inductor`` does to the process it loads in, before any backend runs.

It imports Inductor's compile machinery with device-backend autoload held off
(``TORCH_DEVICE_BACKEND_AUTOLOAD=0``: a compile worker started then must not
import torch_npu again on its own), warms Inductor's compile pool unless
``TORCH_WARM_POOL=0``, limits compilation to one thread for the dvm backend,
and puts the autoload variable back as it found it. The first Inductor call
of a user's process does this import (``register_inductor_npu``); the tests
import it directly, with the compile pool's warm-up recorded instead of run.
"""

from __future__ import annotations

import os
import sys

import pytest
from facts import needs_deferred_setup

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"
WARM_POOL = "TORCH_WARM_POOL"
THREADS = "TORCHINDUCTOR_COMPILE_THREADS"
BACKEND = "TORCHINDUCTOR_NPU_BACKEND"


@pytest.fixture
def warm_ups(monkeypatch):
    """Each warm-up of Inductor's compile pool, as what the environment and config said at that moment."""
    import torch
    from torch._inductor.async_compile import AsyncCompile

    assert "torch_npu._inductor" not in sys.modules, "the preload imported torch_npu._inductor: nothing to check"
    calls: list[dict] = []

    def record(cls) -> None:
        calls.append({"autoload": os.environ.get(AUTOLOAD), "threads": os.environ.get(THREADS),
                      "config_threads": torch._inductor.config.compile_threads})

    monkeypatch.setattr(AsyncCompile, "warm_pool", classmethod(record))
    monkeypatch.delenv(BACKEND, raising=False)
    return calls


def _set(monkeypatch, name: str, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize("autoload, warm_pool, warmed", [
    (None, None, 1),  # unset: the default of each
    ("1", "1", 1),
    ("0", "0", 0),
    ("1", "0", 0),
])
def test_importing_npu_inductor_holds_autoload_off_warms_the_pool_and_restores_the_variable(
        npu_lazy, monkeypatch, warm_ups, autoload, warm_pool, warmed):
    _set(monkeypatch, AUTOLOAD, autoload)
    _set(monkeypatch, WARM_POOL, warm_pool)
    import torch_npu._inductor  # noqa: F401 - the import is the test

    assert len(warm_ups) == warmed, (
        f"with {WARM_POOL}={warm_pool!r} the compile pool was warmed {len(warm_ups)} times, expected {warmed}")
    for call in warm_ups:
        assert call["autoload"] == "0", f"the pool was warmed with {AUTOLOAD}={call['autoload']!r}, not '0'"
    after = os.environ.get(AUTOLOAD)
    # unset means "1" to torch: torch_npu puts back "1" there
    assert after == (autoload or "1"), f"{AUTOLOAD} was {autoload!r} before the import and {after!r} after it"


def test_the_dvm_backend_compiles_on_one_thread_from_the_import_on(npu_lazy, monkeypatch, warm_ups):
    import torch

    monkeypatch.setenv(BACKEND, "dvm")
    monkeypatch.delenv(WARM_POOL, raising=False)
    monkeypatch.delenv(THREADS, raising=False)
    try:
        import torch_npu._inductor  # noqa: F401
    except Exception:
        pass
    assert warm_ups, "importing torch_npu._inductor did not warm the compile pool"
    assert warm_ups[0]["threads"] == "1" and warm_ups[0]["config_threads"] == 1, (
        f"the dvm backend's pool was warmed with {THREADS}={warm_ups[0]['threads']!r} and "
        f"compile_threads={warm_ups[0]['config_threads']!r}; expected one thread")
    assert torch._inductor.config.compile_threads == 1


def test_the_default_backend_applies_the_common_patches_once(npu_lazy, warm_ups):
    """The Triton loader (the default backend) applies the patches every Triton-based backend shares, through a
    run-once: a later loader (dvm, mlir) calling it again must not wrap Inductor's functions a second time."""
    import torch
    from torch._inductor import compile_fx, scheduler
    from torch._inductor.codecache import CacheBase
    from torch._inductor.graph import GraphLowering
    from torch._inductor.utils import GPU_TYPES
    from torch_npu.utils._dynamo import has_triton

    import torch_npu._inductor as npu_inductor

    assert compile_fx.has_triton is has_triton and scheduler.has_triton is has_triton, (
        "Inductor's has_triton checks were not replaced by torch_npu's")
    assert "npu" in GPU_TYPES, "npu is not one of Inductor's GPU types"
    patched = {"GraphLowering.codegen_with_cpp_wrapper": GraphLowering.codegen_with_cpp_wrapper,
               "CacheBase.get_system": CacheBase.get_system,
               "torch.utils._triton._device_supports_tma": torch.utils._triton._device_supports_tma}
    foreign = {name: f.__module__ for name, f in patched.items() if not f.__module__.startswith("torch_npu.")}
    assert not foreign, f"not patched by torch_npu: {foreign}"
    npu_inductor._apply_common_patches()
    again = {"GraphLowering.codegen_with_cpp_wrapper": GraphLowering.codegen_with_cpp_wrapper,
             "CacheBase.get_system": CacheBase.get_system,
             "torch.utils._triton._device_supports_tma": torch.utils._triton._device_supports_tma}
    assert again == patched, "a second call of _apply_common_patches patched Inductor again"


#: backend name -> the loader torch_npu._inductor must choose for it
LOADERS = {"mlir": "_load_mlir_backend", "dvm": "_load_dvm_backend", "ascendc": "_load_ascendc_backend",
           "default": "_load_triton_backend", "triton_experimental": "_load_triton_experimental_backend"}


@pytest.mark.parametrize("backend", [None, *LOADERS])
def test_each_backend_name_selects_its_own_loader(npu_lazy, monkeypatch, warm_ups, backend):
    """``TORCHINDUCTOR_NPU_BACKEND`` picks the loader; a name that lost its entry would fall back to Triton
    without a word."""
    import torch_npu._inductor as npu_inductor

    _set(monkeypatch, BACKEND, backend)
    assert npu_inductor._get_backend() == (backend or "default")
    name = backend or "default"
    assert npu_inductor._BACKEND_LOADERS.get(name) is getattr(npu_inductor, LOADERS[name]), (
        f"backend {name!r} selects {npu_inductor._BACKEND_LOADERS.get(name)!r}, not {LOADERS[name]}")


def test_a_backend_load_restores_inductors_baseline_first_and_clears_the_decomposition_cache_after(
        npu_lazy, monkeypatch, warm_ups):
    """A switch of backend (mlir <-> triton in one process) reloads: Inductor's globals go back to their
    baseline before the loader runs, and the cached decompositions are dropped after it, so the new backend's
    own decompositions are the ones used. Each step is recorded here instead of run."""
    import torch._inductor.decomposition as decomposition
    import torch_npu._inductor as npu_inductor
    import torch_npu._inductor.fx_passes.overlap_scheduling as overlap_scheduling
    import torch_npu._inductor.lowering_patch as lowering_patch
    from torch_npu.utils._dynamo import _InductorNpuRegistry

    events = []

    class Decompositions:
        def cache_clear(self):
            events.append("decompositions cleared")

    monkeypatch.setattr(lowering_patch, "restore_inductor_baseline", lambda: events.append("baseline restored"))
    monkeypatch.setattr(overlap_scheduling, "patch_overlap_scheduling", lambda: events.append("overlap patched"))
    monkeypatch.setattr(decomposition, "fast_random_decomps", Decompositions())
    monkeypatch.setitem(npu_inductor._BACKEND_LOADERS, "dvm", lambda: events.append("dvm loaded"))
    monkeypatch.setattr(_InductorNpuRegistry, "_loaded_backend", "default")
    monkeypatch.setenv(BACKEND, "dvm")
    npu_inductor._load_backend()
    assert events == ["baseline restored", "dvm loaded", "overlap patched", "decompositions cleared"], events
    assert _InductorNpuRegistry._loaded_backend == "dvm", "the registry does not know which backend is loaded"


@pytest.mark.parametrize("backend", [None, "default"])
def test_a_direct_import_of_npu_inductor_counts_as_the_registration(npu_lazy, monkeypatch, warm_ups, backend):
    """Code that imports ``torch_npu._inductor`` itself has loaded the backend: the first Inductor call's
    registration must not load it a second time (a reload restores Inductor's globals under the user)."""
    from torch_npu.utils import _dynamo

    _set(monkeypatch, BACKEND, backend)
    import torch_npu._inductor as npu_inductor

    assert _dynamo.is_inductor_npu_initialized(), "importing torch_npu._inductor left the registry empty"
    loads = []
    monkeypatch.setattr(npu_inductor, "_load_backend", lambda: loads.append(os.environ.get(BACKEND)))
    _dynamo.register_inductor_npu()
    assert loads == [], f"the registration after a direct import loaded the backend again: {loads}"


@pytest.mark.npu_lazy(preload=["torch"])
def test_inductor_imported_before_torch_npu_still_gets_the_npu_has_triton(npu_lazy, monkeypatch):
    """``import torch_npu`` patches ``torch.utils._triton.has_triton``, which Inductor modules imported later bind;
    modules imported before torch_npu hold torch's own, and the default backend's loader must replace it there."""
    from torch._inductor import compile_fx, scheduler  # Inductor first, as a user's own import may do

    original = compile_fx.has_triton
    import torch_npu
    from torch._inductor.async_compile import AsyncCompile
    from torch_npu.utils._dynamo import has_triton

    assert original is not has_triton and compile_fx.has_triton is original, "nothing here for the loader to patch"
    monkeypatch.setattr(AsyncCompile, "warm_pool", classmethod(lambda cls: None))
    monkeypatch.delenv(BACKEND, raising=False)
    import torch_npu._inductor  # noqa: F401

    assert compile_fx.has_triton is has_triton and scheduler.has_triton is has_triton, (
        "Inductor modules imported before torch_npu still use torch's has_triton after NPU Inductor loaded")


def _from_torch_npu(function) -> bool:
    return (getattr(function, "__module__", None) or "").startswith("torch_npu")


def test_npu_meta_kernels_and_decompositions_replace_atens_on_the_import_not_before(npu_lazy, warm_ups):
    """For aten ops whose NPU outputs differ in dtype or shape from the native ones, torch_npu's meta kernels and
    decompositions replace aten's, so that an Inductor trace's fake tensors have the NPU's shapes; that happens
    when ``torch_npu._inductor`` is imported (the first Inductor call), and ``import torch_npu`` leaves aten's."""
    from torch._C import DispatchKey
    from torch._decomp import decomposition_table, meta_table

    before = {op: (op.py_kernels.get(DispatchKey.Meta), decomposition_table.get(op), meta_table.get(op))
              for op in {*decomposition_table, *meta_table}}
    import torch_npu._inductor  # noqa: F401
    from torch_npu._inductor._npu_meta_registration import META_BLACKLIST, avoid_make_fallback_table, npu_meta_table

    assert npu_meta_table, "torch_npu._inductor registered no NPU meta kernels: nothing to check"
    early = sorted(str(op) for op in npu_meta_table if any(map(_from_torch_npu, before.get(op, ()))))
    assert not early, f"import torch_npu, before any Inductor use, already replaced aten's meta functions of {early}"
    missing = []
    for op, fn in npu_meta_table.items():
        if op.py_kernels.get(DispatchKey.Meta) is not fn:
            missing.append(f"{op}: Meta kernel")
        if op not in avoid_make_fallback_table and decomposition_table.get(op) is not fn:
            missing.append(f"{op}: decomposition")
        if op.name() not in META_BLACKLIST and meta_table.get(op) is not fn:
            missing.append(f"{op}: meta_table")
    assert not missing, (f"after importing torch_npu._inductor, {len(missing)} of aten's functions are not "
                         f"torch_npu's NPU ones: {missing[:8]}")
