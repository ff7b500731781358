"""A launch's programs run together give the same bits as run one by one, and the ledger says how each ran.

Compute mode merges ``k`` programs of a 1-D Inductor launch into one of ``XBLOCK * k`` rows where the
kernel's source shows nothing relating two rows (pytest_npu_lazy/cann/compute/batching.py; which kernels are
refused is test/plugin/test_compute_batching.py). Here torch_npu's own generated kernels (a persistent
reduction along the last and the first dimension, pointwise float32 and bfloat16, softmax, var_mean, amax)
run both ways on the emulated NPU that computes: every output bit equal, and each batched launch did run
merged (a comparison of two one-by-one runs would pass and prove nothing). The merge knows the kernels of
torch_npu's no-linear codegen, which a device runs wherever its index codegen's TTIR check fails; the index
codegen's kernels (2-D grids, loops over sub-blocks) run as launched. So these kernels are written by the
no-linear codegen (testutils.write_with_the_no_linear_codegen).
"""

from __future__ import annotations

import pytest

from testutils import MARKS, bits, kernels_since, write_with_the_no_linear_codegen

pytestmark = MARKS

def _var(a, b):
    import torch

    return torch.var_mean(a, 1)[0] + b


CASES = {
    "sum_last_dim_add": ((32, 64, 8, 256), lambda a, b: a.sum(3) + b, lambda s: (s[0], s[1], s[2])),
    "sum_first_dim_add": ((32, 64, 8, 256), lambda a, b: a.sum(0) + b, lambda s: s[1:]),
    "pointwise": ((64, 4096), lambda a, b: (a.sin() * 2 + b), lambda s: s),
    "to_bfloat16": ((64, 4096), lambda a, b: (a.bfloat16() * 3 + b.bfloat16()), lambda s: s),
    "amax": ((4096, 96), lambda a, b: a.amax(1) + b, lambda s: (s[0],)),
    "softmax": ((2048, 200), lambda a, b: a.softmax(-1) * b[:, None], lambda s: (s[0],)),
    "var_mean": ((1024, 300), _var, lambda s: (s[0],)),
}


@pytest.mark.parametrize("name", CASES)
def test_programs_run_together_give_the_bits_of_programs_run_one_by_one(name, monkeypatch):
    import torch

    from pytest_npu_lazy.cann.compute import LEDGER, TRITON_INTERPRETER
    from pytest_npu_lazy.cann.compute.batching import ONE_BY_ONE_ENV
    write_with_the_no_linear_codegen(monkeypatch)  # the kernels these fast paths know (module docstring)

    shape, fn, other = CASES[name]
    x, y = torch.randn(shape).npu(), torch.randn(other(shape)).npu()
    results, details = {}, {}
    for schedule in ("1", "0"):
        monkeypatch.setenv(ONE_BY_ONE_ENV, schedule)
        torch._dynamo.reset()
        start = len(LEDGER.since(0))
        results[schedule] = torch.compile(fn, backend="inductor")(x, y)
        assert kernels_since(start), "no Triton kernel ran: nothing was compared"
        details[schedule] = [e.detail for e in LEDGER.since(start) if e.by == TRITON_INTERPRETER]
    assert all("programs one by one" in d for d in details["1"]), details["1"]
    assert any(" at a time (" in d for d in details["0"]), f"no launch ran merged: {details['0']}"
    same = torch.equal(bits(results["0"]), bits(results["1"]))
    assert same, f"{name}: programs run together differ from one by one ({details['0']})"
