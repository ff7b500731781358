"""The suite can fail: each known regression, re-created in an isolated test, is caught and explained.

Each test here installs one regression (see regressions.py) in its own
child, runs the body of the guarantee test that the regression breaks, and
checks that it fails with a message naming the module, the phase and the
code location. The guarantee tests themselves, which the rest of the suite
runs without any regression, are the control. To watch the whole suite
catch a regression: ``NPU_LAZY_REGRESSION=eager_inductor_setup pytest test/dynamo``.
"""

from __future__ import annotations

import pytest
import regressions
from breakage import caught
import test_first_call
import test_import
import test_triton
import test_wrapper
from facts import needs_deferred_setup

pytestmark = needs_deferred_setup


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_wrapper_running_the_inductor_setup_is_caught(npu_lazy):
    """(a) The regression that shipped: the wrapper's __init__ runs the Inductor setup."""
    regressions.eager_inductor_setup()
    caught(test_wrapper.test_wrapper_runs_dynamo_setup_only, npu_lazy, {},
           says=("'torch_npu._inductor' must not be loaded yet, but it was loaded during phase 'wrap'",
                 "triggered at: torch_npu/utils/_dynamo.py", "in _InductorNpuRegistry.register_inductor_npu",
                 "regressions (", "in eager_inductor_setup.<locals>.setup_now"))


@pytest.mark.npu_lazy(preload=["torch"])
def test_import_setting_up_dynamo_is_caught(npu_lazy):
    """(b) The behaviour before the import-time optimisation: `import torch_npu` imports Dynamo."""
    regressions.eager_dynamo_import()
    caught(test_import.test_import_torch_npu_defers_compiler_stack, npu_lazy,
           says=("'torch._dynamo' must not be loaded yet, but it was loaded during phase 'import'",
                 "in eager_dynamo_import.<locals>.patch.<locals>.import_dynamo_now",
                 "torch_npu.utils._dynamo (torch_npu/utils/_dynamo.py", "in add_dynamo_methods)"))


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_triton_helpers_at_wrapper_creation_are_caught(npu_lazy):
    """(c) Ascend Triton helpers imported while the wrapper is created.

    On a real NPU the helpers import and assert_not_loaded fails; on the host
    stub the import itself raises (it initialises the NPU), and the phase's
    note names what it loaded.
    """
    regressions.triton_helpers_at_wrap()
    caught(test_triton.test_npu_triton_helpers_wait_for_the_first_call, npu_lazy,
           says=("loaded during phase 'wrap'", "torch_npu._inductor.runtime.triton_helpers",
                 "in triton_helpers_at_wrap.<locals>.import_helpers"))


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_compiled_output_differing_from_eager_is_caught(npu_lazy):
    """(d) A compiled first call whose output differs from eager."""
    regressions.wrong_first_call()
    caught(test_first_call.test_compiled_matches_eager, npu_lazy, "sin_cos",
           says=("npu_lazy: the compiled output of 'first_call' differs from eager", "Mismatched elements: 64 / 64"))
