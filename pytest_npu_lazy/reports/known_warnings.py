"""Third-party warnings a user cannot act on here: each explained once in the header, then filtered.

Isolation repeats what the pytest process would say once: a module imported
by every test's child warns in every test (torch's ``torch.jit.script_method``
deprecation: about 600 times in test/dynamo), and a zygote's preload output
arrives as a warning of its own. Some are also false or harmless where the
plugin runs (the CANN host stub, the emulated NPU). Each such warning gets a
header line saying what emits it and why it does not matter here, and an
``ignore`` filter placed *first* among the ini-level ``filterwarnings``
lines: pytest applies those in order, later ones winning, then ``-W``, then
``@pytest.mark.filterwarnings``, so any filter of the user's (``-W error``,
``-W default``, ``filterwarnings = error`` or a line naming the warning)
still shows it or makes it an error. Nothing is hidden without saying so, and
nothing is hidden from a user who asks. Read from metadata and source files,
never by importing torch.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

from .. import compat
from ..cann import CannStatus
from ..cann.common import distribution_version

#: torch's deprecation warning, emitted by ``torch/jit/_script.py`` at each call of ``script_method``
SCRIPT_METHOD = "`torch.jit.script_method` is deprecated"
#: what torch_npu prints at import when CANN's ``set_env.sh`` was not sourced
ASCEND_HOME_PATH = "Warning: ASCEND_HOME_PATH environment variable is not set."


@dataclass(frozen=True)
class HiddenWarning:
    """A warning the header explains and an ini-level filter hides, unless the user's filters say otherwise."""

    #: the warning's text (its start), as a person reads it in the header
    message: str
    #: why it can be hidden here: who emits it and whether it matters
    reason: str
    #: the ``filterwarnings`` message pattern: a regex matched at the start (no ``:`` in it)
    pattern: str = ""
    #: the category, as a ``filterwarnings`` line names it
    category: str = "UserWarning"

    @property
    def filter(self) -> str:
        """As a ``filterwarnings`` line: ignore this message, of this category."""
        return f"ignore:{self.pattern or self.message}:{self.category}"

    def to_dict(self) -> dict:
        return asdict(self)


def hidden_warnings(cann: CannStatus) -> list[HiddenWarning]:
    """The warnings hidden in this environment, each with its reason."""
    found = (_triton_ascend_missing(cann), _script_method(), _ascend_home_path(cann), _no_bisheng(cann))
    return [hidden for hidden in found if hidden]


def hide(config: pytest.Config, cann: CannStatus) -> None:
    """Put each hidden warning's filter first among the ini-level ones, below every filter of the user's."""
    for hidden in reversed(hidden_warnings(cann)):
        compat.add_lowest_warning_filter(config, hidden.filter)


def _triton_ascend_missing(cann: CannStatus) -> HiddenWarning | None:
    """On the host stub with triton-ascend installed, torch_npu's first compiled call warns
    "triton-ascend is not installed" because torch's ``has_triton()`` asks for a CUDA/XPU device (none
    here), not because the package is missing; shown in every test's warnings it sends people to
    reinstall a package they have."""
    version = distribution_version("triton-ascend")
    if cann.active != "stub" or version is None:
        return None
    return HiddenWarning(
        "triton-ascend is not installed",
        f"triton-ascend {version} is installed; torch_npu says otherwise because torch's has_triton() "
        "finds no GPU or NPU device on the CANN host stub")


def _torch_file(*parts: str) -> Path | None:
    """A file of the installed torch, found without importing it."""
    try:
        spec = find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0], *parts)
    return path if path.is_file() else None


def _script_method() -> HiddenWarning | None:
    """torch's own ``torch/utils/mkldnn.py`` decorates its classes with ``torch.jit.script_method``, which
    warns at each call: 14 DeprecationWarnings whenever that module is imported (torch._inductor imports
    it). In-process that is once per run; isolated, once per test that compiles. Only torch can change it."""
    script, caller = _torch_file("jit", "_script.py"), _torch_file("utils", "mkldnn.py")
    if script is None or caller is None or SCRIPT_METHOD not in script.read_text(errors="replace"):
        return None
    calls = caller.read_text(errors="replace").count("@torch.jit.script_method")
    if not calls:
        return None
    return HiddenWarning(
        SCRIPT_METHOD,
        f"torch {distribution_version('torch')}'s own torch/utils/mkldnn.py calls torch.jit.script_method {calls} "
        "times as it is imported (by torch._inductor), each call warning, so every isolated test that compiles "
        "repeats them; only torch can change that", category="DeprecationWarning")


def _ascend_home_path(cann: CannStatus) -> HiddenWarning | None:
    """torch_npu prints "ASCEND_HOME_PATH ... is not set" at import when CANN's ``set_env.sh`` was not
    sourced; a zygote that preloads torch_npu passes it on as an NpuLazyWarning. On the host stub and the
    emulated NPU there is no CANN to source: the message is true and harmless. Hidden only when it is all
    the preload printed."""
    if cann.active not in ("stub", "emulate", "compute") or os.environ.get("ASCEND_HOME_PATH"):
        return None
    if distribution_version("torch-npu") is None and distribution_version("torch_npu") is None:
        return None
    where = "the CANN host stub" if cann.active == "stub" else "the emulated NPU"
    return HiddenWarning(
        ASCEND_HOME_PATH,
        "torch_npu prints it at import when CANN's environment script (set_env.sh) was not sourced, and a "
        f"zygote preloading torch_npu passes it on; harmless on {where}, which needs no CANN installation. "
        "Where a test imports torch_npu itself, the line is that test's own output (pytest shows it under "
        "\"Captured stdout\" if the test fails)",
        pattern=r"the zygote's preload \[.*\] printed.\nWarning. ASCEND_HOME_PATH environment variable is not "
                r"set\.\Z",
        category="pytest_npu_lazy.errors.NpuLazyWarning")


def _no_bisheng(cann: CannStatus) -> HiddenWarning | None:
    """triton-ascend's driver asks its ``bisheng`` compiler for targets whenever Triton looks for an active
    driver, finds no ``ccec`` and warns (in red). Under the emulated NPU its own driver answers instead; on the
    CANN host stub there is no NPU to compile for, and nothing asks Triton to. True and harmless in both: every
    test that makes Triton look repeats it."""
    version = distribution_version("triton-ascend")
    if cann.active not in ("stub", "emulate", "compute") or version is None:
        return None
    answer = ("the emulated NPU's Triton driver answers in its place" if cann.active != "stub" else
              "on the CANN host stub no kernel is compiled for an NPU, so none is needed")
    return HiddenWarning(
        "[Errno 2] No such file or directory: 'ccec'",
        f"triton-ascend {version}'s driver looks for its bisheng compiler (ccec) to decide whether it is active; "
        f"there is none on this host, and {answer}",
        pattern=r"(\x1b\[[0-9;]*m)?\[Errno 2\] No such file or directory. 'ccec'")
