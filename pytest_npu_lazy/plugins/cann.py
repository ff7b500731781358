"""The CANN plugin: which CANN torch_npu gets (real, the host stub, the emulated NPU, the one that computes),
made active before any conftest can import torch.

It owns the CANN status of the run (:func:`status`): the reports name it in the
header and the JSON report, and hide the warnings it explains. The import
recorder starts first: the emulated NPU's Triton driver and the computing
device hook module loads through it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from ..probe.recorder import RECORDER
from ..settings import add_cann_options, cann_mode

if TYPE_CHECKING:
    from ..cann import CannStatus

_STATUS = pytest.StashKey["CannStatus"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_cann_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Before any conftest runs: record imports, refuse a torch torch_npu cannot use, make torch_npu importable."""
    status(early_config)


def pytest_configure(config: pytest.Config) -> None:
    """Loaded after the conftests (pytester, -p in an ini file): activated now."""
    status(config)


def status(config: pytest.Config) -> CannStatus:
    """The run's CANN, activated on the first question (each process activates it once: zygotes and
    children inherit it)."""
    active = config.stash.get(_STATUS, None)
    if active is None:
        RECORDER.install(phase="pytest")
        _refuse_cuda_torch()
        active = config.stash[_STATUS] = _activate(config)
    return active


def _refuse_cuda_torch() -> None:
    """A CUDA torch beside torch_npu aborts the first ``import torch`` with a message that hides the cause."""
    from ..torch_build import problem

    text = problem(python=sys.executable)
    if text is not None:
        raise pytest.UsageError(f"pytest-npu-lazy: {text}")


def _activate(config: pytest.Config) -> CannStatus:
    from ..cann import CannError, activate

    try:
        active = activate(cann_mode(config))
    except CannError as exc:
        raise pytest.UsageError(f"pytest-npu-lazy: {exc}") from None
    from ..probe.device_calls import DEVICE_CALLS

    DEVICE_CALLS.start(lambda: RECORDER.phase, active.active)  # zygotes and children inherit it
    if active.active in ("emulate", "compute"):
        from ..cann import triton_driver

        RECORDER.on_load("triton.backends", triton_driver.install)
    if active.active == "compute":
        from ..cann import compute

        compute.install(RECORDER.on_load)
    return active
