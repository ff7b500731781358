"""Device calls as evidence: every ACL / HCCL / runtime call a process makes, with its phase and Python line.

The CANN host stub and the emulated NPU report each call they answer to a small C recorder
(``cann/device_calls.c``) that every stub library lists in DT_NEEDED. This module sets its
listener through ctypes. A call from a thread that holds the GIL arrives here at once, so
it gets the phase in force and the Python line behind it: the innermost frame outside
torch_npu (and outside this plugin), plus the innermost torch_npu frame. A call from a thread
without the GIL is queued in C with its time and placed in a phase by that time when the log is
read. Torch releases the GIL around every operator, so most calls are of that kind; where the
caller is a Python thread, a sampler thread (started in isolated test children only, where no
fork follows) reads that thread's frames while the call waits, for the first call of each name
in a phase (the one a failure names), so the line is known there too; later calls of that name
in the phase say that their line was not read. A call from a thread that runs no Python
(torch_npu's task queue) says that it has no line.

Under real CANN nothing records: :attr:`DeviceCallLog.unavailable` says why, and the fixture
skips instead of answering with an empty list. Nothing here imports torch or torch_npu.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from .recorder import RECORDER, CodeLocation, _is_machinery, _location

_LISTENER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_long, ctypes.c_double)
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # pytest_npu_lazy/


class _QueuedCall(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("result", ctypes.c_long), ("stamp", ctypes.c_double),
                ("thread", ctypes.c_long), ("sample", ctypes.c_long)]


@dataclass(frozen=True)
class DeviceCall:
    """One CANN call: its name, what it returned, when, and the Python code behind it."""

    name: str
    result: int
    stamp: float  # time.perf_counter() seconds
    phase: str | None  # None for a queued call until it is placed by time
    line: CodeLocation | None  # innermost frame outside torch_npu and this plugin
    torch_npu_line: CodeLocation | None  # innermost torch_npu frame
    thread: str = "python"  # "python"; for a call made without the GIL, the thread that made it

    @property
    def on_a_native_thread(self) -> bool:
        """Made on a thread that no live Python thread was when the call was read: a C++ thread of torch_npu's
        (its task queue) or torch's (autograd's workers), never the test's own thread."""
        return self.thread.startswith("native thread")

    def where(self) -> str:
        if self.line is None and self.thread.startswith("Python thread"):
            return f"Python line not read (made on {self.thread}; read for the first call of a name in a phase)"
        if self.line is None:
            return f"no Python line (made on {self.thread}: Python cannot be read then)"
        via = f" via {self.torch_npu_line}" if self.torch_npu_line is not None else ""
        return f"{self.line}{via}"


def _torch_npu_dir() -> str | None:
    module = sys.modules.get("torch_npu")
    path = getattr(module, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) + os.sep if path else None


def _lines(frame) -> tuple[CodeLocation | None, CodeLocation | None]:
    """(innermost frame outside torch_npu and this plugin's probe, innermost torch_npu frame)."""
    package = _torch_npu_dir()
    inside = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if package and filename.startswith(package):
            inside = inside or _location(frame)
        elif not filename.startswith(_HERE) and not _is_machinery(filename):
            return _location(frame), inside
        frame = frame.f_back
    return None, inside


