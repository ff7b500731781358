"""Which of torch_npu's lowerings compile an operator on the emulated NPU's chip, and which only on another.

The emulated NPU is an Ascend 910B3. On it torch_npu 2.13.0 sends the operators that read or write memory
through indices (gather, embedding, index, index_put, scatter, scatter_reduce, and cat of several tensors) to
ATen: ``torch_npu/_inductor/config.py`` leaves ``inductor_indirect_memory_mode`` at None unless the chip is an
Ascend 950, and ``lowering_fallback_list.py`` then adds ``INDIRECT_MEM_FALLBACK_LIST`` to the fallbacks. Their NPU
lowerings in ``lowering.py`` run only on a 950, and the mutation record (test/npu_kernels/mutation.toml) argues
their mutants device-only on that ground, block by block. These tests pin the ground: if a torch_npu release
lowers one of them on a 910B, its test here fails and those verdicts must be taken back and the mutants run.

Each case is compared with eager too, and its result must have been written by the host's ATen operator named,
or by a Triton kernel (under ``--npu-lazy-cann=compute`` the ledger says what last wrote each output's memory; on a
real NPU nothing is recorded and only the values are compared).
"""

from __future__ import annotations

import pytest
from pytest_npu_lazy.cann.compute.ledger import HOST_ATEN, TRITON_INTERPRETER
from testutils import (COMPILED_FROM, MARKS, assert_equal_to_eager, compile_and_compare, compile_and_run,
                       computed_by_the_compiled_call, producer_of)

pytestmark = MARKS


def _t():
    import torch

    return torch


def _index():
    return _t().tensor([[0, 3, 1, 2], [2, 2, 0, 1], [1, 0, 3, 3], [3, 1, 2, 0]]).npu()


def _permutations():
    """One permutation per row: a scatter writes each place once (with repeats its result is the device's choice)."""
    return _t().tensor([[0, 3, 1, 2], [2, 1, 0, 3], [1, 0, 3, 2], [3, 1, 2, 0]]).npu()


#: name -> (the compiled function, its inputs (made on the NPU), the host ATen operator that must compute it)
INDIRECT = {
    "gather": (lambda x, i: _t().gather(x, 1, i), lambda: [_t().randn(4, 16).npu(), _index()], "gather"),
    "embedding": (lambda w, i: _t().nn.functional.embedding(i, w),
                  lambda: [_t().randn(16, 8).npu(), _t().tensor([1, 7, 7, 0, 15, 2]).npu()], "embedding"),
    "index": (lambda x, i: x[i], lambda: [_t().randn(16, 8).npu(), _t().tensor([5, 0, 15, 3, 3]).npu()], "index"),
    "index_put": (lambda x, i, v: x.index_put((i,), v, accumulate=True),
                  lambda: [_t().zeros(8, 4).npu(), _t().tensor([1, 3, 1]).npu(), _t().ones(3, 4).npu()], "index_put"),
    "scatter": (lambda x, i, s: x.scatter(1, i, s),
                lambda: [_t().zeros(4, 16).npu(), _permutations(), _t().randn(4, 4).npu()], "scatter"),
    "scatter_reduce": (lambda x, i, s: x.scatter_reduce(1, i, s, "amax"),
                       lambda: [_t().zeros(4, 16).npu(), _index(), _t().randn(4, 4).npu()], "scatter_reduce"),
    "cat": (lambda a, b: _t().cat([a, b], dim=1), lambda: [_t().randn(16, 8).npu(), _t().randn(16, 4).npu()], "cat"),
    # torch_npu's cat lowering sends int8 inputs to Inductor's own cat only when they are on the CPU
    "cat_int8": (lambda a, b: _t().cat([a, b], dim=0),
                 lambda: [_t().randint(-9, 9, (8, 16), dtype=_t().int8).npu(),
                          _t().randint(-9, 9, (4, 16), dtype=_t().int8).npu()], "cat"),
}


