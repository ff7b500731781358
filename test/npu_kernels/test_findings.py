"""The findings account for exactly their difference: a wrong value beside it fails instead of being xfailed.

These run on the CPU, on results made by hand, in any CANN mode: each finding's ``account`` is handed
the difference it documents (it passes) and that difference plus one wrong value (it fails, naming it).
"""

from __future__ import annotations

import pytest

import findings

pytestmark = pytest.mark.npu_lazy(preload=["torch"])


def test_an_int32_cumsum_is_taken_and_a_wrong_value_beside_it_is_not():
    import torch

    x = torch.arange(-5, 7).reshape(3, 4)
    eager = x.cumsum(-1)
    findings.account_int32_cumsum(eager.to(torch.int32), eager, (x,), None)
    wrong = eager.to(torch.int32)
    wrong[1, 2] += 1
    with pytest.raises(findings.BeyondTheFinding, match="values differ from eager's, not only its dtype: at \\[\\[1, 2\\]\\]"):
        findings.account_int32_cumsum(wrong, eager, (x,), None)
    with pytest.raises(findings.BeyondTheFinding, match="expected the compiled cumsum in int32"):
        findings.account_int32_cumsum(eager, eager, (x,), None)


@pytest.mark.parametrize("name", ["argmax", "argmin", "max_dim", "min_dim"])
def test_nan_rows_are_taken_and_a_wrong_row_without_nan_is_not(name):
    import torch

    ops = {"argmax": lambda t: t.argmax(dim=-1), "argmin": lambda t: t.argmin(dim=-1),
           "max_dim": lambda t: t.max(dim=-1), "min_dim": lambda t: t.min(dim=-1)}
    op = ops[name]
    x = torch.tensor([[1., 3., 3., 0.], [float("nan"), 2., float("nan"), -2.], [5., 5., 5., 5.]])
    eager = op(x)
    bound = float("-inf") if name in ("argmax", "max_dim") else float("inf")
    ignoring = op(torch.nan_to_num(x, nan=bound))  # the positions the NPU's tl.max / tl.min give on the NaN row
    paired = isinstance(eager, tuple)
    device = (eager[0], ignoring[1]) if paired else ignoring  # values as eager's (NaN), indices NaN-ignoring
    findings.account_nan_rows(device, eager, (x,), op)
    index = (device[1] if paired else device).clone()
    index[0] += 1  # row 0 holds no NaN: a wrong index there is not the finding
    with pytest.raises(findings.BeyondTheFinding, match="rows without NaN differ from eager \\(rows \\[0\\]\\)"):
        findings.account_nan_rows((eager[0], index) if paired else index, eager, (x,), op)
    with pytest.raises(findings.BeyondTheFinding, match="rows with NaN differ from the NaN-ignoring extremum"):
        findings.account_nan_rows(eager, eager, (x,), op)
    if paired:
        values = eager[0].clone()
        values[2] = 4.0
        with pytest.raises(findings.BeyondTheFinding, match="the compiled values differ from eager's"):
            findings.account_nan_rows((values, ignoring[1]), eager, (x,), op)


def test_rounding_once_is_taken_and_another_error_is_not():
    import torch

    torch.manual_seed(0)
    x = torch.randn(64, 17).bfloat16()
    op = lambda t: t - t.sum(dim=-1, keepdim=True)  # noqa: E731
    once = op(x.float()).bfloat16()
    findings.account_rounds_once(once, op(x), (x,), op)
    with pytest.raises(findings.BeyondTheFinding, match="not the float32 computation rounded once either"):
        findings.account_rounds_once(once * 1.05, op(x), (x,), op)
