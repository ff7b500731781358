"""The emulated NPU that computes (--npu-lazy-cann=compute), through pytest as a user runs it.

Each test writes a small test file and runs pytest on it in a fresh process. What is checked
is what a device promises: eager operators give the values the CPU gives, with a device's
semantics (in-place writes, views, ``out=``, factories, seeding, autograd); a compiled call
runs the Triton kernel torch_npu generated, in Triton's interpreter, and the report says so;
what nothing here can compute is refused and loses the device; and nothing a deferred-loading
guarantee observes differs from the plain emulation.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter

import pytest

pytestmark = pytest.mark.needs("torch", "torch_npu")

COMPUTE = ("--npu-lazy-cann=compute", "-p", "npu_lazy")


def _write(pytester, name: str, body: str) -> None:
    pytester.path.joinpath(name).write_text(textwrap.dedent(body))


def _json(pytester, run, name: str = "report.json") -> dict:
    path = pytester.path / name
    assert path.exists(), run.text()
    return json.loads(path.read_text())


def _phase(test: dict, name: str) -> dict:
    return next(p for p in test["phases"] if p["name"] == name)


EAGER = '''
import pytest

pytestmark = pytest.mark.npu_lazy(preload=["torch", "torch_npu"])


def test_values_equal_the_cpu():
    import torch
    a, b = torch.randn(64, 33), torch.randn(33)
    got = (a.npu() * b.npu() + 1).sin()
    assert got.device.type == "npu"
    torch.testing.assert_close(got.cpu(), (a * b + 1).sin())


def test_in_place_on_a_view_writes_the_device_buffer():
    import torch
    base = torch.arange(6., device="npu").reshape(2, 3)
    base.t().mul_(2)
    base[1].add_(1)
    assert base.cpu().tolist() == [[0., 2., 4.], [7., 9., 11.]]


def test_out_argument_is_written_and_resized():
    import torch
    out = torch.empty(1, device="npu")
    returned = torch.add(torch.ones(5, device="npu"), 2, out=out)
    assert returned is out and out.shape == (5,) and out.cpu().tolist() == [3.] * 5


def test_factories_dtypes_strides_and_scalars():
    import torch
    ones = torch.ones(3, 4, device="npu", dtype=torch.float16)
    assert ones.device.type == "npu" and ones.dtype == torch.float16
    strided = torch.arange(12, device="npu").reshape(3, 4)[:, ::2]
    assert not strided.is_contiguous() and strided.cpu().tolist() == [[0, 2], [4, 6], [8, 10]]
    assert (strided.sum() + 0).item() == 30
    empty = torch.zeros(0, 5, device="npu")
    assert empty.sum(dim=0).cpu().tolist() == [0.] * 5
    assert torch.arange(5, device="npu").to(torch.float64).mean().item() == 2.0


def test_cpu_tensors_beside_device_ones_are_refused_as_on_a_device():
    import torch
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ones(3, device="npu") + torch.ones(3)
    assert (torch.ones(3, device="npu") + torch.tensor(2.)).cpu().tolist() == [3.] * 3  # a CPU scalar is taken
    assert torch.arange(5., device="npu")[torch.tensor([4, 0])].cpu().tolist() == [4., 0.]  # CPU indices too


def test_random_numbers_follow_the_cpu_seed():
    import torch
    torch.manual_seed(7)
    on_device = torch.randn(16, device="npu").cpu()
    torch.manual_seed(7)
    assert torch.equal(on_device, torch.randn(16))


def test_the_devices_generator_state_governs_what_is_drawn():
    import torch
    import torch_npu
    torch.manual_seed(3)
    state = torch_npu.npu.get_rng_state()
    cpu_stream = torch.get_rng_state()
    a = torch.rand(8, device="npu").cpu()
    assert torch.equal(torch.get_rng_state(), cpu_stream)  # a draw on the device leaves the CPU's stream alone
    assert not torch.equal(torch.rand(8, device="npu").cpu(), a)  # the device's offset advanced
    torch_npu.npu.set_rng_state(state)
    assert torch.equal(torch.rand(8, device="npu").cpu(), a)  # restored, drawn again
    mine = torch.Generator(device="npu").manual_seed(11)
    first = torch.empty(8, device="npu").uniform_(generator=mine).cpu()
    assert torch.equal(torch.empty(8, device="npu").uniform_(generator=torch.Generator(device="npu").manual_seed(11))
                       .cpu(), first)


def test_activation_checkpointing_recomputes_the_same_dropout_mask():
    import torch
    from torch.utils.checkpoint import checkpoint
    x = torch.linspace(-2, 2, 64, device="npu", requires_grad=True)
    torch.manual_seed(0)
    out = checkpoint(lambda t: torch.dropout(t.sin(), 0.5, True), x, use_reentrant=False, preserve_rng_state=True)
    out.sum().backward()  # the backward recomputes the dropout after restoring the device's generator
    kept = out.detach().cpu() != 0
    expected = torch.where(kept, 2 * torch.linspace(-2, 2, 64).cos(), torch.zeros(64))
    torch.testing.assert_close(x.grad.cpu(), expected)


def test_autograd_through_device_tensors():
    import torch
    x = torch.linspace(-1, 1, 9, device="npu", requires_grad=True)
    (x.sin() * x).sum().backward()
    host = torch.linspace(-1, 1, 9, requires_grad=True)
    (host.sin() * host).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), host.grad)
'''


def test_eager_operators_compute_with_a_devices_semantics(run_pytest, pytester):
    _write(pytester, "test_eager.py", EAGER)
    run = run_pytest(*COMPUTE, "-p", "no:randomly", "--npu-lazy-json=report.json")
    assert set(run.outcomes.values()) == {"passed"} and len(run.outcomes) == 9, run.text()
    report = _json(pytester, run)
    test = next(t for t in report["tests"] if t["nodeid"].endswith("test_values_equal_the_cpu"))
    rows = _phase(test, "test")["computed"]
    assert {"by": "host ATen kernel", "name": "aten.mul.Tensor", "detail": "", "count": 1} in rows, rows
    assert report["environment"]["cann_mode"] == "compute"
    assert report["environment"]["device"].startswith("npu (emulated Ascend910B3, computing on the host")


COMPILED = '''
import pytest

@pytest.mark.npu_lazy(preload=["torch"])
def test_first_call_on_npu(npu_lazy):
    import torch
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    assert npu_lazy.device == "npu"
    fn = npu_lazy.compile(lambda x, y: torch.sin(x) + y * 2, backend="inductor")
    npu_lazy.assert_not_loaded("torch_npu._inductor")
    out = fn(torch.randn(1024, 32, device="npu"), torch.randn(1024, 32, device="npu"))
    assert out.device.type == "npu"
    assert npu_lazy.first_loaded("torch_npu._inductor") == "first_call"
'''


def test_a_compiled_call_runs_the_npu_kernel_in_the_interpreter_and_says_so(run_pytest, pytester, tmp_path):
    _write(pytester, "test_compiled.py", COMPILED)
    run = run_pytest(*COMPUTE, "--npu-lazy-json=report.json", "-p", "no:randomly", "-v")  # -v: the CANN line
    assert run.outcomes == {"test_compiled.py::test_first_call_on_npu": "passed"}, run.text()
    text = run.text()
    assert "CANN: emulated NPU (Ascend910B3) that computes - eager operators by ATen's CPU kernels" in text
    assert "Triton kernels in Triton's interpreter (TRITON_INTERPRET=1)" in text
    test = _json(pytester, run)["tests"][0]
    first = _phase(test, "first_call")["computed"]
    kernels = [row for row in first if row["by"] == "Triton interpreter"]
    assert [row["name"] for row in kernels] == ["triton_poi_fused_add_mul_sin_0"], first
    assert kernels[0]["detail"].startswith("grid "), kernels
    assert "NPU compiler options dropped" in kernels[0]["detail"], kernels  # the bridge said what it dropped
    assert _phase(test, "eager")["computed"] == []  # the reference ran on CPU copies: nothing on the device


WRONG_KERNEL = '''
import pytest

@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_mean(npu_lazy, monkeypatch, tmp_path):
    import torch
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # compiled now, not served
    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
    if {broken}:
        import torch_npu._inductor.lowering as lowering
        product = lowering.sympy_product  # a lowering regression: the NPU mean divides by one too many
        monkeypatch.setattr(lowering, "sympy_product", lambda sizes: product(sizes) + 1)
    fn = npu_lazy.compile(lambda x: x.mean(dim=-1), backend="inductor")
    fn(torch.randn(8, 64, device="npu"))
'''


@pytest.mark.parametrize("broken", [False, True])
def test_a_wrong_npu_kernel_is_caught_and_the_failure_says_what_computed(run_pytest, pytester, broken):
    _write(pytester, "test_wrong.py", WRONG_KERNEL.format(broken=broken))
    run = run_pytest(*COMPUTE, "-p", "no:randomly")
    expected = "failed" if broken else "passed"
    assert run.outcomes == {"test_wrong.py::test_mean": expected}, run.text()
    if broken:
        failure = run.report("test_mean", "call")["longrepr"]
        assert "npu_lazy: the compiled output of 'first_call' differs from eager" in failure
        assert "output 0 (float32[8]): Triton kernel triton_per_fused_mean_0 in Triton's interpreter" in failure
        assert "eager reference: the same function on CPU copies of the inputs" in failure


REFUSED = '''
import pytest

@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_npu_operator_then_add():
    import torch, torch_npu
    x = torch.ones(4, device="npu")
    # the refusal names the operator where the launch fails at once; where torch_npu's task queue launched it
    # from its thread, the error surfaces at the next synchronising call, the copy, as a lost device (a real
    # device's asynchronous errors surface the same way): either names the refused ACL call
    with pytest.raises(RuntimeError, match="Swish|lost since an earlier refused call.*aclopCompileAndExecute"):
        torch_npu.npu_silu(x).cpu()
    with pytest.raises(RuntimeError, match="the emulated NPU is lost since an earlier refused call.*aclopCompileAndExecute"):
        (x + 1).cpu()

@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_the_next_test_has_a_working_device():
    import torch
    assert (torch.ones(4, device="npu") + 1).cpu().tolist() == [2.] * 4
'''


def test_an_operator_with_no_cpu_kernel_is_refused_and_loses_the_device(run_pytest, pytester):
    _write(pytester, "test_refused.py", REFUSED)
    run = run_pytest(*COMPUTE, "--npu-lazy-json=report.json", "-p", "no:randomly")
    assert set(run.outcomes.values()) == {"passed"}, run.text()
    test = next(t for t in _json(pytester, run)["tests"] if t["nodeid"].endswith("test_npu_operator_then_add"))
    rows = _phase(test, "test")["computed"]
    assert any(r["by"] == "refused" and r["name"] == "aclopCompileAndExecute" for r in rows), rows
    assert {"by": "device lost", "name": "aten.add.Tensor", "detail": "", "count": 1} in rows, rows
    assert not any(r["by"] == "host ATen kernel" and r["name"] == "aten.add.Tensor" for r in rows), rows


GUARANTEE = '''
import pytest

@pytest.mark.npu_lazy(preload=["torch"])
def test_guarantee(npu_lazy):
    import torch
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    fn = npu_lazy.compile(lambda x: torch.sin(x) + 1, backend="inductor")
    fn(torch.randn(8))
'''


def test_compute_changes_nothing_a_guarantee_observes(run_pytest, pytester):
    """The same guarantee test under emulate and compute: same loads per phase (but the interpreter's own,
    named below), same device calls per phase, same first phase of every watched module."""
    _write(pytester, "test_guarantee.py", GUARANTEE)
    phases = {}
    for mode in ("emulate", "compute"):
        run = run_pytest(f"--npu-lazy-cann={mode}", "-p", "npu_lazy", f"--npu-lazy-json={mode}.json",
                         "--npu-lazy-json-modules")
        assert set(run.outcomes.values()) == {"passed"}, run.text()
        phases[mode] = {p["name"]: p for p in _json(pytester, run, f"{mode}.json")["tests"][0]["phases"]}
    emulate, compute = phases["emulate"], phases["compute"]
    assert list(emulate) == list(compute)
    interpreter_only = {"triton.runtime.interpreter", "triton.language.extra.cann",
                        "triton.language.extra.cann.extension", "triton.language.extra.cann.libdevice",
                        *(f"pytest_npu_lazy.cann.compute.{name}" for name in ("libdevice", "numerics", "reductions"))}
    for name in ("import", "wrap"):
        loaded = {mode: {m["name"] for m in phases[mode][name]["modules"]} for mode in phases}
        assert loaded["emulate"] <= loaded["compute"], name
        assert loaded["compute"] - loaded["emulate"] <= (interpreter_only if name == "wrap" else set()), name
        assert [w["pattern"] for w in emulate[name]["watched"]] == [w["pattern"] for w in compute[name]["watched"]]
    for name in emulate:  # the same calls, as many times each; their order between threads is the scheduler's
        calls = {mode: Counter() for mode in phases}
        for mode in phases:
            for call in phases[mode][name]["device_calls"]:
                calls[mode][(call["name"], call["result"])] += call["count"]
        assert calls["emulate"] == calls["compute"], name


MEAN_WITH_OUTSIDE_CACHE = '''
import os
import pytest

@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_mean(npu_lazy, monkeypatch):
    import torch
    if os.environ.get("BREAK_MEAN"):
        import torch_npu._inductor.lowering as lowering
        product = lowering.sympy_product
        monkeypatch.setattr(lowering, "sympy_product", lambda sizes: product(sizes) + 1)
    fn = npu_lazy.compile(lambda x: x.mean(dim=-1), backend="inductor")
    fn(torch.ones(8, 64, device="npu"))
'''


def test_a_lowering_mutant_survives_a_warm_graph_cache_and_not_the_plugins_or_the_mutation_runners(
        run_pytest, pytester, monkeypatch, tmp_path):
    """Inductor's FX graph cache keys cover torch's sources, not torch_npu's: a changed NPU lowering is served the
    graph compiled before it, where tests share the environment's cache (--npu-lazy-inductor-cache=shared). The
    plugin's default policy (cold) and the mutation runner (a cache-key tag per run) compile it again, and catch
    it, with the same warm cache directory."""
    from pytest_npu_lazy.probe.inductor_cache import cold_key_tag

    _write(pytester, "test_cached.py", MEAN_WITH_OUTSIDE_CACHE)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "shared-inductor-cache"))
    shared = "--npu-lazy-inductor-cache=shared"
    warm = run_pytest(*COMPUTE, shared)
    assert warm.outcomes == {"test_cached.py::test_mean": "passed"}, warm.text()
    monkeypatch.setenv("BREAK_MEAN", "1")
    stale = run_pytest(*COMPUTE, shared, "--npu-lazy-json=stale.json")
    assert stale.outcomes == {"test_cached.py::test_mean": "passed"}, (
        "the broken lowering was caught through a warm graph cache: Inductor's cache key now covers torch_npu, "
        "and docs/inductor-cache.md's finding is out of date\n" + stale.text())
    assert _json(pytester, stale, "stale.json")["tests"][0]["inductor_cache"] == "warm"
    plugin = run_pytest(*COMPUTE, "--npu-lazy-json=plugin.json")  # the default policy, same warm directory
    assert plugin.outcomes == {"test_cached.py::test_mean": "failed"}, plugin.text()
    assert "differs from eager" in plugin.report("test_mean", "call")["longrepr"]
    test = _json(pytester, plugin, "plugin.json")["tests"][0]
    assert (test["inductor_cache_policy"], test["inductor_cache"]) == ("cold", "cold")
    for name, value in cold_key_tag(owner="mutant").items():
        monkeypatch.setenv(name, value)
    runner = run_pytest(*COMPUTE, shared)  # as the mutation runner runs each mutant
    assert runner.outcomes == {"test_cached.py::test_mean": "failed"}, runner.text()


BRIDGE_CHECK = """
import json, sys
sys.path.insert(0, {root!r})
from pytest_npu_lazy.cann.compute import interpreter
planned = interpreter.planned()
interpreter.install_language_shims()
import triton.language as tl
answer = {{"planned": planned, "in_force": sorted(interpreter.shims_in_force()),
          "has_cann": hasattr(tl.extra, "cann")}}
