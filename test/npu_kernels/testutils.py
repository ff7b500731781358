"""What torch_npu's Inductor op tests share (its ``test/_inductor/testutils.py``), for pytest.

torch_npu's tests make their inputs on the NPU (``_generate_tensor``), compute the eager result
there (``op_calc``), compile the same function with ``torch.compile(backend="inductor")``, and
compare the two. The helpers here do the same, and :func:`kernels_since` reads what computed
the compiled result under ``--npu-lazy-cann=compute`` (the Triton kernels the interpreter ran).
"""

from __future__ import annotations

import pytest

#: the marks every op test carries: isolated, from a zygote that imported torch and torch_npu, on an NPU that computes
#: (timeout: an interpreted kernel that runs away fails, naming the test, instead of holding the run)
MARKS = [pytest.mark.npu_lazy(preload=["torch", "torch_npu", "torch._dynamo", "torch._inductor.compile_fx"], timeout=120),
         pytest.mark.requires_npu(emulated="compute")]

#: for a test that compiles, runs and compares and changes nothing a next compile reads (no switch set in the
#: environment, which torch_npu reads once, at its import): once it passes, the next such test of its module runs in
#: the same child, as torch_npu's own op tests run in one process, without paying again for importing the NPU Inductor
#: backend and Inductor's first compile (about 1.5 s of a test's 1.8 s on 2 cores). Its report says so
SHARED = pytest.mark.npu_lazy(share_process=True)

FLOATS = ("float32", "float16", "bfloat16")
#: one shape per dtype, as torch_npu's ``_pointwise_demo_shapes`` mix them: aligned, odd (masks), 3-d
SHAPE_OF = {"float32": (1024, 32), "float16": (3, 7, 33), "bfloat16": (64, 17), "int64": (1024, 32),
            "int32": (5, 31), "bool": (64, 17)}


def generate_tensor(shape, dtype: str, low=None, high=None, positive: bool = False):
    """An input on the NPU, as torch_npu's ``_generate_tensor``: normal floats (``positive``: in [0.5, ...)),
    integers in [low, high)."""
    import torch

    torch_dtype = getattr(torch, dtype)
    if dtype == "bool":
        return torch.randint(0, 2, shape, dtype=torch.int64).bool().npu()
    if torch_dtype.is_floating_point:
        values = torch.randn(shape, dtype=torch.float32)
        return (values.abs() + 0.5 if positive else values).to(torch_dtype).npu()
    return torch.randint(-9 if low is None else low, 9 if high is None else high, shape, dtype=torch_dtype).npu()


def write_with_the_no_linear_codegen(monkeypatch) -> None:
    """torch_npu writes each kernel with its index codegen and checks it by compiling it; where that check fails (on a
    device too), ``NPUCombinedScheduling.codegen_node`` writes the kernel with its no-linear codegen instead. Make
    every check fail here, for tests of what compute mode does with the no-linear codegen's kernels (the launches
    it runs together, the loops it folds), which a device runs wherever the index codegen's check fails."""
    from torch_npu._inductor.codegen import scheduling

    def refuse(self, src_code):
        raise RuntimeError("the index codegen's TTIR check fails on purpose (write_with_the_no_linear_codegen)")

    monkeypatch.setattr(scheduling.NPUTritonScheduling, "make_ttir_for_check", refuse)


#: the ledger entry at which the last compile_and_run's compiled call began (compute mode: what computed it follows)
COMPILED_FROM = [0]


def compile_and_run(op, *inputs):
    """Eager on the NPU, then compiled on the NPU: (compiled result, eager result), as torch_npu's tests make them."""
    import torch

    from pytest_npu_lazy.cann.compute import LEDGER

    torch._dynamo.reset()
    std_result = op(*inputs)
    COMPILED_FROM[0] = len(LEDGER.entries)
    inductor_result = torch.compile(op, backend="inductor")(*inputs)
    return inductor_result, std_result


def computed_by_the_compiled_call() -> tuple[list[str], list[str]]:
    """(Triton kernels, host ATen operators) that computed the last compile_and_run's compiled call under compute
    mode; both empty on a real NPU, where nothing is written to the ledger."""
    from pytest_npu_lazy.cann.compute import HOST_ATEN, LEDGER, TRITON_INTERPRETER

    entries = LEDGER.since(COMPILED_FROM[0])
    return ([e.name for e in entries if e.by == TRITON_INTERPRETER], [e.name for e in entries if e.by == HOST_ATEN])


def producer_of(tensor):
    """The computation that last wrote ``tensor``'s storage during the last compile_and_run's compiled call (a ledger
    entry: ``.by`` is the Triton interpreter or the host's ATen, ``.name`` the kernel or operator), or None (a real
    NPU, where nothing is written to the ledger)."""
    from pytest_npu_lazy.cann.compute import LEDGER
    from pytest_npu_lazy.cann.compute.host_kernels import storage_range

    producer = LEDGER.last_writer(*storage_range(tensor), since=COMPILED_FROM[0])
    # under the emulation every computation is recorded: one that wrote nothing of the result is the ledger's fault,
    # and must not pass as "a real NPU"
    assert producer is not None or not LEDGER.since(COMPILED_FROM[0]), "no computation of the ledger wrote the result"
    return producer


def assert_equal_to_eager(compiled, eager, rtol=None, atol=None, equal_nan=False) -> None:
    """Compared as torch_npu's tests compare them (``assert_close``; its default tolerances unless given)."""
    import torch

    tolerances = {"rtol": rtol, "atol": atol} if rtol is not None or atol is not None else {}
    torch.testing.assert_close(compiled, eager, equal_nan=equal_nan, **tolerances)


def compile_and_compare(op, *inputs, rtol=None, atol=None, equal_nan=False):
    """compile_and_run, then assert_equal_to_eager: the compiled result."""
    compiled, eager = compile_and_run(op, *inputs)
    assert_equal_to_eager(compiled, eager, rtol=rtol, atol=atol, equal_nan=equal_nan)
    return compiled


def bits(tensor):
    """A tensor's bits as integers of its width, on the host: two results are the same bits where these are equal."""
    import torch

    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.cpu().contiguous().view(view)


def kernels_since(index: int) -> list[str]:
    """The Triton kernels Triton's interpreter ran since ledger entry ``index`` (compute mode)."""
    from pytest_npu_lazy.cann.compute import LEDGER, TRITON_INTERPRETER

    return [entry.name for entry in LEDGER.since(index) if entry.by == TRITON_INTERPRETER]
