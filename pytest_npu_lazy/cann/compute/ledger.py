"""What computed each value under ``--npu-lazy-cann=compute``: one entry per operator or kernel, in time order.

Under the compute mode nothing on the emulated NPU computes by itself: an eager operator on
``npu`` tensors runs ATen's CPU kernel on the device's host memory, a Triton kernel runs in
Triton's interpreter, and anything with neither is refused by the emulation (the device is
lost). Each of those three is written here as it happens, with a ``time.perf_counter()``
stamp, so the probe can place it in the test's phases (as it places device calls) and the
reports can say, per phase, what computed the values a test compared.

Plain data and the standard library only: the probe reads it, the cann package writes it,
and forked children inherit the list (a child reads only its own entries, from an index).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

#: The host computed an eager ATen operator with its CPU kernel on device memory.
HOST_ATEN = "host ATen kernel"
#: Triton's interpreter ran a kernel that torch_npu's Inductor backend generated.
TRITON_INTERPRETER = "Triton interpreter"
#: Nothing here can compute it: the emulation refused it and the device is lost.
REFUSED = "refused"
#: The device was lost before this operator: it failed without computing.
LOST = "device lost"

BY = (HOST_ATEN, TRITON_INTERPRETER, REFUSED, LOST)


@dataclass(frozen=True)
class Computation:
    """One operator or kernel and what computed it (``by``: one of :data:`BY`).

    ``wrote``: the device memory it may have written, as ``(start, end)`` address ranges of whole storages (a
    kernel's output arguments, an operator's results and in-place arguments): what :meth:`Ledger.last_writer`
    reads to say which computation produced a value."""

    by: str
    name: str
    stamp: float
    detail: str = ""
    wrote: tuple[tuple[int, int], ...] = ()


class Ledger:
    """The process's computations, appended to by the host kernels and the interpreter shims."""

    def __init__(self) -> None:
        self.entries: list[Computation] = []

    def record(self, by: str, name: str, detail: str = "", wrote: tuple[tuple[int, int], ...] = ()) -> None:
        self.entries.append(Computation(by, name, time.perf_counter(), detail, wrote))

    def add_detail(self, index: int, more: str) -> None:
        """Append to entry ``index``'s detail what was learnt while it ran (how an interpreted kernel's loops ran)."""
        entry = self.entries[index]
        self.entries[index] = dataclasses.replace(entry, detail=f"{entry.detail}; {more}")

    def since(self, index: int) -> list[Computation]:
        return self.entries[index:]

    def last_writer(self, start: int, end: int, since: int = 0) -> Computation | None:
        """The last computation since entry ``since`` that wrote memory overlapping ``[start, end)``, or None."""
        for entry in reversed(self.entries[since:]):
            if any(low < end and start < high for low, high in entry.wrote):
                return entry
        return None


#: The process-wide ledger (a forked child inherits its parent's entries and reads from its own index).
LEDGER = Ledger()


def summarise(entries: list[Computation], phase_of) -> dict[str, list[dict]]:
    """Per phase, each distinct (by, name, detail) once with a count, in first-seen order: plain data for reports."""
    by_phase: dict[str, dict[tuple[str, str, str], dict]] = {}
    for entry in entries:
        rows = by_phase.setdefault(phase_of(entry.stamp), {})
        key = (entry.by, entry.name, entry.detail)
        row = rows.get(key)
        if row is None:
            rows[key] = {"by": entry.by, "name": entry.name, "detail": entry.detail, "count": 1}
        else:
            row["count"] += 1
    return {phase: list(rows.values()) for phase, rows in by_phase.items()}
