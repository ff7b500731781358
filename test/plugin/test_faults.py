"""Crashes, hangs, dead zygotes and interrupts: every test gets its reports, no process is left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from siblings import FIND_SIBLINGS

pytestmark = pytest.mark.usefixtures("fake_heavy_package")

CRASHES = """
import os, signal, sys
import pytest

pytestmark = pytest.mark.npu_lazy(preload=[])

def test_segfault():
    print("before the segfault")
    sys.stderr.write("stderr before the segfault\\n")
    os.kill(os.getpid(), signal.SIGSEGV)

def test_abort():
    print("before the abort")
    os.abort()

def test_exit_zero_before_reporting():
    print("before exit 0")
    os._exit(0)

def test_exit_three_before_reporting():
    os._exit(3)

@pytest.fixture
def crashes_in_setup():
    os.kill(os.getpid(), signal.SIGKILL)

def test_killed_in_setup(crashes_in_setup):
    pass

def test_survivor():
    pass
"""


def test_crashes_give_exactly_one_failure_each(run_pytest, pytester):
    pytester.makepyfile(test_crash=CRASHES)
    run = run_pytest()
    assert run.outcomes == {
        "test_crash.py::test_segfault": "failed",
        "test_crash.py::test_abort": "failed",
        "test_crash.py::test_exit_zero_before_reporting": "failed",
        "test_crash.py::test_exit_three_before_reporting": "failed",
        "test_crash.py::test_killed_in_setup": "error",
        "test_crash.py::test_survivor": "passed",
    }, run.text()
    per_test = {}
    for rep in run.reports:
        per_test.setdefault(rep["nodeid"], []).append((rep["when"], rep["outcome"]))
    for nodeid, phases in per_test.items():  # a full set each: setup, call (unless setup failed), teardown
        expected = ["setup", "teardown"] if phases[0] == ("setup", "failed") else ["setup", "call", "teardown"]
        assert [when for when, _ in phases] == expected, (nodeid, phases)
    assert sum(o == "failed" for phases in per_test.values() for _, o in phases) == 5
    segfault = run.report("test_segfault", "call")
    assert "CRASHED with signal 11 (SIGSEGV)" in segfault["longrepr"]
    assert "test_crash.py\", line 9 in test_segfault" in segfault["longrepr"]  # where it crashed
    assert "frames of pytest and pytest-npu-lazy omitted" in segfault["longrepr"]
    sections = dict(map(tuple, segfault["sections"]))
    assert sections["Captured stdout call"] == "before the segfault\n"
    assert sections["Captured stderr call"].startswith("stderr before the segfault\n")
    assert "CRASHED with signal 6 (SIGABRT)" in run.report("test_abort", "call")["longrepr"]
    exit_zero = run.report("test_exit_zero_before_reporting", "call")
    assert "ended with exit status 0 before it finished reporting" in exit_zero["longrepr"]
    assert dict(map(tuple, exit_zero["sections"]))["Captured stdout call"] == "before exit 0\n"
    assert "exit status 3" in run.report("test_exit_three_before_reporting", "call")["longrepr"]
    assert "CRASHED with signal 9 (SIGKILL)" in run.report("test_killed_in_setup", "setup")["longrepr"]
    assert "5 failed" not in run.result.stdout.lines[-1] and "4 failed, 1 passed, 1 error" in run.result.stdout.lines[-1]


HANGS = """
import os, subprocess, sys, time
import pytest

@pytest.mark.npu_lazy(preload=[], timeout=1)
def test_hangs_with_a_grandchild(tmp_path_factory):
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["HANG_PIDS"], "w") as f:
        f.write(f"{os.getpid()} {os.getppid()} {worker.pid}")
    time.sleep(600)

@pytest.mark.npu_lazy(preload=[])
def test_after_the_hang():
    with open(os.environ["HANG_PIDS"] + ".after", "w") as f:
        f.write(str(os.getppid()))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
    return status not in ("Z", "X")


def test_hanging_test_is_killed_with_its_group_and_the_zygote_lives_on(run_pytest, pytester, monkeypatch):
    pids_file = pytester.path / "pids"
    monkeypatch.setenv("HANG_PIDS", str(pids_file))
    pytester.makepyfile(test_hang=HANGS)
    started = time.monotonic()
    run = run_pytest()
    assert time.monotonic() - started < 60
    assert run.outcomes == {"test_hang.py::test_hangs_with_a_grandchild": "failed",
                            "test_hang.py::test_after_the_hang": "passed"}, run.text()
    message = run.report("test_hangs_with_a_grandchild", "call")["longrepr"]
    assert "TIMEOUT: the isolated test ran longer than 1 s" in message
    assert "test_hang.py\", line 9 in test_hangs_with_a_grandchild" in message  # the stack dump
    child, zygote, worker = map(int, pids_file.read_text().split())
    assert not _alive(child) and not _alive(worker)
    assert int((pytester.path / "pids.after").read_text()) == zygote  # same zygote served the next test


