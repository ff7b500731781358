"""Which reduction loops may run their iterations together: read from the kernel's source, each refusal naming why.

``pytest_npu_lazy/cann/compute/loops.py`` runs ``L`` iterations of an Inductor reduction loop as one wide chunk
only where the loop's body is lane by lane and every value carried between iterations is a sum folded as
Inductor folds one. Each kernel below is Inductor's looped sum with one thing changed that would make the wide
chunk compute something else; each must keep its loop, and say why. test/npu_kernels/test_loops.py checks the
folded loops bit for bit against the loop run iteration by iteration.
"""

from __future__ import annotations

import ast

import pytest

from pytest_npu_lazy.cann.compute.loops import FOLD, WIDTH, fold_loops

#: torch_npu's generated kernel of torch.sum(x) over a 1-d tensor with a dynamic size (test_sum.py), as written
LOOPED = '''
def triton_red_fused_sum_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 1
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    _tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_0 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        tmp3 = _tmp2 + tmp1
        _tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)
    tmp2 = tl.sum(_tmp2, 1)[:, None]
    tl.store(out_ptr0 + (tl.full([1, 1], 0, tl.int32).broadcast_to(XBLOCK, 1)), tmp2, None)
'''


def _decide(source: str) -> tuple[list[str], ast.FunctionDef]:
    function = ast.parse(source.strip("\n")).body[0]
    return fold_loops(function), function


def test_inductors_looped_sum_folds_its_iterations_and_keeps_the_loop_beside_the_wide_one():
    said, function = _decide(LOOPED)
    assert said == ["loop over r0_offset: iterations together"]
    text = ast.unparse(function)
    assert f"R0_BLOCK__wide: tl.constexpr = {WIDTH}(r0_numel, R0_BLOCK, 'r0_offset', _tmp2)" in text
    assert "r0_base__wide = tl.arange(0, R0_BLOCK__wide)[None, :]" in text  # the lane index, remade wide
    assert "r0_index = r0_offset + r0_base__wide" in text
    assert "tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK__wide])" in text
    assert f"_tmp2 = {FOLD}(_tmp2, tmp1, r0_mask & xmask, R0_BLOCK, R0_BLOCK__wide)" in text
    assert "tmp3 = _tmp2 + tmp1" in text and "_tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)" in text  # the original
    compile(ast.fix_missing_locations(ast.Module([function], [])), "kernel", "exec")


def test_a_sum_without_a_mask_folds_too():
    said, _ = _decide(LOOPED.replace("_tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)", "_tmp2 = tmp3"))
    assert said == ["loop over r0_offset: iterations together"]


