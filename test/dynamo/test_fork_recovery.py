"""A process forked while another thread is inside torch_npu's lazy set-up completes its own set-up.

torch_npu's ``run_once`` makes concurrent callers wait for the thread that
runs the set-up. After ``fork`` that thread does not exist in the child, so
``run_once`` resets its state there (``os.register_at_fork``); without the
reset the child's first set-up call waits forever. The child is bounded from
here, the parent: it is killed after a limit, its threads' stacks dumped
first, so a hang fails with the place it waits at instead of hanging the run.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import threading
import time
import traceback

import pytest
import regressions
from breakage import caught
from facts import needs_deferred_setup

pytestmark = [needs_deferred_setup,
              pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")]

#: set-up -> (module and function of a step inside its body, where the parent's thread is held)
HELD_STEPS = {
    "_lazy_dynamo_setup": ("torch_npu.utils._dynamo", "add_dynamo_methods_init"),
    "_lazy_inductor_setup": ("torch_npu.utils._graph_tree", "_apply_npugraph_tree_methods"),
}


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode(errors="replace")


def run_forked(work, limit: float) -> tuple[str | None, str, int | None]:
    """Run ``work()`` in a forked child, bounded from this process.

    Returns (the child's traceback, or None when ``work`` returned; the
    stacks of its threads if it was killed; its wait status, or None when it
    ran past ``limit`` and was killed: a stack dump through faulthandler,
    then SIGKILL).
    """
    verdict_read, verdict_write = os.pipe()
    stacks_read, stacks_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the forked child: report and leave, never return into pytest
        try:
            os.close(verdict_read)
            os.close(stacks_read)
            faulthandler.register(signal.SIGUSR1, file=stacks_write, all_threads=True)
            try:
                work()
                verdict = b""
            except BaseException:
                verdict = traceback.format_exc().encode()
            os.write(verdict_write, verdict or b"ok")
        finally:
            os._exit(0)
    os.close(verdict_write)
    os.close(stacks_write)
    deadline = time.monotonic() + limit
    status = None
    while status is None and time.monotonic() < deadline:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            status = wait_status
        else:
            time.sleep(0.02)
    if status is None:
        os.kill(pid, signal.SIGUSR1)  # faulthandler writes every thread's stack, even one blocked in a lock
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    verdict = _read_all(verdict_read)
    return (None if verdict == "ok" else verdict or "(the child wrote no verdict)"), _read_all(stacks_read), status


def _waiting_at(stacks: str) -> str:
    """The innermost torch_npu frame of the dumped stacks (faulthandler lists the newest frame first)."""
    for path, line, function in re.findall(r'File "([^"]+)", line (\d+) in (\S+)', stacks):
        if "torch_npu/" in path:
            return f"{path.split('site-packages/')[-1]}:{line} in {function}"
    return "(no torch_npu frame in the dump)"


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"], timeout=240)
@pytest.mark.parametrize("setup", HELD_STEPS)
def test_public_lazy_setup_recovers_after_fork(npu_lazy, monkeypatch, setup, limit=30.0):
    """A parent thread is held inside ``setup`` while the process forks; the child's own set-up completes.

    The child reaches the set-up the public way where there is one (the npu
    backend's entry point for Dynamo) and must run the set-up body itself,
    once; the parent's thread then finishes, having run the body once too.
    """
    import importlib

    import torch_npu.dynamo as npu_dynamo
    from torch_npu.utils import _dynamo

    owner_name, step = HELD_STEPS[setup]
    owner = importlib.import_module(owner_name)
    parent, body = os.getpid(), getattr(owner, step)
    entered, release = threading.Event(), threading.Event()
    ran_body = {"parent": 0, "child": 0}

    def held_in_parent(*args, **kwargs):
        ran_body["parent" if os.getpid() == parent else "child"] += 1
        if os.getpid() == parent:
            entered.set()
            release.wait(limit)
        return body(*args, **kwargs)

    monkeypatch.setattr(owner, step, held_in_parent)
    setup_function = getattr(_dynamo, setup)

    def child_setup():
        if setup == "_lazy_dynamo_setup":  # the npu backend without torchair: torch_npu's own eager fallback
            npu_dynamo._get_default_backend = lambda name: npu_dynamo._eager_npu_backend
            graph = object()
            assert npu_dynamo._npu_backend_entrypoint(graph, []) is graph, "the npu entry point returned another graph"
        else:
            setup_function()
        assert setup_function.has_run, f"{setup} returned in the child without having run"
        assert ran_body["child"] == 1, f"the child ran {owner_name}.{step} {ran_body['child']} times, not once"

    thread = threading.Thread(target=setup_function, name=f"parent-{setup}", daemon=True)
    with npu_lazy.phase("parent_setup"):
        thread.start()
        assert entered.wait(limit), f"the parent's thread never reached {owner_name}.{step} inside {setup}"
    try:
        with npu_lazy.phase("fork"):
            failure, stacks, status = run_forked(child_setup, limit)
    finally:
        release.set()
        thread.join(limit)
    assert status is not None, (
        f"the process forked while a parent thread was inside {setup} did not finish its own {setup} within "
        f"{limit:.0f} s (phase 'fork') and was killed from the parent; it waited at {_waiting_at(stacks)}\n"
        "its stacks, newest frame first:\n" + "\n".join(stacks.splitlines()[:12]))
    assert failure is None, f"the child's {setup} failed (phase 'fork'):\n{failure}"
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the child ended with wait status {status}"
    assert not thread.is_alive(), f"the parent's {setup} did not finish after it was released"
    assert setup_function.has_run and ran_body["parent"] == 1, (
        f"the parent's {setup}: has_run={setup_function.has_run}, its body ran {ran_body['parent']} times")


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"], timeout=120)
def test_lost_fork_reset_is_caught(npu_lazy, monkeypatch):
    regressions.run_once_without_fork_reset()
    caught(test_public_lazy_setup_recovers_after_fork, npu_lazy, monkeypatch, "_lazy_dynamo_setup", 5.0,
                       says=["did not finish its own _lazy_dynamo_setup within 5 s (phase 'fork')",
                             "it waited at torch_npu/utils/_dynamo.py:", "in wrapper"])