def test_the_emulated_chip_is_not_an_ascend_950():
    """The ground of every case below: torch_npu reads the emulated chip as a 910B, not a 950."""
    import os

    from pytest_npu_lazy.cann.common import ENV_MODE
    from torch_npu._inductor import config

    if os.environ.get(ENV_MODE) != "compute":
        pytest.skip("needs the emulated NPU (--npu-lazy-cann=compute): a real NPU is whatever chip it is")

    assert not config.is_ascend950 and config.inductor_indirect_memory_mode is None, (
        config.is_ascend950, config.inductor_indirect_memory_mode)


@pytest.mark.parametrize("name", list(INDIRECT))
def test_indirect_memory_operators_fall_back_to_aten_off_the_ascend_950(name):
    fn, inputs, operator = INDIRECT[name]
    producer = producer_of(compile_and_compare(fn, *inputs()))
    if producer is not None:
        assert producer.by == HOST_ATEN and _operator(producer.name) == operator, (
            f"{name}: expected the host's ATen {operator} (torch_npu's fallback off the 950) to write the result, "
            f"got {producer.by} {producer.name}")


def _operator(entry: str) -> str:
    """``aten.index_put_.default`` -> ``index_put``: the operator a host ledger entry names, in-place or not."""
    return entry.split(".")[1].rstrip("_") if entry.count(".") >= 2 else entry


def test_a_float64_cast_falls_back_to_aten():
    """torch_npu's convert_element_type lowering sends casts to and from float64 to ATen: the NPU compiler refuses
    float64 kernels (triton-ascend: "[fp8, fp64] is unsupported on Ascend"), on a device as under the emulation."""
    torch = _t()
    for op, x in [(lambda t: t.to(torch.float64), torch.randn(64, 17).npu()),
                  (lambda t: t.to(torch.float32), torch.randn(64, 17, dtype=torch.float64).npu())]:
        producer = producer_of(compile_and_compare(op, x))
        assert producer is None or producer.by == HOST_ATEN, (x.dtype, producer)


@pytest.mark.parametrize("pair", ["float32-float16", "bfloat16-float32", "float16-int32"])
def test_other_casts_are_computed_by_a_kernel(pair):
    """The other side of the float64 rule: every other cast is lowered into a Triton kernel."""
    torch = _t()
    source, target = (getattr(torch, name) for name in pair.split("-"))
    producer = producer_of(compile_and_compare(lambda t: t.to(target), (torch.randn(64, 17) * 8).to(source).npu()))
    assert producer is None or producer.by == TRITON_INTERPRETER, producer


#: overload -> the function of torch_npu/_inductor/lowering.py that lowers it on the emulated chip ("R." stands for
#: ``_register_npu_inductor_fallbacks.<locals>.``, the function that registers them)
NPU_LOWERINGS = {
    "aten.amax.default": "make_reduction.<locals>.inner", "aten.amin.default": "make_reduction.<locals>.inner",
    "aten.argmax.default": "make_reduction.<locals>.inner", "aten.argmin.default": "make_reduction.<locals>.inner",
    "aten.max.dim": "R.reduce_max", "aten.min.dim": "R.reduce_min", "aten.mean.dim": "R.mean",
    "aten.cumsum.default": "R.cumsum", "npu.npu_dtype_cast.default": "R._convert_npu_type",
    "npu._npu_dtype_cast.default": "R._convert__npu_type",
    "prims.convert_element_type.default": "R._convert_element_type", "aten.pow.Tensor_Scalar": "R.pow",
    "aten.pow.Tensor_Tensor": "R.pow", "aten.var_mean.correction": "R.var_mean", "aten.var.correction": "R.var_",
    "aten.native_layer_norm.default": "R.native_layer_norm", "aten.cat.default": "R.cat",
}
#: overloads that ATen computes on the emulated chip: torch_npu's own lowerings of them run only on an Ascend 950
#: (prims.var, which torch_npu's var_ is also registered for, is in its fallback list on every chip)
ATEN_ON_THIS_CHIP = ("prims.var.default", "aten.gather.default", "aten.embedding.default", "aten.index.Tensor", "aten.index_put.default",
                     "aten.index_put_.default", "aten._unsafe_index_put.default", "aten.scatter.src",
                     "aten.scatter_.src", "aten.scatter_reduce.two", "aten.scatter_reduce_.two")


