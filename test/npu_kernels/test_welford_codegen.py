"""The kernel torch_npu's Welford switch writes: the vectorised SIMD Welford reduction, from its index codegen.

``TORCHINDUCTOR_ENABLE_WELFORD=1`` (``npu_config.enable_welford``) makes torch_npu's index codegen
(``NPUIndexTritonKernel._select_vectorized_welford_axis``) vectorise a persistent, static Welford reduction along the
split axis nearest to it, and write the epilogue after the reduction into buffers of its own
(``_activate_post_reduction_codegen``), reusing the values loaded before it where nothing the kernel mutates is read
on both sides. Both are invisible in values: where the index codegen raises, torch_npu's ``NPUCombinedScheduling``
logs it at debug level and writes the kernel again with its no-linear codegen, whose values are also eager's. So
values alone cannot tell a broken vectorisation from a working one (the mutation record's survivors said so). These
tests read what torch_npu's own ``test/_inductor/test_var_mean.py`` reads: the kernel's text and ``inductor_meta``,
and, beyond it, that the index codegen wrote every kernel (no silent fallback), each with the values compared to
eager's. On a device they run as written; under ``--npu-lazy-cann=compute`` the kernels run in Triton's interpreter.
"""

from __future__ import annotations

import pytest
from testutils import MARKS, assert_equal_to_eager, generate_tensor

pytestmark = [*MARKS, pytest.mark.filterwarnings(  # the caches are off: their keys omit the switch
    "ignore:dynamo_pgo force disabled by torch.compiler.config.force_disable_caches")]

VECTORISED = "'vectorized_welford_axis':"


def _compile(fn, *inputs, welford: bool, monkeypatch, dynamic: bool = False, options: dict | None = None):
    """``fn`` compiled with torch_npu's Welford switch as given: its outputs, eager's, the generated code, and what
    the index codegen raised, kernel by kernel, where torch_npu then wrote the kernel with its no-linear codegen
    (each one a silent fallback)."""
    import torch
    from torch._inductor.utils import run_and_get_code
    from torch_npu._inductor import config as npu_config
    from torch_npu._inductor.codegen import scheduling

    monkeypatch.setattr(npu_config, "enable_welford", welford)
    monkeypatch.setattr(torch._inductor.config, "force_disable_caches", True)  # the cache keys omit the switch
    fallbacks: list[str] = []
    index_codegen = scheduling.NPUTritonScheduling.codegen_node

    def codegen_node(self, node):
        try:
            return index_codegen(self, node)
        except Exception as exc:  # torch_npu's NPUCombinedScheduling catches it and falls back
            said = (str(exc).splitlines() or [repr(exc)])[-1]  # a bare assert says nothing: its repr then
            fallbacks.append(f"{node.get_name()}: {type(exc).__name__}: {said}")
            raise

    monkeypatch.setattr(scheduling.NPUTritonScheduling, "codegen_node", codegen_node)
    torch._dynamo.reset()
    eager = fn(*inputs)
    compiled = torch.compile(fn, backend="inductor", dynamic=dynamic,
                             options={"unroll_reductions_threshold": 1, **(options or {})})
    actual, codes = run_and_get_code(compiled, *inputs)
    return actual, eager, "\n".join(codes), fallbacks


def _kernels(code: str) -> list[str]:
    """Each Triton kernel in ``code`` as written: its decorator with ``triton_meta`` and ``inductor_meta`` (the
    kernel type torch_npu chose among them) and its source, up to the end of the string that holds it."""
    import re

    return re.findall(r"\n(@triton_heuristics\..*?)\n''', device_str", code, re.S)


def _permuted_layer_norm(x, weight, bias):
    """torch_npu's test_welford_simd_codegen's function (its shape scaled down): rows of 64 over a permuted view,
    so the kernel has a split axis (x1) beside the reduction."""
    import torch.nn.functional as F

    rows, _, split, _ = x.shape
    return F.layer_norm(x.permute(0, 2, 1, 3).contiguous().view(rows, split, 64), (64,), weight, bias, 1e-6)


def _layer_norm_inputs():
    return (generate_tensor((6, 8, 20, 8), "float32"), generate_tensor((64,), "float32"),
            generate_tensor((64,), "float32"))


def _produced_layer_norm(x, weight, bias):
    """The permuted layer_norm of a pointwise chain: the chain is the reduction's producer, and the normalisation
    after the reduction reads it again."""
    return _permuted_layer_norm(x.sin() * 3 + 1, weight, bias)


