"""A corpus that walks torch_npu's NPU codegen: first compiled calls on ``npu`` tensors against eager on the CPU.

Each test compiles through ``npu_lazy.compile``: the first call runs in phase ``first_call`` and is compared
with the same function, eager, on CPU copies of the inputs (under ``--npu-lazy-cann=compute``: ATen's CPU
kernels, never the emulation; bfloat16/float16 in float32, rounded once). The report lists the Triton kernels
the interpreter ran for each. Kinds: gathers and scatters, concatenation, looped (split) reductions, scans,
dynamic shapes, a backward pass, low-precision operators. A module whose matmuls fall back to ATen is
test/dynamo/test_first_call.py's ``test_small_module_matches_eager``, which runs on ``npu`` tensors here too.
"""

from __future__ import annotations

import pytest
from testutils import MARKS

pytestmark = MARKS


def _ops():
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)

    index = torch.tensor([[0, 3, 1, 2], [2, 2, 0, 1], [1, 0, 3, 3], [3, 1, 2, 0]])
    return {
        "gather": (lambda x, i: torch.gather(x, 1, i) * 2, [torch.randn(4, 16), index]),
        "index_select": (lambda x, i: x[i] + 1, [torch.randn(16, 8), torch.tensor([5, 0, 15, 3, 3])]),
        "embedding": (lambda w, i: F.embedding(i, w) * 2, [torch.randn(16, 8), torch.tensor([1, 7, 7, 0, 15, 2])]),
        "scatter_add": (lambda x, i: torch.zeros(4, 16, device=x.device).scatter_add(1, i, x), [torch.randn(4, 4), index]),
        "index_put": (lambda x, i, v: x.index_put((i,), v, accumulate=True),
                      [torch.zeros(8, 4), torch.tensor([1, 3, 1]), torch.ones(3, 4)]),
        "cat_three": (lambda a, b, c: torch.cat([a, b * 2, c.sin()], dim=1),
                      [torch.randn(16, 8), torch.randn(16, 4), torch.randn(16, 5)]),
        "split_sum_65536": (lambda x: x.sum(), [torch.randn(65536)]),
        "looped_rows_8192": (lambda x: x.sum(dim=-1) + x.amax(dim=-1), [torch.randn(8, 8192)]),
        "outer_max_1024": (lambda x: x.max(dim=0).values, [torch.randn(1024, 16)]),
        "welford_var_mean": (lambda x: torch.var_mean(x, dim=-1), [torch.randn(32, 300)]),
        "cumsum_float": (lambda x: x.cumsum(dim=-1) * 2, [torch.randn(8, 64)]),
        "where_mask_fill": (lambda x: x.masked_fill(x < 0, 0.0) + 1, [torch.randn(64, 32)]),
        "softmax_bf16": (lambda x: torch.softmax(x, dim=-1), [torch.randn(16, 64).bfloat16()]),
        "layer_norm_f16": (lambda x: F.layer_norm(x, (64,)), [torch.randn(16, 64).half()]),
    }


@pytest.mark.parametrize("name", ["gather", "index_select", "embedding", "scatter_add", "index_put", "cat_three",
                                  "split_sum_65536", "looped_rows_8192", "outer_max_1024", "welford_var_mean",
                                  "cumsum_float", "where_mask_fill", "softmax_bf16", "layer_norm_f16"])
def test_first_call_matches_eager(npu_lazy, name):
    fn, inputs = _ops()[name]
    compiled = npu_lazy.compile(fn, backend="inductor", **_summation_tolerance(name, inputs))
    compiled(*(x.to(npu_lazy.device) for x in inputs))


#: the long float32 sums, and how many values each adds up
LONG_SUMS = {"split_sum_65536": 65536, "looped_rows_8192": 8192}


def _summation_tolerance(name: str, inputs) -> dict:
    """A long float32 sum that a kernel adds up in another order (split, looped) than ATen's CPU kernel differs in its
    last bits: by at most about n * eps * max|x| (the worst-case bound of summation in any order), which is the
    absolute tolerance of those cases; every other case keeps assert_close's defaults."""
    if name not in LONG_SUMS:
        return {}
    import torch

    bound = LONG_SUMS[name] * torch.finfo(torch.float32).eps * float(inputs[0].abs().max())
    return {"rtol": 1.3e-6, "atol": bound}


def test_dynamic_shapes(npu_lazy):
    import torch

    compiled = npu_lazy.compile(lambda x: (x.tanh() * 2).sum(dim=-1), backend="inductor", dynamic=True)
    for rows in (5, 11, 29):
        x = torch.randn(rows, 33)
        out = compiled(x.to(npu_lazy.device))  # the first is compared by the probe; the rest here
        torch.testing.assert_close(out.cpu(), (x.tanh() * 2).sum(dim=-1))


def test_backward_pass(npu_lazy):
    import torch

    def loss(x, w):
        return (torch.sin(x) * w).sum(dim=-1).pow(2).mean()

    x, w = torch.randn(8, 32), torch.randn(32)
    device_x = x.to(npu_lazy.device).requires_grad_()
    device_w = w.to(npu_lazy.device).requires_grad_()
    compiled = npu_lazy.compile(loss, backend="inductor")
    compiled(device_x, device_w).backward()
    host_x, host_w = x.clone().requires_grad_(), w.clone().requires_grad_()
    loss(host_x, host_w).backward()
    torch.testing.assert_close(device_x.grad.cpu(), host_x.grad)
    torch.testing.assert_close(device_w.grad.cpu(), host_w.grad)