def test_torch_npus_lowerings_are_the_ones_registered():
    """Where torch_npu's lowering and Inductor's compute the same values, only the registration tells them apart: each
    operator's lowering is torch_npu's own function (through its device dispatcher), or ATen's fallback off the 950."""
    torch = _t()
    from torch._inductor.lowering import lowerings

    compile_and_compare(lambda t: t.sum(dim=-1), torch.randn(8, 8).npu())  # torch_npu's Inductor backend is loaded
    wrong = {}
    for name, expected in NPU_LOWERINGS.items():
        lowering = lowerings[_overload(name)]
        qualname = f"{lowering.__module__}:{lowering.__qualname__}"
        want = "torch_npu._inductor.lowering:" + expected.replace("R.", "_register_npu_inductor_fallbacks.<locals>.")
        if qualname != want:
            wrong[name] = qualname
    from torch_npu._inductor import config

    for name in ATEN_ON_THIS_CHIP if not config.is_ascend950 else ():  # a 950 lowers them (simt_template)
        lowering = lowerings[_overload(name)]
        if lowering.__qualname__ != "fallback_handler.<locals>.handler":
            wrong[name] = f"{lowering.__module__}:{lowering.__qualname__}"
    assert not wrong, wrong


def _overload(name: str):
    namespace, packet, overload = name.split(".")
    return getattr(getattr(getattr(_t().ops, namespace), packet), overload)


@pytest.mark.parametrize("op", ["npu_dtype_cast", "_npu_dtype_cast"])
def test_torch_npus_own_casts_are_computed_by_a_kernel(op):
    """torch_npu's cast operators (``torch_npu.npu_dtype_cast``, and ``_npu_dtype_cast`` under it) lower to a
    Triton kernel as any cast does. Compared with ``Tensor.to``: eager, they are CANN operators (aclnn Cast), which
    the emulated NPU refuses, naming them."""
    torch = _t()
    from pytest_npu_lazy.cann.compute import LEDGER
    from torch._inductor.exc import InductorError

    cast = getattr(torch.ops.npu, op)
    x = torch.randn(64, 17).npu()
    expected = x.to(torch.float16)
    COMPILED_FROM[0] = len(LEDGER.entries)
    try:
        compiled = torch.compile(lambda t: cast(t, torch.float16), backend="inductor")(x)
    except InductorError as error:
        if op != "npu_dtype_cast" or "argument 'dtype' must be torch.dtype, not int" not in str(error):
            raise
        pytest.xfail(NPU_DTYPE_CAST_TAKES_AN_INT)
    if op == "npu_dtype_cast":
        pytest.fail(f"expected the compile to fail ({NPU_DTYPE_CAST_TAKES_AN_INT}), but it compiles now: take this "
                    "xfail out", pytrace=False)
    assert_equal_to_eager(compiled, expected)
    producer = producer_of(compiled)
    assert producer is None or producer.by == TRITON_INTERPRETER, producer


#: a finding of torch_npu's, at compile time (no device is involved): on a device as here
NPU_DTYPE_CAST_TAKES_AN_INT = (
    "torch.compile of torch_npu.npu_dtype_cast fails: its schema takes the dtype as an int code "
    "(npu_dtype_cast(Tensor self, int dtype, int? input_dtype=None)) and torch_npu's lowering (_convert_npu_type) hands "
    "that int to Inductor as a dtype (TypeError in get_dtype_size); _npu_dtype_cast, which takes a ScalarType, compiles")


