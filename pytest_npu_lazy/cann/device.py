"""Device check: whether a real NPU answers, asked in a fresh interpreter so pytest's process stays clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .common import ENV_MODE

_DEVICE_CHECK = """\
import json
try:
    import torch, torch_npu
    answer = {"available": bool(torch.npu.is_available()), "count": int(torch.npu.device_count())}
except Exception as error:
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__  # torch's autoload wraps the real reason
    answer = {"error": f"{type(error).__name__}: {error}"}
print(json.dumps(answer))
"""


def npu_device_usable(timeout: float = 120) -> tuple[bool, str]:
    """Ask a fresh interpreter whether torch_npu sees an NPU (initialising one here would break fork)."""
    try:
        command = [sys.executable, "-c", _DEVICE_CHECK]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"checking for an NPU timed out after {timeout:g} s"
    except OSError as exc:
        return False, f"could not start {sys.executable}: {exc}"
    lines = result.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (IndexError, ValueError):
        error = (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]
        return False, f"the NPU check crashed: {error}"
    if "error" in answer:
        return False, f"import torch_npu failed: {answer['error']}"
    stub = " (the CANN host stub is active)" if os.environ.get(ENV_MODE) == "stub" else ""
    if not answer["available"] or answer["count"] < 1:
        return False, f"torch.npu.is_available() is {answer['available']}, {answer['count']} NPU devices{stub}"
    return True, f"{answer['count']} NPU device(s) available"