#: the functions a vectorised Welford kernel computes, each with the outputs its kernel stores
VECTORISED_CASES = {"layer_norm": (_permuted_layer_norm, 1), "produced": (_produced_layer_norm, 1)}


@pytest.mark.parametrize("case", list(VECTORISED_CASES))
def test_the_switch_vectorises_a_static_welford_reduction(case, monkeypatch, tmp_path):
    """torch_npu's test_welford_simd_codegen's reading of the kernel: the split axis x1 vectorised (its own loop and
    sub-block), a float32 accumulator of one column per row, the reduction over axis 1 kept, a SIMD kernel whose
    ``inductor_meta`` names the vectorised axis, no loop over the reduction, no count accumulator, and the input
    loaded once; the normalisation after the reduction. Beyond it: each output stored once, the epilogue's own
    loads (weight, bias) written after the reduction (its buffers of their own), the producer chain before it
    computed once (a full static reduction reuses it: ``enable_welford_post_reduction_reuse``), the index codegen
    writing every kernel, and the values eager's."""
    fn, outputs = VECTORISED_CASES[case]
    actual, eager, code, fallbacks = _compile(fn, *_layer_norm_inputs(), welford=True, monkeypatch=monkeypatch,
                                              options={"aggressive_fusion": True})
    (tmp_path / "code.py").write_text(code)
    assert not fallbacks, f"the index codegen raised for {fallbacks}: torch_npu wrote them with its no-linear codegen"
    assert_equal_to_eager(actual, eager)
    for present in ("for x1_loop_offset in range(", "X1BLOCK_SUB", "_acc_sum = tl.zeros([", ", 1], tl.float32)",
                    "axis=1, keep_dims=True", "npu_kernel_type': 'simd'", VECTORISED, "_mask = True"):
        assert present in code, f"{present!r} is not in the Welford kernel"
    for absent in ("for loop_r", "_acc_count = tl.zeros", "_acc_count += tl.where"):
        assert absent not in code, f"{absent!r} is in the Welford kernel"
    assert code.count("tl.load(in_ptr0") == 1, "the epilogue loads the input again instead of reusing it"
    assert code.count("tl.store(") == outputs, f"not each of the {outputs} outputs is stored exactly once"
    reduction = code.index("axis=1, keep_dims=True")
    rsqrts = [code.index(marker) for marker in (" = tl.rsqrt(", " = libdevice.rsqrt(") if marker in code]
    assert rsqrts, "the Welford kernel computes no reciprocal square root"
    rsqrt = min(rsqrts)
    assert reduction < rsqrt, "the normalisation is not after the reduction"
    for pointer, what in (("in_ptr1", "weight"), ("in_ptr2", "bias")):
        assert reduction < code.index(f"tl.load({pointer}"), f"the epilogue's {what} is loaded before the reduction"
    if case != "layer_norm":
        assert code.count("tl_math.sin(") == 1, "the epilogue computes the producer chain again"


def _var_mean(x):
    import torch

    return torch.var_mean(x, dim=-1)


#: what torch_npu's index codegen raises, on purpose, for a Welford reduction it does not vectorise: such a kernel is
#: the no-linear codegen's by design (``NPUIndexTritonKernel.reduction``'s loop path, "a safety net")
LOOP_PATH_REFUSAL = "welford_reduction in NPUIndexTritonKernel loop path not expected"

#: case -> (function, inputs, switch on, dynamic, what the index codegen must raise: None for nothing)
UNVECTORISED = {
    "switch_off": (_permuted_layer_norm, _layer_norm_inputs, False, False, None),  # torch_npu's ..._disabled
    "dynamic_length": (_var_mean, lambda: (generate_tensor((16, 48), "float32"),), True, True, LOOP_PATH_REFUSAL),
    # longer than 8192: not persistent on an Ascend 950 either, whose persistent Welford reductions reach 8192
    "looped": (_var_mean, lambda: (generate_tensor((4, 10000), "float32"),), True, False, LOOP_PATH_REFUSAL),
    # not a Welford reduction: a persistent sum and a softmax under the switch
    "sum": (lambda t: t.sum(-1), lambda: (generate_tensor((32, 64), "float32"),), True, False, None),
    "softmax": (lambda t: t.softmax(-1), lambda: (generate_tensor((32, 64), "float32"),), True, False, None),
}


