"""The strict xfail of test/upstream turns into a failing run the day nothing loads triton at wrapper creation."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODE = "test/upstream/test_upstream_triton.py::test_wrapper_creation_does_not_load_triton"


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton installed")
def test_strict_xfail_fails_the_run_when_upstream_stops_loading_triton():
    def run(fixed: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, NPU_LAZY_UPSTREAM_TRITON_FIXED=fixed, PYTHONPATH=str(ROOT))
        return subprocess.run([sys.executable, "-m", "pytest", NODE, "-p", "no:cacheprovider", "-rA",
                               "-p", "no:xdist"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)

    today = run("0")
    assert today.returncode == 0 and "1 xfailed" in today.stdout, today.stdout[-3000:]
    fixed = run("1")
    assert fixed.returncode == 1, fixed.stdout[-3000:]
    assert f"FAILED {NODE}" in fixed.stdout and "[XPASS(strict)]" in fixed.stdout, fixed.stdout[-3000:]