class DeviceCallLog:
    """The process's device calls in order; one instance per process, inherited by forks."""

    def __init__(self) -> None:
        self.calls: list[DeviceCall] = []
        self.phase_of: Callable[[], str] = lambda: "?"
        self._library: ctypes.CDLL | None = None
        self._listener = _LISTENER_TYPE(self._on_call)  # kept alive: C holds a pointer to it
        self._sampler: threading.Thread | None = None
        self._samples: dict[int, tuple[CodeLocation | None, CodeLocation | None]] = {}
        self._next_sample = 1
        self._queue_buffer: ctypes.Array | None = None
        self.unavailable: str | None = "device calls are not recorded: recording was never started"

    # -- recording ------------------------------------------------------------
    def start(self, phase_of: Callable[[], str], cann_mode: str | None) -> None:
        """Record from now on, if the stub or the emulation is loaded; else say why not in ``unavailable``."""
        self.phase_of = phase_of
        if self._library is not None:
            return
        try:
            library = ctypes.CDLL(None)
            setter = library.npu_lazy_set_device_call_listener
        except (OSError, AttributeError):
            self.unavailable = _why_unavailable(cann_mode)
            return
        setter.argtypes = [_LISTENER_TYPE]
        setter.restype = None
        library.npu_lazy_take_queued_device_calls.restype = ctypes.c_size_t
        library.npu_lazy_take_queued_device_calls.argtypes = [ctypes.POINTER(_QueuedCall), ctypes.c_size_t]
        library.npu_lazy_dropped_device_calls.restype = ctypes.c_size_t
        setter(self._listener)
        self._library = library
        self.unavailable = None
        import atexit

        atexit.register(self.stop)  # torch_npu's C++ teardown calls CANN after Python is gone

    def sample_lines_once_needed(self) -> None:
        """Start the line sampler now if torch_npu is loaded, else right after it loads (in a leaf process only).

        The calls it serves come from Python threads that released the GIL around a call into CANN: torch's
        operators, once torch_npu is loaded. A test child that never loads torch_npu makes none, and skips a
        thread's start (its stack, its first faults) that would cost every isolated test. A test that calls a
        stub library through ctypes itself, without torch_npu, gets "Python line not read" for those calls.
        """
        if self._library is None:
            return
        if "torch_npu" in sys.modules:
            self.start_line_sampler()
        else:
            RECORDER.on_load("torch_npu", lambda name: self.start_line_sampler())

    def start_line_sampler(self) -> None:
        """Read the Python line of calls made while the GIL is released, from now on in this process.

        Only where no fork follows (an isolated test child): a thread running at a fork is the
        hazard every fork server here refuses. The C side forgets the sampler in a forked child.
        """
        library = self._library
        if library is None or (self._sampler is not None and self._sampler.is_alive()):
            return
        if not hasattr(library, "npu_lazy_next_sample_request"):  # a recorder built before sampling existed
            return
        library.npu_lazy_next_sample_request.restype = ctypes.c_ulong
        library.npu_lazy_answer_sample.argtypes = [ctypes.c_ulong, ctypes.c_long]
        library.npu_lazy_answer_sample.restype = None

        def serve() -> None:
            while True:
                ident = library.npu_lazy_next_sample_request()  # ctypes releases the GIL while it waits
                if ident == 0:
                    return
                frame = sys._current_frames().get(ident)
                sample, self._next_sample = self._next_sample, self._next_sample + 1
                self._samples[sample] = _lines(frame) if frame is not None else (None, None)
                library.npu_lazy_answer_sample(ident, sample)

        self._sampler = threading.Thread(target=serve, name="pytest-npu-lazy device-call lines", daemon=True)
        self._sampler.start()
        # the test's first device call must find the sampler waiting, not still starting (a loaded machine
        # can take a while to run a new thread): wait for it, sleeping so that it gets the GIL
        deadline = time.monotonic() + 5
        while not library.npu_lazy_sampler_ready() and time.monotonic() < deadline:
            time.sleep(0.001)

    def new_epoch(self) -> None:
        """A phase began: sample the Python line of the first call of each name again."""
        if self._sampler is not None and self._library is not None:
            self._library.npu_lazy_new_sampling_epoch()

    def stop(self) -> None:
        if self._sampler is not None and self._library is not None:
            self._library.npu_lazy_stop_sampler()
            self._sampler = None
        if self._library is not None:
            self._library.npu_lazy_set_device_call_listener(_LISTENER_TYPE())
            self._library = None
            self.unavailable = "device calls are not recorded: recording was stopped"

    def _on_call(self, name: bytes, result: int, stamp: float) -> None:
        """Called from C with the GIL held; must never raise (ctypes would only print it)."""
        try:
            line, torch_npu_line = _lines(sys._getframe(1))
            call = DeviceCall(name.decode(errors="replace"), int(result), stamp, self.phase_of(), line,
                              torch_npu_line)
            self.calls.append(call)
        except BaseException:  # a recorder must not break the call it records
            pass

    # -- reading ----------------------------------------------------------------
    def take_queued(self) -> None:
        """Move calls made without the GIL into the log, in time order (their phase is placed later)."""
        if self._library is None:
            return
        if self._queue_buffer is None:  # small and reused: most tests queue no call, and a big one costs page faults
            self._queue_buffer = (_QueuedCall * 256)()
        buffer = self._queue_buffer
        names: dict[int | None, str] = {}  # filled once a call comes; never empty then (this thread's name is in)
        native: dict[int, str] = {}
        taken = 0
        while True:
            count = self._library.npu_lazy_take_queued_device_calls(buffer, len(buffer))
            taken += count
            if count and not names:
                names = {thread.native_id: thread.name for thread in threading.enumerate()}
                names[threading.get_native_id()] = threading.current_thread().name  # a fork's main thread: a new id
            for item in buffer[:count]:
                if item.thread in names:
                    thread = f"Python thread {names[item.thread]!r} while the GIL was released"
                else:  # read once a take: torch_npu's queue makes most calls under emulate
                    if item.thread not in native:
                        native[item.thread] = _native_thread(item.thread)
                    thread = native[item.thread]
                line, torch_npu_line = self._samples.pop(item.sample, (None, None))
                self.calls.append(DeviceCall(item.name.decode(errors="replace"), int(item.result), item.stamp,
                                             None, line, torch_npu_line, thread=thread))
            if count < len(buffer):
                break
        if taken:  # calls made with the GIL are already in time order among themselves
            self.calls.sort(key=lambda call: call.stamp)

    @property
    def dropped(self) -> int:
        return int(self._library.npu_lazy_dropped_device_calls()) if self._library is not None else 0


