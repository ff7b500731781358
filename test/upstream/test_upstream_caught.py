"""The upstream suite can fail: each guarantee, broken on purpose inside an isolated test, is caught."""

from __future__ import annotations

import sys

import pytest
import test_upstream_compile
import test_upstream_import
import test_upstream_triton
from breakage import AfterImport, caught
from releases import TRITON_ASKERS_AT_WRAP, torch_line, triton_importable


@pytest.mark.npu_lazy(preload=[], autoload=False)
def test_import_torch_loading_dynamo_is_caught(npu_lazy, record_property):
    sys.meta_path.insert(0, AfterImport("torch", lambda _torch: __import__("torch._dynamo")))
    caught(test_upstream_import.test_import_torch_defers_the_compiler_stack, npu_lazy, record_property,
           says=("'torch._dynamo' must not be loaded yet, but it was loaded during phase 'import'",
                 "import chain: torch._dynamo"))


@pytest.mark.npu_lazy(preload=["torch"])
def test_compiled_output_differing_from_eager_is_caught(npu_lazy, record_property):
    import torch

    wrapper = torch._TorchCompileInductorWrapper
    compile_graph = wrapper.__call__

    def compile_then_corrupt(self, model, inputs):
        compiled = compile_graph(self, model, inputs)
        return lambda *args: [out + 1 if isinstance(out, torch.Tensor) else out for out in compiled(*args)]

    wrapper.__call__ = compile_then_corrupt
    caught(test_upstream_compile.test_first_compiled_call_on_cpu_matches_eager, npu_lazy, record_property,
           says=("the compiled output of 'first_call' differs from eager",))


@pytest.mark.npu_lazy(preload=["torch"])
def test_a_new_module_asking_for_triton_is_caught(npu_lazy, record_property):
    if torch_line() not in TRITON_ASKERS_AT_WRAP:
        pytest.skip(f"needs a torch release measured in test/upstream/releases.py (TRITON_ASKERS_AT_WRAP): torch "
                    f"{torch_line()} is newer, so there is no exact list of askers to differ from; measure it there")
    asks = compile("try:\n    import triton\nexcept ImportError:\n    pass\n", "new_asker.py", "exec")
    sys.meta_path.insert(0, AfterImport("torch._inductor", lambda _m: exec(asks, {"__name__": "new_asker"})))
    caught(test_upstream_triton.test_modules_asking_for_triton_at_wrapper_creation, npu_lazy, record_property,
           says=("new askers ['new_asker']",))


@pytest.mark.npu_lazy(preload=["torch"])
def test_triton_expectation_flips_when_upstream_stops_loading_it(npu_lazy):
    """The strict xfail's body passes once nothing loads triton at wrapper creation (here: triton made
    absent), and its mark is strict here: pytest turns that pass into XPASS(strict), a failure."""
    if not triton_importable():
        pytest.skip("needs triton installed: without it the expectation is a plain pass")
    marks = {m.name: m for m in test_upstream_triton.test_wrapper_creation_does_not_load_triton.pytestmark}
    xfail = marks["xfail"]
    assert xfail.kwargs["strict"] is True
    assert xfail.args[0] is (test_upstream_triton.TRITON_AT_WRAP is not None)
    npu_lazy.block("triton")
    test_upstream_triton.test_wrapper_creation_does_not_load_triton(npu_lazy)  # passes: XPASS, strict
