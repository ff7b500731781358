"""The CANN host stub through the plugin: real torch_npu imports, honest headers, clear failures."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.needs("torch", "torch_npu")

IMPORTS = """
import pytest

@pytest.mark.npu_lazy(preload=[], autoload=True)
def test_import_torch_with_autoload(npu_lazy):
    import torch
    npu_lazy.assert_loaded("torch_npu")
    assert not torch.npu.is_available()
    assert torch.npu.device_count() == 0

@pytest.mark.npu_lazy(preload=["torch"])
def test_import_torch_npu(npu_lazy):
    import torch_npu
    assert torch_npu.__file__.endswith("__init__.py")

@pytest.mark.requires_npu
def test_needs_a_device():
    pass
"""


def test_stub_makes_real_torch_npu_importable_and_says_so(run_pytest, pytester):
    pytester.makepyfile(test_imports=IMPORTS)
    run = run_pytest("-rs", "--npu-lazy-cann=stub", "-v")  # -v: the CANN line in full
    assert run.outcomes == {"test_imports.py::test_import_torch_with_autoload": "passed",
                            "test_imports.py::test_import_torch_npu": "passed",
                            "test_imports.py::test_needs_a_device": "skipped"}, run.text()
    header = run.result.stdout.lines[:6]
    assert any("CANN: host stub - no NPU device" in line for line in header), header
    assert any("device cpu (no NPU: CANN host stub)" in line for line in header), header
    assert "needs a real NPU device: running on the CANN host stub - no NPU device" in run.text()


def test_off_with_an_inherited_stub_is_a_clear_usage_error(run_pytest, pytester):
    pytester.makepyfile(test_imports=IMPORTS)
    run = run_pytest("--npu-lazy-cann=off")
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR
    assert "LD_LIBRARY_PATH holds the CANN host stub" in run.text()
    assert "Remove that directory from LD_LIBRARY_PATH" in run.text()


def test_off_leaves_the_cann_error(run_pytest, pytester, without_inherited_stub):
    pytester.makepyfile(test_imports=IMPORTS)
    run = run_pytest("--npu-lazy-cann=off")
    assert run.outcomes["test_imports.py::test_import_torch_npu"] == "failed", run.text()
    assert run.outcomes["test_imports.py::test_import_torch_with_autoload"] == "failed"
    failure = run.report("test_import_torch_npu", "call")["longrepr"]
    assert "cannot open shared object file" in failure and ".so" in failure
    assert any("CANN: off" in line for line in run.result.stdout.lines[:6])


def test_real_without_cann_is_a_clear_usage_error(run_pytest, pytester, without_inherited_stub):
    pytester.makepyfile(test_imports=IMPORTS)
    run = run_pytest("--npu-lazy-cann=real")
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR
    text = run.text()
    assert "real CANN requested but it cannot be loaded: lib" in text, text
    assert ".so (needed by" in text and "not found in LD_LIBRARY_PATH" in text
    assert "Source CANN's set_env.sh" in text and "--npu-lazy-cann=stub" in text


def test_require_npu_fails_the_run_on_the_stub(run_pytest, pytester):
    pytester.makepyfile(test_imports=IMPORTS)
    run = run_pytest("--npu-lazy-require-npu")
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--npu-lazy-require-npu: no usable NPU device" in run.text()
    assert run.outcomes == {}


def test_bad_cann_mode_in_ini(run_pytest, pytester, without_inherited_stub):
    pytester.makeini("[pytest]\nnpu_lazy_cann = sometimes\n")
    run = run_pytest()
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR
    assert "npu_lazy_cann = 'sometimes' is not valid; choose one of auto, real, stub, emulate, compute, off" in run.text()
