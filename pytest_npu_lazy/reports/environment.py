"""What the run is testing against, read from package metadata without importing anything heavy.

The header and the JSON report both say it, so a result is never read
without knowing whether it came from a real NPU or the CANN host stub.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import asdict, dataclass

import pytest

from ..cann import CannStatus, npu_device_usable
from ..cann.common import distribution_version
from .known_warnings import hidden_warnings

REQUIRES_NPU_HELP = (
    "requires_npu(emulated=False): the test needs a real NPU device; it skips, saying why, on the CANN host "
    "stub. emulated=True: device discovery and initialisation are enough, so the emulated NPU "
    "(--npu-lazy-cann=emulate or compute) runs it too; emulated='compute': the device must compute, so the "
    "emulated NPU that computes (--npu-lazy-cann=compute) runs it, and plain emulation skips it; a real NPU "
    "runner runs it for real."
)
#: the longest default header line the Inductor cache policy may join
HEADER_WIDTH = 124
#: what ``requires_npu(emulated=...)`` takes
EMULATED_CHOICES = (False, True, "compute")


def triton_flavour() -> tuple[str, str | None]:
    """("triton-ascend" | "upstream" | "absent", version)."""
    ascend = distribution_version("triton-ascend")
    if ascend:
        return "triton-ascend", ascend
    upstream = distribution_version("triton")
    if upstream:
        return "upstream", upstream
    return "absent", None


@dataclass(frozen=True)
class Environment:
    torch: str | None
    torch_npu: str | None
    cann_mode: str
    cann_version: str | None
    cann: str
    triton_flavour: str
    triton: str | None
    device: str
    python: str
    platform: str
    #: warnings hidden because they are false or harmless here, with the reason: ``[{"message", "reason", ...}]``
    hidden_warnings: tuple = ()
    #: why ``import triton`` fails in a fresh interpreter here, where Triton is installed and does not import
    triton_import_error: str | None = None

    def header_lines(self, verbose: bool = False, inductor_cache: tuple[str, str] | None = None) -> list[str]:
        """The plugin's lines in pytest's header: the one place that decides what a run shows.

        By default two: what the run tests against (versions, Triton, the device and the CANN mode), and how
        many known warnings are hidden, where their reasons are, and the Inductor cache policy where it fits.
        With ``verbose`` (``-v``): the CANN line in full, each hidden warning with its reason, and the cache
        policy explained. ``inductor_cache``: the policy's name and its explanation.
        """
        triton = f"{self.triton_flavour} {self.triton}" if self.triton else self.triton_flavour
        if self.triton_import_error:
            triton += f" (does not import: {self.triton_import_error})"
        cann = {"real": f", CANN: {self.cann_version or 'version unknown'}", "off": ", CANN: off"}.get(self.cann_mode, "")
        lines = [f"npu_lazy: torch {self.torch or 'absent'}, torch_npu {self.torch_npu or 'absent'}, "
                 f"triton {triton}, device {self.device}{cann}"]
        policy, explained = inductor_cache or (None, None)
        if verbose:
            lines.append(f"npu_lazy: {self.cann}")
            lines += [f"npu_lazy: hiding the warning {w['message']!r}: {w['reason']}" for w in self.hidden_warnings]
            if self.hidden_warnings:
                lines.append("npu_lazy: (each is an ini-level filter: -W default, or a filterwarnings line of yours "
                             "naming it, shows it again)")
            if policy:
                lines.append(f"npu_lazy: Inductor cache of isolated tests: {policy} ({explained}); tests run "
                             "in-process share the process's")
            return lines
        count = len(self.hidden_warnings)
        parts = [f"{count} known warning{'s' if count != 1 else ''} hidden (reasons: -v, or the JSON report's "
                 "environment.hidden_warnings)"] if count else []
        cache = f"Inductor cache: {policy}" if policy else None
        if cache and len("npu_lazy: " + "; ".join([*parts, cache])) <= HEADER_WIDTH:
            parts.append(cache)
        if parts:
            lines.append("npu_lazy: " + "; ".join(parts))
        return lines

    def to_dict(self) -> dict:
        return asdict(self)


def nvidia_gpus() -> int:
    """GPUs the NVIDIA driver lists and CUDA_VISIBLE_DEVICES leaves visible, without importing torch (which
    would initialise CUDA in the pytest process, before zygotes fork)."""
    try:
        count = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip() and not d.strip().startswith("-")]))
    return count


def describe(cann: CannStatus, npu_checked: tuple[bool, str] | None = None) -> Environment:
    torch = distribution_version("torch")
    flavour, triton = triton_flavour()
    if cann.active == "real":
        if npu_checked is None:
            device = "npu if torch_npu sees one (--npu-lazy-require-npu checks it)"
        else:
            device = "npu" if npu_checked[0] else f"cpu ({npu_checked[1]})"
    elif cann.active == "emulate":
        device = (f"npu (emulated {cann.version}: device paths run, kernels do not; tests compute on cpu, "
                  "npu_lazy.device)")
    elif cann.active == "compute":
        device = (f"npu (emulated {cann.version}, computing on the host: eager operators by ATen's CPU kernels, "
                  "Triton kernels in Triton's interpreter)")
    elif torch and "+cpu" not in torch:
        gpus = nvidia_gpus()
        device = f"cuda ({gpus} NVIDIA GPU{'s' if gpus > 1 else ''} visible)" if gpus else "cpu (CUDA build, no GPU visible)"
    else:
        device = "cpu" + (" (no NPU: CANN host stub)" if cann.active == "stub" else "")
    return Environment(
        torch=torch, torch_npu=distribution_version("torch-npu") or distribution_version("torch_npu"),
        cann_mode=cann.active, cann_version=cann.version, cann=cann.header(),
        triton_flavour=flavour, triton=triton, device=device,
        python=platform.python_version(), platform=f"{sys.platform}-{platform.machine()}",
        hidden_warnings=tuple(w.to_dict() for w in hidden_warnings(cann)),
        triton_import_error=_triton_import_error(flavour),
    )


def _triton_import_error(flavour: str) -> str | None:
    """Why an installed Triton does not import here (asked of a fresh interpreter, cached per environment)."""
    if flavour == "absent":
        return None
    from ..cann.triton_import import triton_import

    answer = triton_import()
    return None if answer.imports else answer.error


def npu_missing_reason(cann: CannStatus, emulated_ok: bool | str = False) -> str | None:
    """Why a test that needs a real NPU device (or, with emulated_ok, any NPU; with "compute", one that computes)
    must skip, without importing torch_npu."""
    if cann.active == "emulate":
        if emulated_ok is True:
            return None
        if emulated_ok == "compute":
            return (f"needs an NPU that computes: running on the emulated NPU ({cann.version}), which runs no "
                    "kernels (--npu-lazy-cann=compute computes them on the host)")
        return f"needs a real NPU device: running on the emulated NPU ({cann.version}), which cannot run kernels"
    if cann.active == "compute":
        if emulated_ok:
            return None
        return (f"needs a real NPU device: running on the emulated NPU ({cann.version}) that computes on the host "
                "(ATen's CPU kernels, Triton's interpreter), which runs none of torch_npu's own NPU operators")
    if cann.active == "stub":
        if emulated_ok == "compute":
            return ("needs an NPU that computes, real or emulated (--npu-lazy-cann=compute): running on the CANN "
                    "host stub")
        if emulated_ok:
            return "needs an NPU device, real or emulated (--npu-lazy-cann=emulate): running on the CANN host stub"
        return "needs a real NPU device: running on the CANN host stub - no NPU device"
    if cann.active == "off":
        return "needs a real NPU device: CANN is off (--npu-lazy-cann=off)"
    if cann.active == "absent":
        return "needs a real NPU device: torch_npu is not installed"
    return None


class NpuGate:
    """Skips ``requires_npu`` tests without a real NPU, and fails the run under --npu-lazy-require-npu."""

    def __init__(self, cann: CannStatus) -> None:
        self.cann = cann
        self.answer: tuple[bool, str] | None = None  # a real NPU's availability, once asked

    def pytest_configure(self, config: pytest.Config) -> None:
        config.addinivalue_line("markers", REQUIRES_NPU_HELP)

    def missing_reason(self, emulated_ok: bool | str = False) -> str | None:
        reason = npu_missing_reason(self.cann, emulated_ok)
        if reason is None and self.cann.active not in ("emulate", "compute"):
            if self.answer is None:
                self.answer = npu_device_usable()  # in a subprocess: never initialise an NPU here
            reason = None if self.answer[0] else f"needs a real NPU device: {self.answer[1]}"
        return reason

    def require(self) -> None:
        """A misconfigured NPU runner must fail, not quietly test on the stub."""
        reason = self.missing_reason()
        if reason is not None:
            raise pytest.UsageError(f"--npu-lazy-require-npu: no usable NPU device: {reason}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        marker = item.get_closest_marker("requires_npu")
        if marker is not None:
            emulated_ok = marker.kwargs.get("emulated", False)
            known = isinstance(emulated_ok, (bool, str)) and emulated_ok in EMULATED_CHOICES
            if not known or marker.args or set(marker.kwargs) - {"emulated"}:
                pytest.fail(f"requires_npu takes only emulated=True, emulated=False or emulated='compute', got "
                            f"args {marker.args} and kwargs {marker.kwargs}", pytrace=False)
            reason = self.missing_reason(emulated_ok)
            if reason is not None:
                raise pytest.skip.Exception(reason, _use_item_location=True)