@pytest.mark.parametrize("listed", ["aten.sin", "aten.amax"])
def test_operators_named_in_torch_npus_fallback_list_are_computed_by_aten(listed, monkeypatch):
    """``NPU_INDUCTOR_FALLBACK_LIST`` (torch_npu's switch, read once at import): the operators it names are sent to
    ATen, the rest still lowered; a name that resolves to no operator is skipped with a warning."""
    monkeypatch.setenv("NPU_INDUCTOR_FALLBACK_LIST", f"aten.no_such_operator, {listed}")  # names are stripped
    torch = _t()
    x = torch.randn(64, 17).npu()
    listed_op = {"aten.sin": lambda t: t.sin(), "aten.amax": lambda t: t.amax(dim=-1)}[listed]
    producer = producer_of(compile_and_compare(listed_op, x))
    assert producer is None or (producer.by == HOST_ATEN and _operator(producer.name) == listed.split(".")[1]), (
        producer)
    producer = producer_of(compile_and_compare(lambda t: t.cos(), x))
    assert producer is None or producer.by == TRITON_INTERPRETER, producer


def test_the_traced_lowerings_of_torch_npus_fx_dump_switch_equal_eager(monkeypatch, tmp_path):
    """``INDUCTOR_ASCEND_DUMP_FX_GRAPH`` (torch_npu's debug switch, read at import) registers the lowerings with
    torch_npu's traced variants of Inductor's helpers (``lowering_fx``): reductions, a variance, a cat."""
    monkeypatch.setenv("INDUCTOR_ASCEND_DUMP_FX_GRAPH", "1")
    monkeypatch.chdir(tmp_path)  # whatever the switch writes stays in the test's folder
    torch = _t()
    compile_and_compare(lambda t: (t.sum(-1) + t.amax(-1), t.mean(-1), torch.var_mean(t, dim=-1),
                                   torch.cat([t, t * 2], dim=0), t.cumsum(-1)),
                        torch.randn(16, 33).npu())
    from torch_npu._inductor import config

    assert config.dump_fx_graph, "torch_npu read its configuration before the test set the switch: nothing was traced"


@pytest.mark.parametrize("shape", [(512, 512), (4, 80, 640)])
def test_layer_norm_in_the_shapes_torch_npu_gives_layer_norm_v4(shape, monkeypatch):
    """The float16 layer norms for which torch_npu picks ATen's LayerNormV4 on an Ascend 950 (both switches on, a last
    dimension of 512 with at least 512 rows, or 640 after a permute and reshape): off the 950 its Welford lowering
    computes them, and on a 950 ATen does; either way the values equal eager's."""
    monkeypatch.setenv("TORCHINDUCTOR_ENABLE_WELFORD", "1")
    monkeypatch.setenv("TORCHINDUCTOR_ENABLE_LAYERNORM_V4", "1")
    torch = _t()
    if len(shape) == 2:
        fn = lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:])  # noqa: E731
        x = torch.randn(shape).half().npu()
    else:
        fn = lambda t: torch.nn.functional.layer_norm(t.permute(0, 2, 1).reshape(4, 80, 640), (640,))  # noqa: E731
        x = torch.randn(4, 640, 80).half().npu()
    compile_and_compare(fn, x)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_low_precision_layer_norm_is_a_kernel_off_the_950(dtype):
    """torch_npu's native_layer_norm lowering sends float16 and bfloat16 layer norms to ATen only on an Ascend 950
    (without its Welford switch, or in LayerNormV4's shapes); elsewhere its own lowering writes them in a kernel.
    With an affine weight and bias, which the lowering multiplies and adds itself."""
    torch = _t()
    low = getattr(torch, dtype)
    weight, bias = torch.linspace(0.5, 1.5, 33).to(low).npu(), torch.linspace(-1, 1, 33).to(low).npu()
    producer = producer_of(compile_and_compare(lambda t, w, b: torch.nn.functional.layer_norm(t, (33,), w, b),
                                               torch.randn(16, 33).to(low).npu(), weight, bias))
    assert producer is None or producer.by == TRITON_INTERPRETER, producer