def test_a_marker_timeout_of_0_or_none_lifts_the_ini_limit_for_its_test(run_pytest, pytester):
    """As ``--npu-lazy-timeout=0`` and the ini's 0 do for the run, the marker's 0 or None does for one test;
    a negative marker value is refused, naming what is accepted."""
    pytester.makeini("[pytest]\nnpu_lazy_timeout = 1\n")
    pytester.makepyfile(test_slow="""
        import time
        import pytest

        @pytest.mark.npu_lazy(preload=[], timeout=0)
        def test_zero():
            time.sleep(2.5)

        @pytest.mark.npu_lazy(preload=[], timeout=None)
        def test_none():
            time.sleep(2.5)

        @pytest.mark.npu_lazy(preload=[])
        def test_ini_limit():
            time.sleep(30)

        @pytest.mark.npu_lazy(preload=[], timeout=-1)
        def test_negative():
            pass
    """)
    run = run_pytest()
    assert run.outcomes == {"test_slow.py::test_zero": "passed", "test_slow.py::test_none": "passed",
                            "test_slow.py::test_ini_limit": "failed", "test_slow.py::test_negative": "error"}, \
        run.text()
    assert "ran longer than 1 s" in run.report("test_ini_limit", "call")["longrepr"]
    assert ("npu_lazy marker: timeout=-1 is negative; use a number of seconds, or 0 or None for no limit"
            in run.report("test_negative", "setup")["longrepr"])


@pytest.mark.needs("pytest_timeout")
def test_pytest_timeout_marker_is_honoured(run_pytest, pytester):
    pytester.makepyfile(test_pt="""
        import time
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        @pytest.mark.timeout(1)
        def test_sleeps():
            time.sleep(600)
    """)
    run = run_pytest()
    assert run.outcomes == {"test_pt.py::test_sleeps": "failed"}, run.text()
    assert "Timeout" in run.report("test_sleeps", "call")["longrepr"]


def test_killed_zygote_errors_the_test_and_is_replaced(run_pytest, pytester):
    pytester.makepyfile(test_zygote="""
        import os, signal, time
        import pytest

        pytestmark = pytest.mark.npu_lazy(preload=[])

        def test_1_before():
            print(os.getppid())

        def test_2_kills_its_zygote():
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(30)

        def test_3_after():
            print(os.getppid())
    """)
    run = run_pytest()
    assert run.outcomes == {"test_zygote.py::test_1_before": "passed",
                            "test_zygote.py::test_2_kills_its_zygote": "error",
                            "test_zygote.py::test_3_after": "passed"}, run.text()
    message = run.report("test_2_kills_its_zygote", "call")["longrepr"]
    assert "died while this test ran, with signal 9 (SIGKILL)" in message
    before = dict(map(tuple, run.report("test_1_before", "call")["sections"]))["Captured stdout call"]
    after = dict(map(tuple, run.report("test_3_after", "call")["sections"]))["Captured stdout call"]
    assert before != after


def test_a_request_to_a_zygote_killed_a_moment_ago_is_a_dead_zygote_not_an_internal_error():
    """The race behind the test above: the controller asks the zygote for the next test's child while the running
    test kills it. The send meets a broken pipe; the zygote counts as dead (ZygoteError, which the pool handles by
    replacing it), and pytest never sees the OSError (it was an INTERNALERROR that lost the remaining tests)."""
    import socket

    from pytest_npu_lazy.errors import ZygoteError
    from pytest_npu_lazy.forks.channel import Channel
    from pytest_npu_lazy.isolation.pytest_side.handles import SpareChild, ZygoteProcess
    from pytest_npu_lazy.settings import Baseline

    ours, theirs = socket.socketpair()
    theirs.close()
    process = ZygoteProcess(Baseline(preload=(), autoload=None), pid=12345, channel=Channel(ours))
    spare = SpareChild()
    with pytest.raises(ZygoteError, match=r"the zygote \(pid 12345, .*\) died: Broken pipe"):
        spare.ask(process)
    assert process.dead and not spare.requested
    spare.ask(process)  # a dead zygote is asked for nothing: no second error
    ours.close()


