"""test/dynamo written the way torch_npu's own tests are: one fresh ``python -c CODE`` per check.

Each test here runs one code string in one new interpreter
(``subprocess.run([sys.executable, "-c", code])``) with bare ``assert``
statements on ``sys.modules`` and torch_npu's ``has_run`` flags, the style
of torch_npu's tests, and passes when the interpreter exits with status 0.
The checks are those of test/dynamo, test by test and file by file; where a
test/dynamo test needs a clean process, this one starts exactly one.

Run it without pytest-npu-lazy's isolation: ``pytest -p no:npu_lazy
benchmarks/subprocess_suite`` (``python -m benchmarks`` does). The CANN
host stub is put on LD_LIBRARY_PATH for the children here, as torch_npu
needs it on a machine without CANN; nothing in this process imports torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DYNAMO = Path(__file__).resolve().parents[2] / "test" / "dynamo"
sys.path.insert(0, str(DYNAMO))  # facts.py: version-dependent expectations, read without importing torch

#: exit status of a code string that decides it cannot run here (no NPU)
SKIP = 77

#: what every code string starts with: the helpers a torch_npu test would write inline
PRELUDE = '''\
import sys


def loaded(name):
    """A module and its submodules that are in sys.modules (None entries are blocked names)."""
    return [m for m, v in list(sys.modules.items()) if v is not None and (m == name or m.startswith(name + "."))]


def device():
    import torch
    return "npu" if hasattr(torch, "npu") and torch.npu.is_available() else "cpu"

'''


def _activate_cann() -> None:
    """LD_LIBRARY_PATH for the children: the CANN host stub, as the plugin would set it."""
    try:
        from pytest_npu_lazy import cann
    except ImportError:  # pragma: no cover - the benchmark always runs in the project's venv
        return
    cann.activate()


_activate_cann()


def run_code(code: str, *, autoload: bool = False, prefix: str = "") -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter, as torch_npu's tests do; the finished process."""
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1" if autoload else "0")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # as test/dynamo/conftest.py: no compile-worker pool
    source = PRELUDE + prefix + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", source], env=env, cwd=str(DYNAMO),
                          capture_output=True, text=True, timeout=900)


def check(code: str, *, autoload: bool = False) -> None:
    """The code string must exit with status 0 (or SKIP, which skips the test)."""
    result = run_code(code, autoload=autoload)
    if result.returncode == SKIP:
        pytest.skip(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "skipped")
    assert result.returncode == 0, f"exit status {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
