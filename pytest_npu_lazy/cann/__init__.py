"""CANN host stub: lets torch_npu's real Python code run on machines without Ascend software.

torch_npu's native libraries list CANN sonames (libhccl.so, libascendcl.so, ...) in
DT_NEEDED, so without CANN even ``import torch`` fails (torch auto-loads torch_npu).
This module reads those ELF files, works out which sonames and symbols only CANN can
provide (everything torch, libpython and the system provide is dropped), compiles one
small stub library per soname whose functions all fail with "no device", and loads the
stubs with RTLD_GLOBAL before torch is imported. The dynamic linker then matches them by
soname: ``import torch_npu`` works and ``torch.npu.is_available()`` is False. Child
processes get the same stubs through LD_LIBRARY_PATH (see CannStatus.env).

Nothing here imports torch, torch_npu or triton: the package must run before them.

The parts, one module each: ``elf`` (reading the libraries), ``analysis``
(what only CANN provides), ``build`` (C source, compiler, shared cache),
``activation`` (real, stub or off, before torch loads), ``device`` (does a
real NPU answer), ``__main__`` (the command line).
"""

from __future__ import annotations

from .activation import CannStatus, _cann_version, activate
from .analysis import StubSpec, analyse, analyse_wheel
from .build import build_stub, default_cache_dir, load_stub
from .common import (ENV_CACHE, ENV_MODE, ENV_TRACE, GENERATOR_VERSION, MANIFEST_NAME, MODES, NO_DEVICE_ERROR,
                     STUB_MARKER_SYMBOL, CannError)
from .device import npu_device_usable

__all__ = [
    "ENV_CACHE", "ENV_MODE", "ENV_TRACE", "GENERATOR_VERSION", "MANIFEST_NAME", "MODES", "NO_DEVICE_ERROR",
    "STUB_MARKER_SYMBOL", "CannError", "CannStatus", "StubSpec", "_cann_version", "activate", "analyse",
    "analyse_wheel", "build_stub", "default_cache_dir", "load_stub", "main", "npu_device_usable",
]


def main(argv=None) -> int:
    """``python -m pytest_npu_lazy.cann``: kept here for callers of ``cann.main``."""
    from .__main__ import main as command_line

    return command_line(argv)