if "tl.extra.cann" in answer["in_force"]:
    answer["hint"] = tl.extra.cann.extension.multibuffer(None, 2)
    answer["ascend_libdevice"] = tl.extra.cann.libdevice.relu is tl.extra.ascend.libdevice.relu
    try:
        tl.extra.cann.extension.extract_slice
    except interpreter.InterpreterGap as gap:
        answer["gap"] = str(gap)
    # to whoever only asks (hasattr, pickling, Inductor's cache key), a missing name is an AttributeError
    answer["asked"] = [hasattr(tl.extra.cann.extension, "extract_slice"),
                       getattr(tl.extra.cann.libdevice, "no_such_function", "default")]
print(json.dumps(answer))
"""


def _fake_triton(root, *extras: str) -> None:
    """A Triton package tree with the given ``language/extra`` packages (and a libdevice with relu in each)."""
    for package in ("triton", "triton/language", "triton/language/extra", "triton/runtime"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    (root / "triton/language/__init__.py").write_text("from . import extra, math\n")
    (root / "triton/language/math.py").write_text("def floor(x): return x\n")
    (root / "triton/language/extra/__init__.py").write_text(
        "".join(f"from . import {name}\n" for name in extras))
    (root / "triton/runtime/interpreter.py").write_text("def get_int1_ty(self): pass\n")
    for name in extras:
        (root / f"triton/language/extra/{name}").mkdir()
        (root / f"triton/language/extra/{name}/__init__.py").write_text("from . import libdevice\n")
        (root / f"triton/language/extra/{name}/libdevice.py").write_text("def relu(x): return x\n")


@pytest.mark.parametrize("extras", [("ascend",), ("ascend", "cann")])
def test_the_tl_extra_cann_bridge_stands_only_where_triton_lacks_it(tmp_path, extras):
    from cann_support import run_python

    _fake_triton(tmp_path, *extras)
    got = run_python(BRIDGE_CHECK.format(root=str(tmp_path)))
    if "cann" in extras:  # triton-ascend 3.2.1 and later: nothing to bridge, nothing said
        assert "tl.extra.cann" not in got["planned"] and got["in_force"] == [] and got["has_cann"]
        assert "get_int1_ty" not in got["planned"]  # this interpreter has it
        return
    assert "tl.extra.cann" in got["planned"] and got["in_force"] == ["tl.extra.cann"]
    assert got["hint"] is None and got["ascend_libdevice"]
    assert got["gap"].startswith("tl.extra.cann.extension.extract_slice: the installed ")
    assert got["asked"] == [False, "default"]
    assert "needs a real Ascend device" in got["gap"]


ORDINARY = '''
import pytest

pytestmark = pytest.mark.npu_lazy(preload=["torch", "torch_npu"])

GLOBAL_SCALE = None


def test_closure_over_an_npu_module_and_a_global_tensor(npu_lazy):
    import torch
    global GLOBAL_SCALE
    GLOBAL_SCALE = torch.randn(4, device="npu")
    linear = torch.nn.Linear(8, 4).npu()
    fn = npu_lazy.compile(lambda x: torch.relu(linear(x)) * GLOBAL_SCALE)
    fn(torch.randn(3, 8, device="npu"))


def test_a_bfloat16_module(npu_lazy):
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()).npu().bfloat16()
    npu_lazy.compile(model)(torch.randn(4, 16, device="npu").bfloat16())


def test_nested_outputs_and_an_in_place_update(npu_lazy):
    import torch

    def step(x, y):
        y.add_(1)
        return {"a": x.sin(), "b": (x.cos(), x * y)}

    npu_lazy.compile(step)(torch.randn(32, device="npu"), torch.randn(32, device="npu"))


def test_a_helper_that_reaches_the_device_by_itself(npu_lazy):
    import torch
    bias = torch.randn(8, device="npu")

    def helper(x):
        return x + bias  # a closure of a function the compiled one calls: no CPU copy replaces it

    npu_lazy.compile(lambda x: helper(x).sin())(torch.randn(8, device="npu"))
'''


def test_the_reference_takes_ordinary_code_and_says_what_produced_each_value(run_pytest, pytester, monkeypatch):
    """Closures over npu modules and globals, a bfloat16 module, nested outputs, in-place updates, a helper the
    reference cannot copy: each is compared, and the report says, per value, what produced it.

    Without ``CI``: stock torch's make_fallback asserts where it is set, and torch_npu's gelu fallback trips it
    (test/ci_variable.py; the bfloat16 module here is a Linear and a GELU)."""
    monkeypatch.delenv("CI", raising=False)
    _write(pytester, "test_ordinary.py", ORDINARY)
    run = run_pytest(*COMPUTE, "--npu-lazy-json=report.json", "-p", "no:randomly", "-rA")
    assert set(run.outcomes.values()) == {"passed"} and len(run.outcomes) == 4, run.text()
    tests = {t["nodeid"].rsplit("::", 1)[1]: t for t in _json(pytester, run)["tests"]}
    closure = tests["test_closure_over_an_npu_module_and_a_global_tensor"]
    assert closure["cann_mode"] == "compute"
    [check] = closure["checks"]
    assert check["passed"] and check["reference"].startswith("eager reference: the same function on CPU copies")
    assert [row["by"] for row in check["outputs"]] == ["Triton interpreter"], check
    [bf16] = tests["test_a_bfloat16_module"]["checks"]
    assert "in float32" in bf16["reference"] and bf16["outputs"][0]["dtype"] == "bfloat16"
    assert bf16["outputs"][0]["by"] == "host ATen kernel" and "gelu" in bf16["outputs"][0]["name"], bf16
    [nested] = tests["test_nested_outputs_and_an_in_place_update"]["checks"]
    assert len(nested["outputs"]) == 3
    [helper] = tests["test_a_helper_that_reaches_the_device_by_itself"]["checks"]
    assert helper["reference"].startswith("eager reference: the same function on the emulated NPU"), helper
    text = run.text()
    assert "npu_lazy: compiled values checked" in text
    assert "1 test(s) compared no value a Triton kernel wrote last:\n  test_ordinary.py::test_a_bfloat16_module\n" in text, text
    assert _json(pytester, run)["counts"]["checked"]["host ATen kernel"] >= 1


WRONG_BACKWARD = '''
import pytest

@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_backward(npu_lazy, monkeypatch):
    import torch
    if {broken}:  # a wrong backward kernel: Inductor's cos (only the backward of sin uses it) scaled by 1.001
        from torch._inductor import lowering
        cos = lowering.lowerings[torch.ops.aten.cos.default]
        monkeypatch.setitem(lowering.lowerings, torch.ops.aten.cos.default,
                            lambda x: lowering.lowerings[torch.ops.aten.mul.Tensor](cos(x), 1.001))
    fn = npu_lazy.compile(lambda x: x.sin() * 3, check_grad={check})
    fn(torch.randn(64, device="npu", requires_grad=True))
'''


@pytest.mark.parametrize("broken,check", [(False, True), (True, True), (True, False)])
def test_a_wrong_backward_kernel_is_caught_where_gradients_are_checked(run_pytest, pytester, broken, check):
    _write(pytester, "test_grad.py", WRONG_BACKWARD.format(broken=broken, check=check))
    run = run_pytest(*COMPUTE, "-p", "no:randomly", "--npu-lazy-json=report.json")
    expected = "failed" if broken and check else "passed"
    assert run.outcomes == {"test_grad.py::test_backward": expected}, run.text()
    test = _json(pytester, run)["tests"][0]
    if expected == "failed":
        failure = run.report("test_backward", "call")["longrepr"]
        assert "npu_lazy: the gradient of input 0 after 'first_backward' differs from eager's" in failure, failure
        assert "gradient of input 0 (float32[64]): Triton kernel triton_poi_fused_" in failure, failure
        assert [c["passed"] for c in test["checks"]] == [False]
    elif check:
        assert test["checks"][0]["gradients"][0]["by"] == "Triton interpreter", test["checks"]
        kernels = [r for r in _phase(test, "first_backward")["computed"] if r["by"] == "Triton interpreter"]
        assert kernels, "the backward kernels are interpreted and named in their own phase"


def test_compute_mode_without_an_importable_triton_is_refused_at_start_naming_the_fix(run_pytest, pytester,
                                                                                     monkeypatch):
    """triton-ascend installed but pybind11 missing (its ascend backend imports it): Triton is found, not importable.
    Compute mode is refused before any test runs, naming the missing module and the extra that brings it."""
    fake = pytester.path / "no_pybind11"
    (fake / "pybind11").mkdir(parents=True)
    (fake / "pybind11" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pybind11'\", name='pybind11')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake))
    _write(pytester, "test_any.py", "def test_any():\n    pass\n")
    run = run_pytest(*COMPUTE)
    text = run.text()
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR and not run.outcomes, text
    assert "Triton does not import here: ModuleNotFoundError: No module named 'pybind11'" in text, text
    assert "(the module 'pybind11' is missing)" in text
    assert "pip install 'pytest-npu-lazy[compute]'" in text


@pytest.mark.npu_lazy(preload=[])
def test_compute_mode_without_triton_names_the_install(monkeypatch):
    import importlib.util

    from pytest_npu_lazy.cann.compute import interpreter

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else found(name, *a))
    problem = interpreter.triton_problem()
    assert problem.startswith("--npu-lazy-cann=compute runs torch_npu's Triton kernels in Triton's interpreter, "
                              "but Triton is not installed. Install what compute mode needs: pip install "
                              "'pytest-npu-lazy[compute]'"), problem
    monkeypatch.setattr(importlib.util, "find_spec", found)
    assert interpreter.triton_problem() is None  # the environment of this suite has triton-ascend and pybind11


TRACED_IN_PLACE_VIEWS = '''
import pytest

pytestmark = pytest.mark.npu_lazy(preload=["torch", "torch_npu"])


def test_an_in_place_squeeze_of_int32(npu_lazy):
    import torch

    def f(x):
        y = x.clone()
        y.squeeze_(0)
        return y + 1

    npu_lazy.compile(f)(torch.randint(0, 5, (1, 8), dtype=torch.int32, device="npu"))


def test_nanquantile(npu_lazy):
    import torch
    npu_lazy.compile(lambda x: torch.nanquantile(x, 0.5, dim=-1))(torch.randn(4, 16, device="npu"))
'''


def test_in_place_views_traced_by_inductor_reach_no_host_kernel(run_pytest, pytester):
    """AOTAutograd's functionalization applies an in-place view (squeeze_) to wrappers without device memory: such an
    operator changes sizes and strides only, so torch_npu's kernel keeps it (a host kernel would read the wrapper's
    storage: 'Attempted to access the data pointer on an invalid python storage', as torch_npu's own
    test/_inductor found for squeeze_ and nanquantile)."""
    _write(pytester, "test_views.py", TRACED_IN_PLACE_VIEWS)
    run = run_pytest(*COMPUTE, "-p", "no:randomly")
    assert set(run.outcomes.values()) == {"passed"} and len(run.outcomes) == 2, run.text()


COMPILED_ATTRIBUTE_CHECK = """
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, {root!r})
from pytest_npu_lazy.cann.compute import interpreter
import triton, triton.language as tl
from triton.runtime import interpreter as triton_interpreter
interpreter.install_interpreter_shims()


