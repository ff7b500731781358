"""Which kernels may run a launch's programs together: read from their source, each refusal naming why.

``pytest_npu_lazy/cann/compute/batching.py`` merges ``k`` programs of a 1-D Inductor launch into one of
``XBLOCK * k`` rows only where nothing in the kernel relates two rows. Each kernel below is Inductor's shape
with one thing changed that could relate rows (or order programs); each must run program by program, and
say so. test/npu_kernels/test_batching.py checks the merged launches bit for bit against one by one.
"""

from __future__ import annotations

import pytest

from pytest_npu_lazy.cann.compute.batching import plan_source

PARAMETERS = ["in_out_ptr0", "in_ptr0", "in_ptr1", "out_ptr0", "xnumel", "r0_numel", "XBLOCK"]

#: torch_npu's generated persistent reduction of torch.sum(a, 3) + b (test_sum_add.py), as Inductor wrote it
PERSISTENT = '''
def triton_per_fused_add_sum_0(in_out_ptr0, in_ptr0, in_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 262144
    r0_numel = 256
    R0_BLOCK: tl.constexpr = 256
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_mask = r0_index < r0_numel
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (r0_1 + 256*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
    tmp5 = tl.load(in_ptr1 + (x0), xmask)
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
    tmp3 = tl.where(r0_mask & xmask, tmp1, 0)
    tmp4 = tl.sum(tmp3, 1)[:, None].to(tl.float32)
    tmp6 = tmp4 + tmp5
    tl.store(in_out_ptr0 + (x0), tmp6, xmask)
'''


def test_inductors_persistent_reduction_runs_its_programs_together_with_its_own_block_size_counted():
    decided = plan_source(PERSISTENT, PARAMETERS)
    assert decided.mergeable, decided.reason
    assert decided.other_block_elements == 256  # R0_BLOCK, declared inside: a merged block holds XBLOCK*k*256


def test_a_read_modify_write_of_a_rows_own_element_is_allowed():
    source = PERSISTENT.replace("tmp6 = tmp4 + tmp5", "tmp7 = tl.load(in_out_ptr0 + (x0), xmask)\n    tmp6 = tmp4 + tmp7")
    assert plan_source(source, PARAMETERS).mergeable


@pytest.mark.parametrize("change, reason", [
    (("xoffset = tl.program_id(0) * XBLOCK", "pid = tl.program_id(0)\n    xoffset = pid * XBLOCK"),
     "tl.program_id is used other than as tl.program_id(0) * XBLOCK"),
    (("tmp6 = tmp4 + tmp5", "tmp6 = tmp4 + tmp5 + tl.program_id(0)"),
     "tl.program_id is used other than as tl.program_id(0) * XBLOCK"),
    (("tmp6 = tmp4 + tmp5", "tmp6 = tmp4 + tmp5 + tl.num_programs(0)"), "num_programs: its order"),
    (("tl.store(in_out_ptr0 + (x0), tmp6, xmask)", "tl.atomic_add(in_out_ptr0 + (x0), tmp6, xmask)"),
     "atomic_add: its order is the order of programs"),
    (("tmp4 = tl.sum(tmp3, 1)", "tmp4 = tl.sum(tmp3, 0)"), "tl.sum reduces along axis 0"),
    (("tmp4 = tl.sum(tmp3, 1)", "tmp4 = tl.sum(tmp3, axis)"), "tl.sum reduces along axis ?"),
    (("tmp4 = tl.sum(tmp3, 1)", "tmp4 = triton_helpers.max2(tmp3, 0)"), "triton_helpers.max2 reduces along axis 0"),
    (("tmp4 = tl.sum(tmp3, 1)", "tmp4 = tl.cumsum(tmp3, 0)"), "tl.cumsum reduces along axis 0"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.reshape(tmp0, [R0_BLOCK, XBLOCK])"),
     "reshape could move a row's values into another row"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.trans(tmp0)"), "trans could move"),
    (("tl.store(in_out_ptr0 + (x0), tmp6, xmask)",
      "tl.store(in_out_ptr0 + (x0), tmp6, xmask)\n    tmp8 = tl.load(in_out_ptr0 + (x0 + 1), xmask)"),
     "in_out_ptr0 is loaded and stored at different offsets"),
    (("tmp6 = tmp4 + tmp5", "tmp6 = my_helper(tmp4) + tmp5"), "calls my_helper(), which this check cannot read"),
    (("tmp6 = tmp4 + tmp5", "tmp6 = other_module.fn(tmp4) + tmp5"), "calls other_module.fn"),
    (("R0_BLOCK: tl.constexpr = 256", "R0_BLOCK: tl.constexpr = 256\n    XBLOCK: tl.constexpr = 1"),
     "XBLOCK is reassigned in the kernel"),
    (("tmp5 = tl.load(in_ptr1 + (x0), xmask)", "ptr = in_ptr1 + x0\n    tmp5 = tl.load(ptr, xmask)"),
     "a load from an address that does not start at a pointer argument"),
    (("tmp6 = tmp4 + tmp5", "tl.debug_barrier()\n    tmp6 = tmp4 + tmp5"), "debug_barrier: its order"),
])
def test_anything_that_could_relate_two_rows_or_order_programs_runs_program_by_program(change, reason):
    old, new = change
    assert old in PERSISTENT
    decided = plan_source(PERSISTENT.replace(old, new), PARAMETERS)
    assert not decided.mergeable
    assert decided.reason.startswith(reason), decided.reason


def test_a_kernel_without_an_xblock_parameter_runs_as_launched():
    decided = plan_source(PERSISTENT, [p for p in PARAMETERS if p != "XBLOCK"])
    assert not decided.mergeable and decided.reason == "XBLOCK is not a parameter"