@pytest.mark.parametrize("change, reason", [
    (("tl.load(in_ptr0 + (r0_0), r0_mask, eviction_policy='evict_first', other=0.0)",
      "tl.load(in_ptr0 + (r0_0), r0_mask, eviction_policy='evict_first', other=0.0)\n        "
      "tl.store(out_ptr0 + (r0_0), tmp0, r0_mask)"), "it stores inside the loop"),
    (("tmp3 = _tmp2 + tmp1", "tmp3 = tmp1 + _tmp2"), "_tmp2 is carried from one iteration to the next other than as a sum"),
    (("tmp3 = _tmp2 + tmp1", "tmp3 = triton_helpers.maximum(_tmp2, tmp1)"), "other than as a sum acc + value"),
    (("tmp3 = _tmp2 + tmp1", "tmp3 = _tmp2 * tmp1"), "other than as a sum acc + value"),
    (("tmp3 = _tmp2 + tmp1", "tmp3 = _tmp2 + tmp1 + _tmp2"), "other than as a sum acc + value"),
    (("_tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)", "_tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)\n        tmp9 = tmp3"),
     "is read in the loop other than to fold it"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK]) + _tmp2"),
     "is read in the loop other than to fold it"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.cumsum(tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK]), 1)"),
     "tl.cumsum reduces inside the loop"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.broadcast_to(tmp0 * (r0_offset // R0_BLOCK), [XBLOCK, R0_BLOCK])"),
     "R0_BLOCK is used in the loop other than as the chunk's size"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.broadcast_to(tmp0 * RBLOCK, [XBLOCK, R0_BLOCK])"),
     "R0_BLOCK is used in the loop other than as the chunk's size"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK]) "
      "* tl.full([XBLOCK, R0_BLOCK], R0_BLOCK, tl.float32)"), "R0_BLOCK is used in the loop other than as the chunk's size"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK]) "
      "+ tl.arange(R0_BLOCK, 2 * R0_BLOCK)[None, :]"), "R0_BLOCK is used in the loop other than as the chunk's size"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.broadcast_to(tmp0, shape=[XBLOCK, R0_BLOCK])"),
     None),  # a size by keyword: still a size
    (("roffset = r0_offset", "roffset = r0_offset == 0"), "the loop's offset r0_offset is used other than added"),
    (("tmp2 = tl.sum(_tmp2, 1)[:, None]", "tmp2 = tl.sum(_tmp2, 1)[:, None] + tl.sum(tmp1, 1)[:, None]"),
     "tmp1, computed in the loop, is read after it"),
    (("_tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)",
      "_tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)\n    first = tl.load(in_ptr0 + r0_base)"),
     None),  # made but not read in the loop: still folds
    (("_tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)",
      "_tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)\n    first = tl.load(in_ptr0 + r0_base)"
      ), None),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.broadcast_to(tmp0 + first, [XBLOCK, R0_BLOCK])"),
     "first, made before the loop, has the chunk's shape"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.broadcast_to(helper(tmp0), [XBLOCK, R0_BLOCK])"),
     "it calls helper(), which this check cannot read"),
    # what a review found accepted and computing something else wide (each refused now, naming why)
    (("        tmp3 = _tmp2 + tmp1\n", "        tmp3 = _tmp2 + tmp1\n        tmp1 = tmp1 * 2.0\n"),
     "what tmp3 adds is assigned again before _tmp2 takes it"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])",
      "w = tl.load(in_ptr0 + r0_base)\n        tmp1 = tl.broadcast_to(tmp0 * w, [XBLOCK, R0_BLOCK])"),
     "the lane index r0_base is used other than added to the loop's offset"),
    (("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])",
      "tmp1 = tl.broadcast_to(tmp0 + tl.arange(0, R0_BLOCK)[None, :].to(tl.float32), [XBLOCK, R0_BLOCK])"),
     "R0_BLOCK is used in the loop other than as the chunk's size"),
    (("r0_base = tl.arange(0, R0_BLOCK)[None, :]", "r0_base = tl.arange(0, R0_BLOCK)[None, :] * 2"),
     "r0_base, made before the loop, has the chunk's shape"),
    (("r0_base = tl.arange(0, R0_BLOCK)[None, :]", "r0_base = tl.full([1, R0_BLOCK], 0, tl.int32)"),
     "r0_base, made before the loop, has the chunk's shape"),
    (("r0_base = tl.arange(0, R0_BLOCK)[None, :]", "r0_base = tl.arange(0, R0_BLOCK)[:, None]"),
     "r0_base, made before the loop, has the chunk's shape"),  # the lanes along the first axis
    (("        roffset = r0_offset\n", "        roffset = r0_offset\n        ro2 = roffset\n        ro3 = ro2 * 1\n"),
     "the loop's offset ro2 is used other than added to a lane index"),
    (("tmp2 = tl.sum(_tmp2, 1)[:, None]", "tmp2 = tl.sum(_tmp2, 1)[:, None] + r0_offset"),
     "r0_offset, computed in the loop, is read after it"),
    (("tmp2 = tl.sum(_tmp2, 1)[:, None]", "if r0_numel < 0:\n        tmp1 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)\n"
      "    tmp2 = tl.sum(_tmp2, 1)[:, None] + tl.sum(tmp1, 1)[:, None]"), "tmp1, computed in the loop, is read after it"),
    (("    rbase = r0_base\n", "    rbase = r0_base\n    r0_base = 0\n"), "rbase, made before the loop"),
    (("    _tmp2 = tl.full(", "    first, _unused = tl.load(in_ptr0 + r0_base), 0\n    _tmp2 = tl.full("), None),
    (("    _tmp2 = tl.full(", "    c = tl.cumsum(tl.load(in_ptr0 + r0_base), 1)\n    _tmp2 = tl.full("), None),
    (("for r0_offset in tl.range(0, r0_numel, R0_BLOCK):", "for r0_offset in tl.range(0, r0_numel, 8):"),
     "not a loop tl.range(0, numel, BLOCK) over a block-size parameter"),
    (("for r0_offset in tl.range(0, r0_numel, R0_BLOCK):", "for r0_offset in tl.range(1, r0_numel, R0_BLOCK):"),
     "not a loop tl.range(0, numel, BLOCK)"),
    (("        tmp3 = _tmp2 + tmp1", "        if roffset:\n            tmp0 = tmp0 * 2\n        tmp3 = _tmp2 + tmp1"),
     "a If statement in the loop"),
])
def test_a_loop_that_would_compute_something_else_wide_keeps_its_iterations(change, reason):
    old, new = change
    assert old in LOOPED, old
    source = LOOPED.replace(old, new)
    if "    r0_base = 0\n" in new:  # read through the alias, whose lane index was made again
        source = source.replace("r0_index = r0_offset + r0_base", "r0_index = r0_offset + rbase")
    if "first, _unused" in new or "c = tl.cumsum" in new:  # a chunk-shaped value a tuple or a scan made, read in the loop
        read = "first" if "first" in new else "c"
        source = source.replace("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])",
                                f"tmp1 = tl.broadcast_to(tmp0 + {read}, [XBLOCK, R0_BLOCK])")
        reason = f"{read}, made before the loop, has the chunk's shape"
    if "tmp0 + first" in new:
        source = source.replace("    _tmp2 = tl.full(", "    first = tl.load(in_ptr0 + r0_base)\n    _tmp2 = tl.full(")
    assert source != LOOPED
    said, function = _decide(source)
    if reason is None:
        assert said == ["loop over r0_offset: iterations together"]
        return
    assert len(said) == 1 and reason in said[0], said
    assert FOLD not in ast.unparse(function) and WIDTH not in ast.unparse(function)