#: frexp's edges: zero (both signs), powers of two and values just off them, the smallest normal, subnormals, the
#: largest finite; each dtype its own (bfloat16 has float32's range)
FREXP_EDGES = {
    "float32": [0.0, -0.0, 1.0, -1.0, 0.5, 0.75, 3.0, -6.5, 1024.0, 1023.9999, 1e-3, 3e38, -1e-30, 1.1754944e-38,
                1e-40, 1.4e-45],
    "bfloat16": [0.0, -0.0, 1.0, -1.0, 0.5, 0.75, 3.0, -6.5, 1024.0, 1e-3, 3e38, -1e-30, 1.1754944e-38, 1e-39],
}


@pytest.mark.parametrize("dtype", list(FREXP_EDGES))
def test_frexp_is_atens_on_every_chip(dtype):
    """torch_npu lists frexp in ``NPU_EXTRA_FALLBACK_LIST`` (every chip): a compiled ``torch.frexp`` is ATen's, and
    its own ``triton_helpers.frexp`` is never reached. The mutation record judges that helper's mutants equivalent
    on this ground; if a release lowers frexp, no Triton kernel may differ from eager by a bit (mantissa and exponent
    are exact by definition) and the verdict must be taken back."""
    torch = _t()
    from torch_npu._inductor.lowering_fallback_list import NPU_EXTRA_FALLBACK_LIST

    edges = torch.tensor(FREXP_EDGES[dtype], dtype=getattr(torch, dtype)).npu()
    x = torch.cat([torch.randn(256).to(getattr(torch, dtype)).npu(), edges])
    (mantissa, exponent), (eager_mantissa, eager_exponent) = compile_and_run(lambda t: torch.frexp(t), x)
    bits = torch.int16 if dtype == "bfloat16" else torch.int32
    assert torch.equal(exponent, eager_exponent) and torch.equal(mantissa.view(bits), eager_mantissa.view(bits)), [
        (float(v), float(m), int(e), float(em), int(ee))
        for v, m, e, em, ee in zip(x, mantissa, exponent, eager_mantissa, eager_exponent) if m != em or e != ee][:8]
    assert torch.ops.aten.frexp.Tensor in NPU_EXTRA_FALLBACK_LIST, "torch_npu no longer sends frexp to ATen"
    kernels, _ = computed_by_the_compiled_call()  # none on a device, which records nothing
    assert not kernels, f"a Triton kernel computed the compiled frexp ({kernels}): take back the verdict on triton_helpers.frexp"


