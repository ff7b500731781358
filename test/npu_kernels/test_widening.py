"""A kernel's sub-blocks run wide give the same bits as run as launched, and the ledger says what was widened.

torch_npu's index codegen writes a kernel's block as loops over sub-blocks of ``<A>BLOCK_SUB`` elements per
axis; compute mode launches a kernel with wider sub-blocks where its source shows nothing relating two elements
along the widened axis (pytest_npu_lazy/cann/compute/widening.py; which kernels and axes are refused is
test/plugin/test_compute_widening.py). Here torch_npu's own kernels (sums along the first, a middle and the last
axis, pointwise float32 and bfloat16, var_mean) run both ways on the emulated NPU that computes: every output bit
equal, and each case did widen (two runs as launched would pass and prove nothing).
"""

from __future__ import annotations

import pytest

from testutils import MARKS, bits, kernels_since

pytestmark = MARKS


def _var(a, b):
    import torch

    return torch.var_mean(a, 1)[0] + b


#: name -> (shape, function of (a, b), b's shape from a's): each widens some launch at this shape
CASES = {
    "sum_first_dim_add": ((8, 16, 32, 1024), lambda a, b: a.sum(0) + b, lambda s: s[1:]),
    "sum_middle_dim_add": ((8, 16, 32, 1024), lambda a, b: a.sum(2) + b, lambda s: (s[0], s[1], s[3])),
    "sum_last_dim_add": ((8, 16, 32, 1024), lambda a, b: a.sum(3) + b, lambda s: s[:3]),
    "pointwise": ((256, 16384), lambda a, b: a.sin() * 2 + b, lambda s: s),
    "to_bfloat16": ((256, 16384), lambda a, b: a.bfloat16() * 3 + b.bfloat16(), lambda s: s),
    "var_mean": ((4096, 300), _var, lambda s: (s[0],)),
}


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled by torch.compiler.config.force_disable_caches")
@pytest.mark.parametrize("name", CASES)
def test_sub_blocks_run_wide_give_the_bits_of_sub_blocks_as_launched(name, monkeypatch):
    import torch

    from pytest_npu_lazy.cann.compute import LEDGER, TRITON_INTERPRETER
    from pytest_npu_lazy.cann.compute.widening import AS_LAUNCHED_ENV

    shape, fn, other = CASES[name]
    x, y = torch.randn(shape).npu(), torch.randn(other(shape)).npu()
    results, details = {}, {}
    for as_launched in ("1", "0"):
        monkeypatch.setenv(AS_LAUNCHED_ENV, as_launched)
        torch._dynamo.reset()
        start = len(LEDGER.since(0))
        results[as_launched] = torch.compile(fn, backend="inductor")(x, y)
        assert kernels_since(start), "no Triton kernel ran: nothing was compared"
        details[as_launched] = [e.detail for e in LEDGER.since(start) if e.by == TRITON_INTERPRETER]
    assert not any("sub-blocks widened" in d for d in details["1"]), details["1"]
    assert any("sub-blocks widened" in d for d in details["0"]), f"no launch widened: {details['0']}"
    same = torch.equal(bits(results["0"]), bits(results["1"]))
    assert same, f"{name}: sub-blocks run wide differ from as launched ({details['0']})"


def test_the_check_mode_runs_a_widened_launch_both_ways_and_passes_equal_bits(monkeypatch):
    """``PYTEST_NPU_LAZY_SUBBLOCKS_CHECK=1`` runs each widened launch as given and widened, from the same memory;
    equal bits pass (test/plugin/test_compute_widening.py shows a difference failing, naming the kernel)."""
    import torch

    from pytest_npu_lazy.cann.compute import LEDGER, TRITON_INTERPRETER
    from pytest_npu_lazy.cann.compute.widening import CHECK_ENV

    monkeypatch.setenv(CHECK_ENV, "1")
    x, y = torch.randn(8, 16, 32, 1024).npu(), torch.randn(16, 32, 1024).npu()
    start = len(LEDGER.since(0))
    got = torch.compile(lambda a, b: a.sum(0) + b, backend="inductor")(x, y)
    assert any("sub-blocks widened" in e.detail for e in LEDGER.since(start) if e.by == TRITON_INTERPRETER)
    torch.testing.assert_close(got, x.sum(0) + y)
