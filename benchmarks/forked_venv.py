"""A side venv where pytest-forked works: an older pytest in front of this venv's packages.

pytest-forked 1.7.5 fails every test on pytest 9.2 (it marshals reports,
and pytest 9.2's NodeId cannot be marshalled). The side venv has its own
pytest (``FORKED_PYTEST``) and pytest-forked, and sees this venv's torch,
torch_npu and the rest through a ``.pth`` file that appends this venv's
site-packages after its own, so its pytest wins. Used by the benchmarks
(``python -m benchmarks --forked-venv-setup``) and by the plugin's tests
(test/plugin/test_modes.py, ``test_guard_under_pytest_forked``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

#: the newest pytest that pytest-forked 1.7.5 works with
FORKED_PYTEST = "9.1.1"
FORKED_VERSION = "1.7.5"


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def make_forked_venv(venv: Path) -> str | None:
    """Create the side venv at ``venv``; None when it is ready, else why it could not be made."""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
        subprocess.run([str(python_of(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        f"pytest=={FORKED_PYTEST}", f"pytest-forked=={FORKED_VERSION}"],
                       check=True, capture_output=True, text=True, timeout=900)
        site = subprocess.run([str(python_of(venv)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        shutil.rmtree(venv, ignore_errors=True)
        detail = getattr(exc, "stderr", "") or str(exc)
        return f"could not create the side venv for pytest-forked: {str(detail)[-800:]}"
    ours = sysconfig.get_paths()["purelib"]  # torch, torch_npu, this plugin and their dependencies, after its own
    Path(site, "zz_npu_lazy_main_venv.pth").write_text(ours + "\n")
    return None
