"""``--npu-lazy-cann=compute``: the emulated NPU, and the device computes.

Everything ``emulate`` does (device discovery, initialisation, streams, events, host-backed
memory, the Triton driver's answers), and:

- :mod:`.host_kernels`: eager ATen operators on ``npu`` tensors run ATen's CPU kernels on
  the device's host memory;
- :mod:`.interpreter`: the Triton kernels torch_npu's Inductor backend generates run in
  Triton's interpreter, through torch_npu's own launcher and heuristics;
- :mod:`.batching`: a launch's programs run together where the kernel's source shows that
  changes no value (the interpreter's cost is per program);
- :mod:`.index_codegen`: torch_npu's index codegen's TTIR check compiles (Triton's frontend on the
  compiler's view of the kernel), so the kernels that run are those a device runs, not its fallback's;
- :mod:`.loops`: a sum's reduction loop runs its iterations together, folded in order, where the
  kernel's source shows that changes no value (the interpreter's cost is per iteration);
- :mod:`.ledger`: what computed each value (host ATen kernel, Triton interpreter, refused).

What has no CPU kernel (torch_npu's ``npu_*`` operators, ACL-only paths, collectives) is
refused as under ``emulate``, and the device is lost: nothing returns a value that nothing
computed. Nothing here runs at import: :func:`install` hooks each piece to the load of the
module it needs, so what ``import torch_npu``, the wrapper and the first call load stays
theirs. Like the rest of :mod:`..cann`, nothing here imports the plugin.
"""

from __future__ import annotations

from typing import Callable

from . import host_kernels, index_codegen, interpreter
from .ledger import BY, HOST_ATEN, LEDGER, LOST, REFUSED, TRITON_INTERPRETER, Computation

__all__ = ["BY", "HOST_ATEN", "LEDGER", "LOST", "REFUSED", "TRITON_INTERPRETER", "Computation", "describe",
           "install"]


def describe() -> str:
    """The header's words for what computes under this mode."""
    shims = [*(interpreter.shims_in_force() or interpreter.planned()),  # each module: in force, else planned
             *(index_codegen.in_force() or index_codegen.PLANNED)]
    bridges = f"; bridges to the installed Triton (docs/emulated-npu.md): {', '.join(shims)}" if shims else ""
    return ("eager operators by ATen's CPU kernels on the device's host memory, Triton kernels in Triton's "
            f"interpreter (TRITON_INTERPRET=1); what has neither is refused and loses the device{bridges}")


def install(on_load: Callable[[str, Callable[[str], object]], None]) -> None:
    """Hook the compute mode to module loads (``on_load(module, callback)``, the import recorder's)."""
    interpreter.activate_interpreter()
    on_load("torch_npu", host_kernels.install)
    on_load("triton.language", interpreter.install_language_shims)
    on_load("triton", index_codegen.remember_language)
    on_load("torch_npu._inductor.runtime.triton_heuristics", index_codegen.install)
    on_load("triton.runtime.interpreter", interpreter.install_interpreter_shims)
