"""Helpers of the CANN tests (test_cann, test_cann_emulation): run code in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from pytest_npu_lazy import cann

REPO = Path(cann.__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """The test process's environment minus anything that would steer CANN activation."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_NPU_LAZY", "ASCEND_"))
        and key not in ("LD_LIBRARY_PATH", "TORCH_DEVICE_BACKEND_AUTOLOAD", "CC")
    }
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def run_python(code: str, timeout: float = 240, **env: str) -> dict:
    """Run code in a fresh interpreter; it must print one JSON object as its last stdout line."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=clean_env(**env),
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    answer["stderr"] = result.stderr
    return answer
