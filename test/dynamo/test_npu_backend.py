"""The NPU backend's first compiled call, on ``npu`` tensors: the code path the guarantee is about.

Every other first-call check compiles on CPU tensors, where torch_npu's NPU Inductor backend
(``npu_combined_scheduling``, ``torch_npu._inductor.codegen``, the Ascend Triton helpers) never
runs. Here the tensors live on the NPU: the emulated one under ``--npu-lazy-cann=emulate`` (its
memory is host memory), a real one on an NPU runner. Phase by phase the tests check what the
wrapper creation and the first call load and which device calls they make.

A kernel runs only where one can: on a real NPU the output is compared with eager on the CPU.
On the emulation no kernel runs, and the first call must stop at the boundary this
environment has (``facts.npu_kernel_boundary``), with the generated kernel's source kept in
the report (``records``) and the device calls proving that nothing was launched. A first call
that returns on the emulation fails: it would be a value no kernel computed.
"""

from __future__ import annotations

import os

import pytest
from facts import DYNAMO_SETUP, INDUCTOR_SETUP, needs_deferred_setup, npu_kernel_boundary

pytestmark = [needs_deferred_setup, pytest.mark.requires_npu(emulated=True),
              pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

#: torch_npu's NPU Inductor backend: what a first call on npu tensors must load, and the wrapper must not
NPU_CODEGEN = ("torch_npu._inductor", "torch_npu._inductor.codegen.triton",
               "torch_npu._inductor.codegen.npu_combined_scheduling", "torch_npu._inductor.codegen.wrapper",
               "torch_npu._inductor.runtime.triton_heuristics")
#: calls that run a kernel or an operator on the device: never made by a first call that ran no kernel
COMPUTE_CALLS = ("aclop*Execute*", "aclrtLaunchKernel*", "rtKernelLaunch*", "triton launch")


def _generated_kernels(error: BaseException) -> dict[str, str]:
    """The source of each Inductor-generated module a traceback of the error (or its causes) ran through."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    root, found, seen = os.path.realpath(cache_dir()), {}, set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        tb = error.__traceback__
        while tb is not None:
            filename = os.path.realpath(tb.tb_frame.f_code.co_filename)
            if filename.startswith(root + os.sep) and filename.endswith(".py") and os.path.exists(filename):
                with open(filename) as source:  # the cache's place is this machine's: a report names none
                    found[os.path.relpath(filename, root)] = source.read().replace(root, "<inductor cache>")
            tb = tb.tb_next
        error = error.__cause__ or error.__context__
    return found


@pytest.fixture
def on_npu(npu_lazy):
    """An input on the NPU and its CPU copy, made before any compile phase (device initialised here).

    torch_npu's task-queue thread binds the device (``aclrtSetDevice``) as it starts; a device's first copy
    waits for it, and so does the emulated NPU's (``compute`` computes on the caller's thread and waits for the
    queue once): that call is this phase's, never a later one's."""
    import torch

    host = torch.randn(64)
    with npu_lazy.phase("to_device"):
        device = host.to("npu")
    return host, device


def test_the_task_queue_binds_the_device_in_the_phase_of_the_first_copy(npu_lazy, on_npu):
    """A device call made later by a thread the device's start began is read as the later phase's own: the
    first copy returns only once torch_npu's queue thread (a thread that runs no Python) has set the device."""
    if not npu_lazy.device_calls_recorded:
        pytest.skip("needs recorded device calls (the emulated NPU): a real CANN has no call hook")
    bindings = [call for call in npu_lazy.device_call_records("to_device")
                if call.name == "aclrtSetDevice" and call.on_a_native_thread]
    assert bindings, [(call.name, call.thread) for call in npu_lazy.device_call_records("to_device")]


def test_wrapper_for_npu_tensors_defers_the_npu_backend(npu_lazy, on_npu):
    import torch

    fn = npu_lazy.compile(lambda x: torch.sin(x) + 1, backend="inductor")
    assert npu_lazy.ran(DYNAMO_SETUP) and not npu_lazy.ran(INDUCTOR_SETUP)
    npu_lazy.assert_not_loaded(*NPU_CODEGEN)
    npu_lazy.assert_loaded("torch._dynamo", "torch._inductor")
    npu_lazy.assert_no_device_calls("aclInit", "aclrtSetDevice", "aclrtMalloc*", *COMPUTE_CALLS, phase="wrap")
    assert fn.calls == 0


# torch_npu's own, on a device too: Inductor's fake-tensor tracing clones the npu input, and torch_npu's
# unsafe_empty_with_format warns once per process whenever internal formats are forbidden (their default),
# whatever the format asked for (torch_npu/csrc/aten/common/TensorFactories.cpp); the clone is made in base format
@pytest.mark.filterwarnings("ignore:Cannot create tensor with internal format while allow_internal_format=False:UserWarning")
@pytest.mark.parametrize("triton_mode", ["compiled", "interpreted"])
def test_first_call_on_npu_tensors_runs_the_npu_codegen(npu_lazy, on_npu, monkeypatch, triton_mode):
    import torch

    if triton_mode == "interpreted":  # the Triton interpreter over the device's memory, where one can run
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    host, device = on_npu
    fn = npu_lazy.compile(lambda x: torch.sin(x) + 1, backend="inductor", check_eager=False)
    boundary = npu_kernel_boundary(interpreted=triton_mode == "interpreted")
    if boundary is None:  # a real NPU: the kernel runs, and its output equals eager on the CPU
        out = fn(device)
        torch.testing.assert_close(out.cpu(), torch.sin(host) + 1)
    else:
        with pytest.raises(Exception) as stopped:
            out = fn(device)
            pytest.fail(f"the first call on the emulated NPU returned {out!r}, a value no kernel computed")
        npu_lazy.record("boundary", f"{type(stopped.value).__name__}: {stopped.value}".splitlines()[0])
        for path, source in _generated_kernels(stopped.value).items():
            npu_lazy.record(f"generated kernel {path}", source)
        assert boundary in str(stopped.value), f"expected the first call to stop at {boundary!r}"
        npu_lazy.assert_no_device_calls(*COMPUTE_CALLS)  # nothing was launched: no kernel counted as run
    for module in NPU_CODEGEN:
        assert npu_lazy.first_loaded(module) == "first_call", module
    assert npu_lazy.ran(INDUCTOR_SETUP)
    calls = npu_lazy.device_calls("first_call")
    assert "aclrtGetSocName" in calls  # the NPU backend asked the device what it is
    assert "aclInit" not in calls and "aclrtSetDevice" not in calls  # initialised once, before compiling