@triton.jit
def triton_poi_add_0(x_ptr, n: tl.constexpr):
    pass


answer = {{"interpreted": type(triton_poi_add_0).__name__, "own": triton_poi_add_0.arg_names}}
try:
    triton_poi_add_0.constexprs  # what torch_npu's precompile asks first
except interpreter.InterpreterGap as gap:
    answer["gap"] = str(gap)
    answer["attribute_error"] = isinstance(gap, AttributeError)
answer["asked"] = [hasattr(triton_poi_add_0, "src"), getattr(triton_poi_add_0, "params", "default")]
print(json.dumps(answer))
"""


def test_a_compiled_kernels_attribute_asked_of_an_interpreted_one_is_a_named_refusal():
    """torch_npu's precompile of a config asks an interpreted kernel what only a compiled one has (``constexprs``,
    ``src``): the answer names the kernel and the attribute, not a bare AttributeError. (Its index codegen's TTIR
    check is given the compiler's view of the kernel instead: test_compute_index_codegen.py.)"""
    from pathlib import Path

    from cann_support import run_python

    pytest.importorskip("triton")
    got = run_python(COMPILED_ATTRIBUTE_CHECK.format(root=str(Path(__file__).resolve().parents[2])))
    assert got["interpreted"] == "InterpretedFunction" and got["own"] == ["x_ptr", "n"]
    assert got["gap"].startswith("Triton kernel triton_poi_add_0: constexprs is a compiled kernel's"), got
    assert "needs a real Ascend device" in got["gap"] and got["attribute_error"]
    assert got["asked"] == [False, "default"]


STRING_CONSTEXPR_CHECK = """
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # CPU tensors: no torch_npu
sys.path.insert(0, {root!r})
from pytest_npu_lazy.cann.compute import interpreter
import torch
import triton, triton.language as tl
from triton.runtime import interpreter as triton_interpreter
interpreter.install_interpreter_shims()


@triton.jit
def double(x_ptr, out_ptr, n, BLOCK: "tl.constexpr"):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


x, out = torch.arange(10.), torch.zeros(10)
double[(3,)](x, out, 10, BLOCK=4)
print(json.dumps({{"out": out.tolist(), "in_force": sorted(interpreter.shims_in_force())}}))
"""


def test_a_constexpr_annotated_as_a_string_is_one_as_the_compiler_reads_it():
    """``BLOCK: "tl.constexpr"`` compiles (torch_npu's test_add_triton_wrap.py writes it so); the interpreter of
    triton-ascend 3.2.0 took it for a runtime value and stopped at ``tl.arange(0, BLOCK)``."""
    from pathlib import Path

    from cann_support import run_python

    pytest.importorskip("triton")
    got = run_python(STRING_CONSTEXPR_CHECK.format(root=str(Path(__file__).resolve().parents[2])))
    assert got["out"] == [2.0 * i for i in range(10)], got

