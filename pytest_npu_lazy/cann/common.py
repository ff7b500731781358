"""Constants and the error type shared by every part of the CANN host stub."""

from __future__ import annotations

import hashlib
from importlib import metadata
from pathlib import Path

MODES = ("auto", "real", "stub", "emulate", "compute", "off")
# the modes that load the emulated NPU: "compute" is "emulate" whose device also computes (cann/compute/)
EMULATED_MODES = ("emulate", "compute")

# The device-call recorder every stub and the emulation link against (DT_NEEDED), built first.
RECORDER_SOURCE = Path(__file__).with_name("device_calls.c")
RECORDER_SONAME = "libnpu_lazy_device_calls.so"

# Bump whenever the analysis or the generated C changes: it is part of every cache key, and so
# is the recorder's source, which every library of a build links against.
GENERATOR_VERSION = "2." + hashlib.sha256(RECORDER_SOURCE.read_bytes()).hexdigest()[:8]

# ACL_ERROR_RT_NO_DEVICE from CANN's public rt_error_codes.h: the honest answer of every stub.
NO_DEVICE_ERROR = 207004

ENV_MODE = "PYTEST_NPU_LAZY_CANN"
ENV_CACHE = "PYTEST_NPU_LAZY_CACHE"
ENV_TRACE = "PYTEST_NPU_LAZY_CANN_TRACE"
MANIFEST_NAME = "npu-lazy-stub.json"
STUB_MARKER_SYMBOL = "pytest_npu_lazy_cann_stub"


class CannError(Exception):
    """Raised with a message that says what is wrong and how to fix it."""


def distribution_version(name: str) -> str | None:
    """An installed distribution's version from its metadata, without importing it; None if absent."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
