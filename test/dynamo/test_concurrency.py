"""Guarantee 7: the Inductor setup runs once under concurrent first calls, retries after a failure,
and works in a process forked after `import torch_npu`."""

from __future__ import annotations

import os
import threading

import pytest
from facts import INDUCTOR_SETUP, needs_deferred_setup
from forked import verdict_of_forked_child

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

#: called only from inside the body of torch_npu's run-once Inductor setup
SETUP_BODY_STEP = "_apply_npugraph_tree_methods"


@pytest.fixture
def setup_body_calls(monkeypatch):
    """Count (and optionally fail) executions of the Inductor setup's body."""
    import torch_npu.utils._graph_tree as graph_tree

    original = getattr(graph_tree, SETUP_BODY_STEP)
    record = {"calls": 0, "fail_first": False}

    def counting(*args, **kwargs):
        record["calls"] += 1
        if record["fail_first"] and record["calls"] == 1:
            raise RuntimeError("injected failure in the NPU Inductor setup")
        return original(*args, **kwargs)

    monkeypatch.setattr(graph_tree, SETUP_BODY_STEP, counting)
    return record


def test_concurrent_first_calls_run_the_setup_once(npu_lazy, setup_body_calls):
    import torch

    with npu_lazy.phase("wrap"):
        compiled = torch.compile(lambda x: torch.cos(x) + x, backend="inductor")
    inputs = [torch.randn(16) for _ in range(4)]
    results: list = [None] * len(inputs)
    barrier = threading.Barrier(len(inputs))

    def first_call(index: int) -> None:
        barrier.wait()
        try:
            results[index] = compiled(inputs[index])
        except BaseException as exc:  # reported below, with the thread that saw it
            results[index] = exc

    threads = [threading.Thread(target=first_call, args=(i,)) for i in range(len(inputs))]
    with npu_lazy.phase("first_calls"):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for x, result in zip(inputs, results):
        assert not isinstance(result, BaseException), result
        torch.testing.assert_close(result, torch.cos(x) + x)
    assert setup_body_calls["calls"] == 1
    assert npu_lazy.ran(INDUCTOR_SETUP)
    assert npu_lazy.first_loaded("torch_npu._inductor") == "first_calls"


def test_failed_setup_is_retried_by_the_next_call(npu_lazy, setup_body_calls):
    import torch

    setup_body_calls["fail_first"] = True
    compiled = npu_lazy.compile(lambda x: x.abs() + 2, backend="inductor")
    x = torch.randn(8)
    with pytest.raises(Exception, match="injected failure in the NPU Inductor setup"):
        compiled(x)
    assert not npu_lazy.ran(INDUCTOR_SETUP)
    compiled(x)  # the first call that succeeds, compared with eager
    assert npu_lazy.ran(INDUCTOR_SETUP)
    assert setup_body_calls["calls"] == 2


def test_setup_works_in_a_process_forked_after_import(npu_lazy):
    import torch
    import torch_npu.utils._dynamo as npu_dynamo

    def child() -> str:  # the forked process: compile, call, and say how it went
        x = torch.randn(8)
        out = torch.compile(lambda t: t * 3 - 1, backend="inductor")(x)
        ok = torch.allclose(out, x * 3 - 1) and npu_dynamo._lazy_inductor_setup.has_run
        return "ok" if ok else "wrong result or setup not run"

    verdict, status = verdict_of_forked_child(child)
    assert verdict == "ok", verdict
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert not npu_dynamo._lazy_inductor_setup.has_run  # the parent is untouched
