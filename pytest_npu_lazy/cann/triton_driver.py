"""The emulated NPU's Triton driver: what triton-ascend's driver answers on an Ascend machine, and no more.

On a machine with an NPU, triton-ascend's ``NPUDriver`` is Triton's one active driver: it
tells Inductor the target (``npu`` and the SoC name) and the device's core counts, and it
launches compiled kernels. Here it is inactive, because it counts as active only where the
``bisheng`` compiler lists ``hiipu64``, so torch_npu's NPU codegen stops at Triton's
"0 active drivers" before a kernel's source is even complete.

Under ``--npu-lazy-cann=emulate`` this module registers one more Triton backend whose driver
answers those questions from the emulated model (:data:`.emulation.MODEL`, as the emulated
ACL calls do), so torch_npu's codegen runs to the end and writes the kernel, as on an NPU.
It compiles nothing (its compiler supports no target: triton-ascend's own compiler, which
needs bisheng, is the one Triton picks) and runs nothing: a launch is refused, and the
refusal loses the emulated device like any other. It is registered when ``triton.backends``
loads (an import hook of the recorder), so it changes nothing about what loads when.
"""

from __future__ import annotations

import ctypes
import functools

from .emulation import MODEL

BACKEND_NAME = "npu_lazy_emulated_npu"
ANNOUNCEMENT = (f"Triton: the emulated NPU's driver answers target npu/{MODEL.soc_name} and its core counts; "
                "it compiles and launches nothing (triton-ascend's compiler needs bisheng)")


def refuse_launch(kernel: str) -> None:
    """Refuse a kernel launch through the emulation's C refusal: said on stderr, and the device is lost."""
    what = f"Triton kernel launch ({kernel})".encode()
    try:
        refuse = ctypes.CDLL(None).npu_lazy_emulation_refuse
        refuse.argtypes, refuse.restype = [ctypes.c_char_p, ctypes.c_char_p], ctypes.c_long
        refuse(b"triton launch", what)
    except (OSError, AttributeError):
        pass
    raise RuntimeError(f"the emulated NPU ({MODEL.soc_name}) cannot run kernels: {what.decode()} needs a real "
                       "Ascend device (pytest-npu-lazy --npu-lazy-cann=emulate)")


def install(_loaded: str = "triton.backends") -> None:
    """Register the emulated NPU's driver beside triton-ascend's (called once ``triton.backends`` loaded)."""
    import triton.backends as backends
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class CompilesNothing:
        """Triton picks the compiler that supports the target: triton-ascend's, never this one."""

        @staticmethod
        def supports_target(target) -> bool:
            return False

    class EmulatedNpuUtils:
        """triton-ascend's NPUUtils questions, answered from the emulated model."""

        @functools.lru_cache()  # noqa: B019 - the driver's one utils object lives as long as the process
        def get_device_properties(self, device):
            return {"max_shared_mem": 1, "num_aicore": MODEL.cube_cores, "num_vectorcore": MODEL.vector_cores}

        def get_arch(self) -> str:
            return MODEL.soc_name

        def get_aicore_num(self) -> int:
            return MODEL.cube_cores

        def get_aivector_core_num(self) -> int:
            return MODEL.vector_cores

        def load_binary(self, name, kernel, shared, device):
            refuse_launch(name)

    class RefusingLauncher:
        def __init__(self, src, metadata) -> None:
            self.name = getattr(metadata, "name", "kernel")

        def __call__(self, *args, **kwargs):
            refuse_launch(self.name)

    class EmulatedNpuDriver(DriverBase):
        """Triton's one active driver under the emulation, as triton-ascend's is on an NPU machine."""

        @classmethod
        def is_active(cls) -> bool:
            return True

        def __init__(self) -> None:
            self.utils = EmulatedNpuUtils()
            self.launcher_cls = RefusingLauncher
            super().__init__()

        def get_current_target(self):
            return GPUTarget("npu", MODEL.soc_name, 0)

        def get_current_device(self) -> int:
            import torch

            return torch.npu.current_device()

        def set_current_device(self, device) -> None:
            import torch

            torch.npu.set_device(device)

        def get_current_stream(self, device=None) -> int:
            from torch_npu._C import _npu_getCurrentRawStream  # a C extension, no stubs (pyproject.toml: torch_npu untyped)

            return _npu_getCurrentRawStream(self.get_current_device() if device is None else device)

        def get_benchmarker(self):
            from triton.testing import do_bench

            return do_bench

        def get_device_interface(self):
            import torch

            return torch.npu

        def get_empty_cache_for_benchmark(self):
            import torch

            return torch.empty(192 * 1024 * 1024 // 4, dtype=torch.int, device="npu")

    backends.backends.setdefault(BACKEND_NAME, backends.Backend(compiler=CompilesNothing, driver=EmulatedNpuDriver))