#: a looped softmax's two reductions: the max (not a sum: kept) and the sum of exp(x - max), which folds though it
#: reads the max computed after the first loop (a row's value, reduced along the chunk: no chunk-shaped axis)
TWO_LOOPS = '''
def triton_red_fused__softmax_0(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    x0 = xindex
    _tmp2 = tl.full([XBLOCK, R0_BLOCK], float("-inf"), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        tmp0 = tl.load(in_ptr0 + (r0_index + r0_numel*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
        tmp3 = triton_helpers.maximum(_tmp2, tmp1)
        _tmp2 = tl.where(r0_mask & xmask, tmp3, _tmp2)
    tmp2 = triton_helpers.max2(_tmp2, 1)[:, None]
    _tmp8 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        tmp4 = tl.load(in_ptr0 + (r0_index + r0_numel*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp5 = tmp4 - tmp2
        tmp6 = tl_math.exp(tmp5)
        tmp7 = tl.broadcast_to(tmp6, [XBLOCK, R0_BLOCK])
        tmp9 = _tmp8 + tmp7
        _tmp8 = tl.where(r0_mask & xmask, tmp9, _tmp8)
    tmp8 = tl.sum(_tmp8, 1)[:, None]
    tl.store(out_ptr2 + (x0), tmp8, xmask)
'''


def test_of_two_loops_the_sum_folds_and_the_max_keeps_its_iterations():
    said, function = _decide(TWO_LOOPS)
    assert said == ["loop over r0_offset: _tmp2 is carried from one iteration to the next other than as a sum acc + value",
                    "loop over r0_offset: iterations together"]
    assert f"_tmp8 = {FOLD}(_tmp8, tmp7, r0_mask & xmask, R0_BLOCK, R0_BLOCK__wide)" in ast.unparse(function)


def test_a_value_of_the_first_loops_chunk_shape_read_in_the_second_keeps_its_iterations():
    source = TWO_LOOPS.replace("tmp5 = tmp4 - tmp2", "tmp5 = tmp4 - _tmp2")
    said, _ = _decide(source)
    assert said[1] == "loop over r0_offset: _tmp2, made before the loop, has the chunk's shape"


def test_a_value_of_the_chunks_size_reduced_before_the_loop_is_read_as_it_was():
    """``n = tl.sum(tl.full([1, R0_BLOCK], 1.0), 1)`` is the narrow chunk's size: not remade wide (only lane indices
    are), so the wide loop divides by what the original divides by."""
    source = LOOPED.replace("    rbase = r0_base\n", "    rbase = r0_base\n    n = tl.sum(tl.full([1, R0_BLOCK], 1.0, tl.float32), 1)[:, None]\n")
    source = source.replace("tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])", "tmp1 = tl.broadcast_to(tmp0 / n, [XBLOCK, R0_BLOCK])")
    said, function = _decide(source)
    assert said == ["loop over r0_offset: iterations together"]
    text = ast.unparse(function)
    assert "n__wide" not in text and "tmp1 = tl.broadcast_to(tmp0 / n, [XBLOCK, R0_BLOCK__wide])" in text


