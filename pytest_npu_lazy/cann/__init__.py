"""CANN for torch_npu on any machine: the host stub and the emulated NPU.

torch_npu's native libraries list CANN sonames (libhccl.so, libascendcl.so, ...) in
DT_NEEDED, so without CANN even ``import torch`` fails (torch auto-loads torch_npu).
This package reads those ELF files, works out which sonames and symbols only CANN can
provide (everything torch, libpython and the system provide is dropped), compiles one
small library per soname and loads them with RTLD_GLOBAL before torch is imported. The
dynamic linker then matches them by soname. The **host stub**'s functions all fail with
"no device", so ``torch.npu.is_available()`` is False; the **emulated NPU**'s run device
discovery, initialisation, streams, events and host-backed memory, and refuse kernels,
operators and collectives (a refusal loses the device); under ``compute`` the emulated
device also computes, on the host (:mod:`.compute`). Child processes get the same
libraries through LD_LIBRARY_PATH (see CannStatus.env).

Nothing here imports torch, torch_npu or triton, nor any other part of the plugin: the
package must run before them.

- :mod:`.common`: modes, variables, the error type; versions from metadata;
- :mod:`.elf`: reading the libraries (pyelftools);
- :mod:`.analysis`: what only CANN provides;
- :mod:`.build`: C source, compiler, the shared cache;
- :mod:`.emulation`: the emulated NPU's model, built from ``emulation.c``;
- ``device_calls.c``: the recorder every stub and emulation library links;
- :mod:`.task_queue`: torch_npu's task-queue thread on the emulated NPU, waited for so that its
  ``aclrtSetDevice`` stays in the phase that started the device;
- :mod:`.triton_driver`: the emulated NPU's Triton driver (compiles and runs nothing);
- :mod:`.triton_import`: does ``import triton`` succeed here, asked of a fresh interpreter, cached per environment;
- :mod:`.compute`: the emulated NPU that computes (eager operators on the host, Triton kernels interpreted);
- :mod:`.activation`: real, stub, emulate, compute or off, made active before torch loads;
- :mod:`.device`: does a real NPU answer;
- :mod:`.__main__`: the command line, ``python -m pytest_npu_lazy.cann``.
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
