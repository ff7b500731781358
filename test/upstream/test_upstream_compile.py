"""`torch.compile`: what creating the wrapper loads (with chains), and the first call on CPU and on CUDA."""

from __future__ import annotations

import pytest
from releases import CPU_FIRST_CALL_TRITON, FIRST_CALL_LOADS, WRAP_LOADS, triton_importable

pytestmark = pytest.mark.npu_lazy(preload=["torch"])


def _chain_names(npu_lazy, module: str) -> list[str]:
    return [link.split(" (", 1)[0] for link in npu_lazy.import_chain(module)]


def test_wrapper_creation_loads_dynamo_and_inductor_from_torch_compile(npu_lazy, record_property):
    import torch

    npu_lazy.compile(lambda x: torch.cos(x) * 2, backend="inductor")
    for module, started_by in WRAP_LOADS.items():
        assert npu_lazy.first_loaded(module) == "wrap", npu_lazy.explain(module)
        chain = _chain_names(npu_lazy, module)
        record_property(f"chain {module}", " <- ".join(npu_lazy.import_chain(module)))
        assert chain[1] == started_by, f"{module} now comes from elsewhere:\n{npu_lazy.explain(module)}"
        assert "torch" in chain, f"{module} was not loaded by torch.compile:\n{npu_lazy.explain(module)}"
    npu_lazy.assert_not_loaded(*FIRST_CALL_LOADS, "torch_npu")


def test_first_compiled_call_on_cpu_matches_eager(npu_lazy, record_property):
    import torch

    fn = npu_lazy.compile(lambda x, y: torch.softmax(x @ y, dim=-1) + torch.sin(x).sum(), backend="inductor")
    x, y = torch.randn(8, 16), torch.randn(16, 16)
    fn(x, y)  # phase first_call, compared with eager by the probe
    for module in FIRST_CALL_LOADS:
        assert npu_lazy.first_loaded(module) == "first_call", npu_lazy.explain(module)
    from torch._inductor import metrics

    assert metrics.generated_kernel_count >= 1, "the first call generated no Inductor kernel"
    # Inductor's C++ backend needs no Triton; what the first call on CPU loads of it depends on whether a CUDA
    # device is visible (releases.CPU_FIRST_CALL_TRITON)
    loaded = {name for name in npu_lazy.modules("first_call") if name == "triton" or name.startswith("triton.")}
    assert loaded == CPU_FIRST_CALL_TRITON[torch.cuda.is_available()], loaded
    npu_lazy.assert_not_loaded("torch_npu")  # not even through a backend entry point
    record_property("kernels", metrics.generated_kernel_count)


def test_first_compiled_call_on_cuda_runs_a_triton_kernel(npu_lazy, record_property):
    import torch

    if not torch.cuda.is_available():
        pytest.skip(f"needs a CUDA device: torch {torch.__version__} sees none")
    if not triton_importable():
        pytest.skip("needs triton: Inductor generates Triton kernels for CUDA")
    fn = npu_lazy.compile(lambda x: torch.relu(x) * torch.sigmoid(x) + 1, backend="inductor")
    x = torch.randn(1024, device="cuda")
    fn(x)  # phase first_call, compared with eager by the probe
    torch.cuda.synchronize()
    npu_lazy.assert_loaded("triton.compiler", "torch._inductor.runtime.triton_heuristics")
    for module in FIRST_CALL_LOADS:
        assert npu_lazy.first_loaded(module) == "first_call", npu_lazy.explain(module)
    with npu_lazy.phase("profiled_call"), torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        fn(x)
        torch.cuda.synchronize()
    kernels = sorted({event.name for event in profile.events() if event.name.startswith("triton_")})
    record_property("triton_kernels", kernels)
    assert kernels, "no Triton kernel ran on the GPU: " + ", ".join(sorted({e.name for e in profile.events()})[:20])