#: torch_npu's index codegen's kernel of the same sum (test_sum.py's dynamic case), as written
INDEX_LOOPED = '''
def triton_red_fused_sum_0(in_ptr0, out_ptr0, r0_numel, R0BLOCK_SUB : tl.constexpr):
    base_r0= tl.arange(0, R0BLOCK_SUB)
    loops_r0 = (r0_numel + R0BLOCK_SUB - 1) // R0BLOCK_SUB
    _tmp2 = tl.full([R0BLOCK_SUB], 0, tl.float32)
    for loop_r0 in range(loops_r0):
        r0 = (loop_r0 * R0BLOCK_SUB) + base_r0
        r0_mask = r0 < r0_numel
        tmp0 = tl.load(in_ptr0 + (r0), r0_mask, other=0.0)
        tmp1 = tl.reshape(tmp0, [R0BLOCK_SUB])
        tmp3 = _tmp2 + tmp1
        _tmp2 = tl.where((r0_mask).reshape([R0BLOCK_SUB]), tmp3, _tmp2)
    tmp2 = triton_helpers.promote_to_tensor(tl.sum(_tmp2, 0))
    tl.store(out_ptr0 + (tl.arange(0,1) ), tmp2, None)
'''


def test_the_index_codegens_loop_over_chunks_is_read_as_inductors_and_folds():
    said, function = _decide(INDEX_LOOPED)
    assert said == ["loop over loop_r0: iterations together"]
    text = ast.unparse(function)
    assert "for loop_r0__offset in range(0, r0_numel, R0BLOCK_SUB__wide):" in text
    assert "r0 = loop_r0__offset + base_r0__wide" in text
    assert "tmp1 = tl.reshape(tmp0, [R0BLOCK_SUB__wide])" in text
    assert f"_tmp2 = {FOLD}(_tmp2, tmp1, r0_mask.reshape([R0BLOCK_SUB__wide]), R0BLOCK_SUB, R0BLOCK_SUB__wide)" in text
    compile(ast.fix_missing_locations(ast.Module([function], [])), "kernel", "exec")


@pytest.mark.parametrize("change,reason", [
    # the counter read beside i * STEP: not only an offset
    (("tmp3 = _tmp2 + tmp1", "tmp3 = _tmp2 + tmp1 * loop_r0"), "not a loop tl.range(0, numel, BLOCK)"),
    # the count made of a size assigned again before the loop: range(0, NUMEL, STEP) would count other iterations
    (("    _tmp2 = tl.full", "    r0_numel = r0_numel * 2\n    _tmp2 = tl.full"), "not a loop tl.range(0, numel, BLOCK)"),
    # a reshape to two axes moves elements between the chunk's lanes
    (("tl.reshape(tmp0, [R0BLOCK_SUB])", "tl.reshape(tmp0, [1, R0BLOCK_SUB])"), "reshape inside the loop"),
    # a count that is not the ceiling of NUMEL / STEP
    (("(r0_numel + R0BLOCK_SUB - 1) // R0BLOCK_SUB", "(r0_numel + R0BLOCK_SUB) // R0BLOCK_SUB"),
     "not a loop tl.range(0, numel, BLOCK)"),
    # the counter assigned in the loop: each iteration would read another chunk than it did
    (("        r0 = (loop_r0", "        loop_r0 = 0\n        r0 = (loop_r0"), "not a loop tl.range(0, numel, BLOCK)"),
    # the counter read after the loop: the form read would not define it
    (("    tmp2 = triton_helpers", "    last = loop_r0\n    tmp2 = triton_helpers"), "not a loop tl.range(0, numel, BLOCK)"),
])
def test_an_index_codegen_loop_that_is_not_inductors_keeps_its_iterations(change, reason):
    said, _ = _decide(INDEX_LOOPED.replace(*change))
    assert len(said) == 1 and reason in said[0] and "together" not in said[0], said


def test_a_block_size_the_kernel_sets_itself_keeps_a_value_of_its_shape_out_of_the_loop():
    """``R0BLOCK_SUB: tl.constexpr = 8`` is a block size as a parameter is: a value made before the loop with the
    chunk's shape and read in it refuses the fold either way (it could not be made wide)."""
    as_parameter = INDEX_LOOPED.replace("    _tmp2 = tl.full", "    w = tl.full([R0BLOCK_SUB], 2.0, tl.float32)\n"
                                        "    _tmp2 = tl.full").replace("tmp1 = tl.reshape(tmp0,", "tmp1 = w * tl.reshape(tmp0,")
    as_constexpr = as_parameter.replace(", R0BLOCK_SUB : tl.constexpr):", "):\n    R0BLOCK_SUB: tl.constexpr = 8")
    for source in (as_parameter, as_constexpr):
        said, _ = _decide(source)
        assert said == ["loop over loop_r0: w, made before the loop, has the chunk's shape"], said
    said, _ = _decide(INDEX_LOOPED.replace(", R0BLOCK_SUB : tl.constexpr):", "):\n    R0BLOCK_SUB: tl.constexpr = 8"))
    assert said == ["loop over loop_r0: iterations together"], said
