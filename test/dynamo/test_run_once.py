"""torch_npu's ``run_once``: the lock every deferred set-up step goes through, pinned on its own.

``torch_npu.utils._dynamo.run_once`` guards the Dynamo and Inductor set-ups:
the first call that succeeds runs the function, later calls do nothing; a
call that fails leaves it to be run again; a second thread that arrives while
it runs waits for it (and runs it itself if it failed); a call from inside the
function, on the same thread, returns at once instead of waiting on itself.
The set-ups built on it are tested through torch_npu elsewhere
(test_concurrency, test_setup_steps); here each rule is checked directly, with
every wait bounded, so a broken rule fails the test instead of hanging it.
"""

from __future__ import annotations

import threading

import pytest
from facts import needs_deferred_setup
from forked import verdict_of_forked_child

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

#: how long a thread may take to do what the test waits for; far above what it needs
PATIENCE = 5.0


@pytest.fixture
def run_once():
    from torch_npu.utils._dynamo import run_once

    return run_once


def test_the_first_call_returns_the_functions_result_and_later_calls_run_nothing(run_once):
    calls = []

    @run_once
    def setup(value):
        calls.append(value)
        return value * 2

    assert not setup.has_run
    assert setup(21) == 42, "the call that ran the function did not return its result"
    assert setup.has_run
    assert setup(5) is None and calls == [21]


def test_a_call_from_inside_the_function_returns_at_once_instead_of_waiting_on_itself(run_once):
    inner = []

    @run_once
    def setup():
        inner.append(setup())  # what a set-up step that triggers the set-up again does
        return "outer"

    worker = threading.Thread(target=lambda: inner.append(setup()), daemon=True)
    worker.start()
    worker.join(PATIENCE)
    assert not worker.is_alive(), "a call from inside the run-once function waited on itself (deadlock)"
    assert inner == [None, "outer"]


def _blocked_setup(run_once, fail: bool):
    """A run-once function that blocks until released, then fails or succeeds; it counts its runs."""
    entered, release = threading.Event(), threading.Event()
    runs = []

    @run_once
    def setup():
        runs.append(threading.get_ident())
        if len(runs) == 1:
            entered.set()
            assert release.wait(PATIENCE), "the test never released the first run"
            if fail:
                raise RuntimeError("injected failure of the first run")
        return "done"

    return setup, entered, release, runs


@pytest.mark.parametrize("first_fails", [False, True], ids=["first-succeeds", "first-fails"])
def test_a_second_thread_waits_for_the_running_call_and_runs_it_only_if_that_failed(run_once, first_fails):
    setup, entered, release, runs = _blocked_setup(run_once, first_fails)
    outcomes: dict[str, object] = {}

    def call(name):
        try:
            outcomes[name] = setup()
        except Exception as exc:
            outcomes[name] = exc

    first = threading.Thread(target=call, args=("first",), daemon=True)
    first.start()
    assert entered.wait(PATIENCE)
    second = threading.Thread(target=call, args=("second",), daemon=True)
    second.start()
    second.join(0.3)
    assert second.is_alive() and "second" not in outcomes, (
        f"the second call returned {outcomes.get('second')!r} while the first still ran, without waiting for it")
    release.set()
    first.join(PATIENCE)
    second.join(PATIENCE)
    assert not second.is_alive(), "the second call was never woken after the first one ended"
    if first_fails:
        assert isinstance(outcomes["first"], RuntimeError)
        assert outcomes["second"] == "done" and len(runs) == 2, (
            f"after the first run failed, the waiting call returned {outcomes['second']!r} with {len(runs)} runs; "
            "it must run the function itself")
        assert runs[1] == second.ident
    else:
        assert outcomes == {"first": "done", "second": None} and len(runs) == 1
    assert setup.has_run


def test_a_process_forked_while_another_thread_runs_it_can_run_it(run_once):
    """The thread running the function is not copied by fork: the child must not wait for it forever."""
    setup, entered, release, runs = _blocked_setup(run_once, fail=False)
    first = threading.Thread(target=setup, daemon=True)
    first.start()
    assert entered.wait(PATIENCE)

    def child() -> str:
        done = []
        worker = threading.Thread(target=lambda: done.append(setup()), daemon=True)
        worker.start()
        worker.join(PATIENCE)
        if worker.is_alive():
            return "the forked child waited for a run of a thread it does not have"
        return "ok" if done == ["done"] and setup.has_run else f"the child's call returned {done!r}"

    try:
        verdict, _ = verdict_of_forked_child(child)
    finally:
        release.set()
        first.join(PATIENCE)
    assert verdict == "ok", verdict
