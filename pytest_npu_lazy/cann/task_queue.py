"""torch_npu's task queue on the emulated NPU: wait until its thread has set the device, as a device's first copy does.

torch_npu's device start creates the default stream on the caller's thread and then starts the task queue's
thread (``NPUQueue.cpp``, ``StartConsume``), a C++ thread that runs no Python and whose first act is
``aclrtSetDevice``. On a device, the first copy is a task that thread runs, so the caller's synchronous copy
returns only after the thread has set the device. Under ``--npu-lazy-cann=compute`` a host kernel computes on the
caller's thread, and a phase can end (a device start by ``torch_npu.npu.init()`` or ``torch.empty``, under any
mode) before a loaded machine has run that thread at all: its ``aclrtSetDevice`` would then land in a later
phase and read as that phase's own device call, a guarantee broken by nobody.

So the emulation says where the queue stands (``npu_lazy_emulation_queue_state`` in ``emulation.c``), and
:func:`wait_until_bound` waits, bounded, while the default stream exists and the queue's thread has not set the
device: the probe calls it at every phase switch, the compute mode's host kernels after each operator. Once the
thread has set the device it costs one flag read. torch_npu's own switches that start no queue
(``TASK_QUEUE_ENABLE=0``, ``ASCEND_LAUNCH_BLOCKING=1``) wait for nothing. The emulated NPU has one device, so one
queue is waited for; the extra queues of ``PER_STREAM_QUEUE`` are not.

Nothing here imports torch or torch_npu.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import time
from typing import Callable

#: how long a phase switch or a host kernel waits for the queue's thread at most (a loaded runner can take
#: seconds to run a new thread); past it nothing in this process waits again
BINDING_WAIT_S = 10.0

NO_STREAM, UNBOUND, BOUND = 0, 1, 2

_STRTOL = re.compile(r"\s*[+-]?[0-9]+")

_state: Callable[[], int] | None = None
_settled = False  # bound, no queue to wait for, or given up: no later call waits


def _leading_int(text: str | None, default: int) -> int:
    """C's ``strtol(text, NULL, 10)``, as torch_npu reads its switches: leading blanks, a sign, the ASCII digits
    that follow; 0 where there are none."""
    if text is None:
        return default
    number = _STRTOL.match(text)
    return int(number.group()) if number else 0


def queue_off(environ=os.environ) -> bool:
    """Whether torch_npu starts no task queue (``OptionsManager::GetTaskQueueEnable``): blocking launches, or
    ``TASK_QUEUE_ENABLE`` read as 0."""
    blocking = environ.get("ASCEND_LAUNCH_BLOCKING")
    if blocking is not None and _leading_int(blocking, 0) != 0:
        return True
    return _leading_int(environ.get("TASK_QUEUE_ENABLE"), 1) == 0


def _queue_state() -> Callable[[], int] | None:
    global _state
    if _state is None:
        if sys.modules.get("torch_npu") is None:
            # only torch_npu makes the stream a queue follows; and a symbol looked up in vain searches every
            # loaded library, at every phase switch of every test of a suite that never imports it
            return None
        try:
            function = ctypes.PyDLL(None).npu_lazy_emulation_queue_state
        except AttributeError:  # no emulated NPU in this process (the host stub, real CANN, off)
            return None
        function.restype, function.argtypes = ctypes.c_int, []
        _state = function
    return _state


def wait_until_bound(seconds: float | None = None) -> None:
    """Return once torch_npu's queue thread has set the device, if the default stream exists and a queue
    follows it; at most ``seconds`` (:data:`BINDING_WAIT_S`)."""
    global _settled
    if _settled:
        return
    state = _queue_state()
    if state is None:  # no emulated NPU loaded (yet: it comes with torch_npu's libraries)
        return
    now = state()
    if now == NO_STREAM:  # the device has not started: nothing to wait for yet
        return
    if now == BOUND or queue_off():
        _settled = True
        return
    deadline = time.monotonic() + (BINDING_WAIT_S if seconds is None else seconds)
    while state() != BOUND and time.monotonic() < deadline:
        time.sleep(0.001)
    _settled = True  # bound, or given up: a thread that never came is not waited for twice