@pytest.mark.filterwarnings("ignore:dynamo_pgo force disabled by torch.compiler.config.force_disable_caches")
@pytest.mark.parametrize("case", ["pointwise", "sum", "var_mean_welford", "softmax", "argmax"])
def test_the_kernels_that_run_are_torch_npus_index_codegens_as_on_a_device(case, monkeypatch):
    """torch_npu writes each kernel with its index codegen (``NPUIndexTritonKernel``) and checks it by compiling it
    to TTIR (``make_ttir_for_check``); when that raises, ``NPUCombinedScheduling.codegen_node`` logs it at debug level
    and writes the kernel again with its no-linear codegen (``NPUTritonKernel``). Where the check compiles, as it
    does on a device, the index codegen's kernel is the one that runs. Under ``--npu-lazy-cann=compute`` the kernel is
    an interpreted function, and the check runs on the compiler's view of it (``cann/compute/index_codegen.py``);
    before that bridge, every check raised and compute mode ran only the fallback's kernels. Here each check must
    compile, only the index codegen may write a kernel, each launch must say so, and the values must be eager's
    (the Welford switch's vectorised axis included)."""
    torch = _t()
    from torch_npu._inductor import config as npu_config
    from torch_npu._inductor.codegen import scheduling, triton as npu_triton

    monkeypatch.setattr(npu_config, "enable_welford", case == "var_mean_welford")
    monkeypatch.setattr(torch._inductor.config, "force_disable_caches", True)
    checks: list[str] = []  # each TTIR check: "compiled", or the error it raised
    written: list[str] = []  # the codegen of each kernel source written
    check = scheduling.NPUTritonScheduling.make_ttir_for_check

    def make_ttir_for_check(self, src_code):
        try:
            check(self, src_code)
        except Exception as exc:
            checks.append(f"{type(exc).__name__}: {exc}")
            raise
        checks.append("compiled")

    monkeypatch.setattr(scheduling.NPUTritonScheduling, "make_ttir_for_check", make_ttir_for_check)
    for kernel_class in (npu_triton.NPUTritonKernel, npu_triton.NPUIndexTritonKernel):
        def codegen_kernel(self, *args, _original=kernel_class.codegen_kernel, **kwargs):
            written.append(type(self).__name__)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(kernel_class, "codegen_kernel", codegen_kernel)
    fn = {"pointwise": lambda t: t * 2 + 1, "sum": lambda t: t.sum(-1),
          "var_mean_welford": lambda t: torch.var_mean(t, dim=-1), "softmax": lambda t: torch.softmax(t, -1),
          "argmax": lambda t: t.argmax(-1)}[case]
    torch._dynamo.reset()
    compile_and_compare(fn, torch.randn(32, 64).npu())
    assert checks and all(outcome == "compiled" for outcome in checks), (
        f"torch_npu's index codegen's TTIR check did not compile ({checks[:2]}): the kernel that ran is its "
        "no-linear fallback's, not the one a device runs")
    assert written and set(written) == {"NPUIndexTritonKernel"}, f"a kernel was written by {written}"
    if computed_by_the_compiled_call() == ([], []):
        return  # a device: the ledger is compute mode's
    from pytest_npu_lazy.cann.compute import LEDGER
    from pytest_npu_lazy.cann.compute.index_codegen import INDEX_CODEGEN

    launches = [entry for entry in LEDGER.since(COMPILED_FROM[0]) if entry.by == TRITON_INTERPRETER]
    assert launches and all(INDEX_CODEGEN in entry.detail for entry in launches), [e.detail for e in launches]
    from pytest_npu_lazy.cann.compute import describe, index_codegen

    assert set(index_codegen.PLANNED[:2]) <= set(index_codegen.in_force()), index_codegen.in_force()
    assert all(name in describe() for name in index_codegen.in_force()), describe()


def test_a_grouped_kernel_of_the_index_codegen_launches_as_a_device_would(monkeypatch):
    """With torch_npu's symbolic-shape group autotune on, a dynamic kernel of its index codegen gets
    ``NPUSymbolicGroupedAutotuner``, which on a device compiles every candidate and launches the best of the group
    the runtime sizes fall in; it has no interpreter branch of its own. Under compute mode the group is resolved as a
    device resolves it and its first candidate launches (cann/compute/index_codegen.py). Sizes across groups, each
    equal to eager (torch_npu's own test_sum.py::test_sum_1d_dynamic_shape_group_autotune does the same)."""
    torch = _t()
    from torch_npu._inductor import config as npu_config
    from torch_npu._inductor.runtime import triton_heuristics

    monkeypatch.setattr(npu_config, "enable_symbolic_shape_group_autotune", True)
    launched: list[str] = []
    run = triton_heuristics.NPUSymbolicGroupedAutotuner.run

    def counted(self, *args, **kwargs):
        launched.append(type(self).__name__)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(triton_heuristics.NPUSymbolicGroupedAutotuner, "run", counted)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: t.sum(), backend="inductor", dynamic=True)
    for size in (8, 1025, 50_000):
        x = torch.randn(size).npu()
        assert_equal_to_eager(compiled(x), x.sum())
    assert launched, "no kernel of the grouped autotuner launched: the case does not test the bridge"