def test_children_forked_ahead_and_killed_by_a_test_are_replaced_not_lost(run_pytest, pytester):
    """A test kills its siblings, the children its zygote forked ahead for the next tests, and sees them dead. The
    pool finds them gone (socket hung up, SIGKILL pending, exiting, a zombie or reaped) and forks fresh ones: the
    next tests pass (they errored, "CRASHED with signal 9", in the killed children before). A kill the process has
    not yet acted on can still reach a test first; that test errors, naming the signal, and nothing is lost."""
    pytester.makepyfile(test_siblings=textwrap.dedent("""
        import os, signal, time
        import pytest

        pytestmark = pytest.mark.npu_lazy(preload=[])

        def test_1_kills_the_children_forked_ahead():
            for _ in range(300):
                if len(siblings()) >= 2:
                    break
                time.sleep(0.01)
            killed = siblings()
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
            for pid in killed:  # dead before this test ends: the pool's check meets them dead, not dying
                for _ in range(300):
                    try:
                        with open(f"/proc/{pid}/stat") as stat:
                            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                                break
                    except OSError:
                        break
                    time.sleep(0.01)

        def test_2_after():
            pass

        def test_3_after():
            pass
    """) + FIND_SIBLINGS)
    run = run_pytest()
    assert "INTERNALERROR" not in run.text(), run.text()
    assert run.outcomes["test_siblings.py::test_1_kills_the_children_forked_ahead"] == "passed", run.text()
    assert run.outcomes["test_siblings.py::test_2_after"] == "passed", run.text()
    assert run.outcomes["test_siblings.py::test_3_after"] == "passed", run.text()


def test_preload_that_fails_errors_each_affected_test(run_pytest, pytester):
    pytester.makepyfile(broken_dep="raise ImportError('broken_dep needs libfoo')\n", test_pre="""
        import pytest

        @pytest.mark.npu_lazy(preload=["broken_dep"])
        @pytest.mark.parametrize("n", range(2))
        def test_needs_broken(n):
            pass

        @pytest.mark.npu_lazy(preload=[])
        def test_other_baseline():
            pass
    """)
    run = run_pytest()
    assert run.outcomes == {"test_pre.py::test_needs_broken[0]": "error",
                            "test_pre.py::test_needs_broken[1]": "error",
                            "test_pre.py::test_other_baseline": "passed"}, run.text()
    message = run.report("test_needs_broken[0]", "setup")["longrepr"]
    assert "importing preload module 'broken_dep' failed" in message
    assert "ImportError: broken_dep needs libfoo" in message
    assert "INTERNALERROR" not in run.text()


def test_preload_that_hangs_errors_each_affected_test_within_its_timeout(run_pytest, pytester):
    """``import torch_npu`` stuck in a lock (a run-once set-up waiting on itself) must not hold the session:
    each test of that baseline errors at its own timeout, naming the preload, and no process is left."""
    tag = str(uuid.uuid4())
    pytester.makepyfile(stuck_dep="import threading\nthreading.Event().wait()\n", test_stuck="""
        import pytest

        @pytest.mark.npu_lazy(preload=["stuck_dep"], timeout=2)
        @pytest.mark.parametrize("n", range(2))
        def test_needs_stuck(n):
            pass

        @pytest.mark.npu_lazy(preload=[])
        def test_other_baseline():
            pass
    """)
    started = time.monotonic()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NPU_LAZY_LEAK_TAG", tag)
        run = run_pytest(timeout=120)
    assert time.monotonic() - started < 60, "the hung preload held the session"
    assert run.outcomes == {"test_stuck.py::test_needs_stuck[0]": "error",
                            "test_stuck.py::test_needs_stuck[1]": "error",
                            "test_stuck.py::test_other_baseline": "passed"}, run.text()
    message = run.report("test_needs_stuck[0]", "setup")["longrepr"]
    assert "was not ready within 2 s: its preload of stuck_dep did not finish within the test's timeout" in message
    deadline = time.monotonic() + 5
    while _tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _tagged_processes(tag) == []


def test_zygote_with_an_initialised_device_refuses_to_fork(run_pytest, pytester):
    pytester.makepyfile(fake_gpu_runtime="""
        import sys, types
        # what torch.cuda looks like once a preload touched the GPU
        sys.modules["torch.cuda"] = types.SimpleNamespace(is_initialized=lambda: True)
    """, test_gpu="""
        import pytest

        @pytest.mark.npu_lazy(preload=["fake_gpu_runtime"])
        def test_forked():
            pass
    """)
    run = run_pytest()
    assert run.outcomes == {"test_gpu.py::test_forked": "error"}, run.text()
    message = run.report("test_forked", "setup")["longrepr"]
    assert "refused to fork: CUDA was initialised in the zygote" in message
    assert "isolation='spawn'" in message


def test_threads_in_a_zygote_are_named_in_a_warning(run_pytest, pytester):
    pytester.makepyfile(starts_thread="""
        import threading, time
        threading.Thread(target=time.sleep, args=(600,), name="telemetry-uploader", daemon=True).start()
    """, test_thr="""
        import pytest

        @pytest.mark.npu_lazy(preload=["starts_thread"])
        def test_forked():
            pass
    """)
    run = run_pytest()
    assert run.outcomes == {"test_thr.py::test_forked": "passed"}, run.text()
    assert "1 Python thread(s) besides the main one (telemetry-uploader)" in run.text()