@pytest.mark.parametrize("case", list(UNVECTORISED))
def test_where_the_switch_does_not_vectorise(case, monkeypatch):
    """With the switch off (torch_npu's test_welford_simd_codegen_disabled) the index codegen writes the layer_norm
    without a vectorised axis. With it on, a Welford reduction it does not vectorise (its length known only at run
    time; too long for one tile, so not persistent) takes the index codegen's loop path, which refuses it on purpose,
    and the no-linear codegen writes it: exactly that refusal, nothing else raised. A reduction that is not Welford's
    (a sum, a softmax) is the index codegen's as ever, unvectorised, the same kernel as with the switch off. The
    values eager's."""
    fn, inputs, welford, dynamic, refusal = UNVECTORISED[case]
    actual, eager, code, fallbacks = _compile(fn, *inputs(), welford=welford, monkeypatch=monkeypatch,
                                              dynamic=dynamic)
    assert_equal_to_eager(actual, eager)
    if refusal is None:
        assert not fallbacks, f"the index codegen raised for {fallbacks}: torch_npu wrote them with its no-linear codegen"
    else:
        assert fallbacks and all(fallback.endswith(refusal) for fallback in fallbacks), (
            f"expected the index codegen's loop path to refuse the Welford reduction ({refusal!r}), got {fallbacks}")
        assert "welford" in code, "the switch took no Welford reduction at all"
    assert VECTORISED not in code, "the Welford reduction was vectorised"
    for vectorised in ("_loop_offset in range(", "_acc_sum = tl.zeros"):  # inductor_meta says it of static ones only
        assert vectorised not in code, f"{vectorised!r}: the Welford reduction was vectorised"
    if refusal is None and welford:  # no Welford reduction: the switch must leave the kernel as it was
        _, _, without, _ = _compile(fn, *inputs(), welford=False, monkeypatch=monkeypatch, dynamic=dynamic)
        assert _kernels(code) and _kernels(code) == _kernels(without), (
            "the Welford switch changed a kernel without a Welford reduction")


def test_a_dynamic_layer_norm_falls_back_to_the_no_linear_codegen(monkeypatch):
    """A finding, pinned: with the switch on and the reduction length dynamic, torch_npu's index codegen writes the
    permuted layer_norm's kernel with an epilogue that reads a value its loop body never defined (``tmpN is not
    defined``, from Triton's frontend in the TTIR check, before any device compiler runs), so torch_npu writes it
    again with its no-linear codegen: the values are eager's, the kernel is not the index codegen's. Strict: where the
    index codegen writes it, this fails, and the case belongs to test_where_the_switch_does_not_vectorise."""
    actual, eager, code, fallbacks = _compile(_permuted_layer_norm, *_layer_norm_inputs(), welford=True,
                                              monkeypatch=monkeypatch, dynamic=True)
    assert_equal_to_eager(actual, eager)
    assert fallbacks, "the index codegen wrote the dynamic layer_norm's kernel: torch_npu fixed it"
    assert all("is not defined" in fallback for fallback in fallbacks), fallbacks



def _rows_produced_and_returned(x, weight, bias):
    """A layer_norm over rows of a pointwise chain that is returned too: one kernel stores the chain before the
    reduction and the normalisation after it."""
    import torch.nn.functional as F

    produced = x.sin() * 3 + 1
    return produced, F.layer_norm(produced, x.shape[-1:], weight, bias, 1e-6)


def test_a_store_before_the_reduction_is_kept(monkeypatch):
    """The Welford epilogue's own buffers (loads, compute, stores after the reduction) are swapped in only once the
    reduction is done; what the kernel stored before it (a returned producer) stays where it was: both outputs are
    stored, once each, in the one vectorised kernel, and equal eager's."""
    inputs = (generate_tensor((32, 64), "float32"), generate_tensor((64,), "float32"), generate_tensor((64,), "float32"))
    actual, eager, code, fallbacks = _compile(_rows_produced_and_returned, *inputs, welford=True, monkeypatch=monkeypatch)
    assert not fallbacks, f"the index codegen raised for {fallbacks}: torch_npu wrote them with its no-linear codegen"
    assert_equal_to_eager(actual, eager)
    kernels = _kernels(code)
    assert len(kernels) == 1 and VECTORISED in kernels[0], "not one vectorised Welford kernel"
    assert kernels[0].count("tl.store(") == 2, "not each of the two outputs is stored exactly once"
