"""``--npu-lazy-cann=off`` on a machine without CANN: test/dynamo is green, every test skipped saying why.

Nothing stands in for CANN in that mode, so ``import torch_npu`` fails; every guarantee here is about what
importing torch_npu loads. The suite skips each test with torch_npu's own import error and the modes that do
run it (test/dynamo/conftest.py), instead of failing each one with the same ImportError.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_npu_lazy.cann.common import MANIFEST_NAME

HERE = Path(__file__).resolve().parent


def _without_the_stub() -> dict[str, str]:
    """This environment as a user's shell has it: no CANN mode exported, no stub build on LD_LIBRARY_PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_NPU_LAZY_CANN")}
    kept = [d for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d and not Path(d, MANIFEST_NAME).is_file()]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(kept)
    return env


def test_off_mode_without_cann_skips_every_test_naming_the_import_error_and_the_modes_that_run(tmp_path):
    env = _without_the_stub()
    imports = subprocess.run([sys.executable, "-c", "import torch_npu"], capture_output=True, text=True, env=env)
    if imports.returncode == 0:
        pytest.skip("needs a machine without CANN: here torch_npu imports under off, and test/dynamo runs as usual")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "npu_lazy", "--npu-lazy-cann=off", "-p", "no:cacheprovider",
         "-q", "-rs", f"--basetemp={tmp_path / 'base'}", str(HERE / "test_import.py")],
        capture_output=True, text=True, env=env, cwd=HERE.parent.parent, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " skipped" in done.stdout and " passed" not in done.stdout and " failed" not in done.stdout, done.stdout
    error = imports.stderr.strip().splitlines()[-1]
    assert f"needs `import torch_npu` to work, and under --npu-lazy-cann=off it fails here ({error[:200]})" \
        in done.stdout, done.stdout
    assert "run it with --npu-lazy-cann=auto, stub, emulate or compute" in done.stdout