def _native_thread(tid: int) -> str:
    """A thread that runs no Python, with the name its code gave it (torch_npu's task queue: ``acl_thread``)."""
    try:
        with open(f"/proc/self/task/{tid}/comm") as comm:
            return f"native thread {tid} {comm.read().strip()!r}"
    except OSError:  # it ended since, or no /proc
        return f"native thread {tid}"


def _why_unavailable(cann_mode: str | None) -> str:
    if cann_mode == "real":
        return ("device calls are not recorded under --npu-lazy-cann=real: real CANN has no call hook here; "
                "use --npu-lazy-cann=stub or emulate to record them")
    if cann_mode in (None, "off", "absent"):
        return ("device calls are not recorded: no CANN host stub or emulated NPU is loaded in this process "
                "(--npu-lazy-cann=stub or emulate records them)")
    return (f"device calls are not recorded: the CANN libraries loaded under --npu-lazy-cann={cann_mode} have no "
            "device-call recorder (a stub cache from an older pytest-npu-lazy? delete it to rebuild)")


def place_in_phases(calls: Iterable[DeviceCall], spans: list[tuple[str, float, float | None]],
                    to_offset: Callable[[float], float]) -> list[DeviceCall]:
    """Give each queued call (phase None) the innermost phase whose time span holds it."""
    placed = []
    for call in calls:
        if call.phase is None:
            call = DeviceCall(call.name, call.result, call.stamp, phase_holding(spans, to_offset(call.stamp)),
                              call.line, call.torch_npu_line, call.thread)
        placed.append(call)
    return placed


def phase_holding(spans: list[tuple[str, float, float | None]], at: float) -> str:
    """The innermost phase whose time span holds the offset ``at`` (spans in start order, nested ones later)."""
    holding = [name for name, start, end in spans if start <= at and (end is None or at <= end)]
    return holding[-1] if holding else "(between phases)"


def summarise(calls: list[DeviceCall]) -> dict[str, list[dict]]:
    """Per phase, runs of the same call from the same line as one entry with a count: plain data for reports."""
    by_phase: dict[str, list[dict]] = {}
    for call in calls:
        entries = by_phase.setdefault(call.phase or "?", [])
        where = call.where()
        last = entries[-1] if entries else None
        if last is not None and last["name"] == call.name and last["result"] == call.result and last["where"] == where:
            last["count"] += 1
        else:
            entries.append({"name": call.name, "result": call.result, "where": where, "count": 1})
    return by_phase


#: The process-wide log: started by the plugin where a CANN stub or emulation is loaded, inherited by forks.
DEVICE_CALLS = DeviceCallLog()