LONG = """
import os, time
import pytest

@pytest.mark.npu_lazy(preload=[])
@pytest.mark.parametrize("n", range(4))
def test_long(n):
    open(os.environ["STARTED_FILE"] + str(n), "w").close()
    time.sleep(600)
"""


def _tagged_processes(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if tag.encode() in (entry / "environ").read_bytes():
                    state = (entry / "stat").read_text().split()[2]
                    if state != "Z":
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def _kill_tagged(tag: str) -> None:
    for pid in _tagged_processes(tag):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _default_sigint() -> None:
    """A shell starts background jobs with SIGINT ignored, and Python keeps it so; a terminal's pytest has the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.needs("xdist")
def test_interrupt_leaves_no_process(pytester, tmp_path, how, workers):
    pytester.makepyfile(test_long=LONG)
    tag = str(uuid.uuid4())
    env = dict(os.environ, STARTED_FILE=str(tmp_path / "started"), NPU_LAZY_LEAK_TAG=tag)
    process = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", str(workers)],
                               cwd=pytester.path, env=env, start_new_session=True, preexec_fn=_default_sigint,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("started*")):
            assert time.monotonic() < deadline and process.poll() is None, process.communicate()[0].decode()
            time.sleep(0.05)
        assert _tagged_processes(tag)
        if how == "SIGINT":
            os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        else:
            process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0].decode()
        if how == "SIGINT":
            assert process.returncode == pytest.ExitCode.INTERRUPTED, output
            assert "KeyboardInterrupt" in output
        else:
            assert process.returncode == -signal.SIGTERM, output
        deadline = time.monotonic() + 10
        while _tagged_processes(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _tagged_processes(tag) == [], output
    finally:  # whatever failed above, this test leaves nothing behind either
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        _kill_tagged(tag)
        process.communicate(timeout=30)


def test_what_a_test_leaves_running_is_killed_when_it_ends(run_pytest, pytester):
    pytester.makepyfile(test_leftover="""
        import os, subprocess, time
        from pathlib import Path
        import pytest

        pytestmark = pytest.mark.npu_lazy(preload=[])
        PID_FILE = Path(__file__).with_name("leftover.pid")

        def alive(pid):
            try:
                return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
            except OSError:
                return False

        def test_1_starts_a_worker_and_leaves_it():
            worker = subprocess.Popen(["sleep", "600"])  # stays in the test's process group
            PID_FILE.write_text(str(worker.pid))

        def test_2_finds_it_gone():
            pid = int(PID_FILE.read_text())
            deadline = time.monotonic() + 5
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not alive(pid), f"the first test's worker {pid} outlived its test"
    """)
    run = run_pytest()
    assert run.outcomes == {"test_leftover.py::test_1_starts_a_worker_and_leaves_it": "passed",
                            "test_leftover.py::test_2_finds_it_gone": "passed"}, run.text()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.needs("xdist")
def test_normal_exit_and_failures_leave_no_process(pytester, workers):
    pytester.makepyfile(test_short="""
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        @pytest.mark.parametrize("n", range(4))
        def test_short(n):
            assert n % 2
    """)
    tag = str(uuid.uuid4())
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", str(workers)],
                          cwd=pytester.path, env=dict(os.environ, NPU_LAZY_LEAK_TAG=tag),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout
    assert "2 failed, 2 passed" in done.stdout
    deadline = time.monotonic() + 5
    while _tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _tagged_processes(tag) == []


@pytest.mark.needs("xdist")
def test_sigterm_under_xdist_ends_quietly(pytester, tmp_path):
    """Killing the controller mid-run must not leave workers to fail in xdist's session-finish hook."""
    pytester.makepyfile(test_quick="""
        import os, time
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        @pytest.mark.parametrize("n", range(400))
        def test_quick(n):
            if n == 20:
                open(os.environ["STARTED_FILE"], "w").close()
            time.sleep(0.02)
    """)
    tag = str(uuid.uuid4())
    started = tmp_path / "started"
    env = dict(os.environ, STARTED_FILE=str(started), NPU_LAZY_LEAK_TAG=tag)
    process = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2"],
                               cwd=pytester.path, env=env, start_new_session=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert time.monotonic() < deadline and process.poll() is None, process.communicate()[0].decode()
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0].decode()  # returns once every worker closed the pipe
        assert process.returncode == -signal.SIGTERM, output
        assert "PluggyTeardownRaisedWarning" not in output and "Traceback" not in output, output
        deadline = time.monotonic() + 10
        while _tagged_processes(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _tagged_processes(tag) == [], output
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        _kill_tagged(tag)
        process.communicate(timeout=30)
