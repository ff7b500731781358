"""Guarantee 12: the run-once set-ups keep their word under failure, threads and fork.

torch_npu's deferred set-ups (``_lazy_dynamo_setup``, ``_lazy_inductor_setup``
and the steps below them) are wrapped in its own ``run_once``: run the body
successfully once, make concurrent callers wait for it, let a failed body
be retried, and forget a half-run body in a forked child. The Dynamo set-up
runs its steps through ``_run_dynamo_setup_step``, which remembers each step
that succeeded, so a retry after a later step failed does not apply a patch
twice. The mutation pass (docs/mutation.md) found each of these unpinned.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
from facts import needs_deferred_setup
from forked import verdict_of_forked_child

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"])]

#: a step of the Dynamo set-up before the one made to fail, and the one made to fail
EARLIER_STEP, FAILING_STEP = "patch_user_defined_class_variable", "patch_npu_stream_context"


@pytest.fixture
def slow_inductor_setup(monkeypatch):
    """The Inductor set-up's body, slowed down and timed: when it started and ended, how often it ran."""
    import torch_npu.utils._graph_tree as graph_tree

    original = graph_tree._apply_npugraph_tree_methods
    record = {"calls": 0, "started": threading.Event(), "ended_at": None}

    def slow(*args, **kwargs):
        record["calls"] += 1
        record["started"].set()
        time.sleep(0.5)
        result = original(*args, **kwargs)
        record["ended_at"] = time.monotonic()
        return result

    monkeypatch.setattr(graph_tree, "_apply_npugraph_tree_methods", slow)
    return record


def test_a_retried_dynamo_setup_does_not_repeat_the_steps_that_succeeded(npu_lazy, monkeypatch):
    import torch_npu.utils._dynamo as npu_dynamo

    calls = {EARLIER_STEP: 0, FAILING_STEP: 0}

    def counted(name):
        original = getattr(npu_dynamo, name)

        def step():
            calls[name] += 1
            if name == FAILING_STEP and calls[name] == 1:
                raise RuntimeError("injected failure in a Dynamo set-up step")
            return original()
        return step

    for name in calls:
        monkeypatch.setattr(npu_dynamo, name, counted(name))
    with npu_lazy.phase("first_setup"), pytest.raises(RuntimeError, match="injected failure"):
        npu_dynamo._lazy_dynamo_setup()
    assert not npu_dynamo._lazy_dynamo_setup.has_run and not npu_dynamo.add_dynamo_methods_init.has_run
    with npu_lazy.phase("retry"):
        npu_dynamo._lazy_dynamo_setup()
    assert npu_dynamo._lazy_dynamo_setup.has_run and npu_dynamo.add_dynamo_methods_init.has_run
    assert calls == {EARLIER_STEP: 1, FAILING_STEP: 2}, "a step that succeeded ran again on the retry"
    # and the integration works after the retry: Dynamo traces NPU autocast through the patched class variable
    import torch

    out = torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 2.0))
    npu_dynamo._lazy_dynamo_setup()  # a later call changes nothing
    assert calls == {EARLIER_STEP: 1, FAILING_STEP: 2}


def test_a_second_caller_waits_for_the_running_setup_instead_of_going_on_without_it(slow_inductor_setup):
    import torch_npu.utils._dynamo as npu_dynamo

    returned_at = {}
    errors = []

    def call(name):
        try:
            npu_dynamo._lazy_inductor_setup()
        except BaseException as exc:  # reported below
            errors.append(exc)
        returned_at[name] = time.monotonic()

    first = threading.Thread(target=call, args=("first",))
    first.start()
    assert slow_inductor_setup["started"].wait(60), "the Inductor set-up's body never started"
    second = threading.Thread(target=call, args=("second",))
    second.start()
    first.join(120)
    second.join(120)
    assert not errors, errors
    assert slow_inductor_setup["calls"] == 1
    ended = slow_inductor_setup["ended_at"]
    assert ended is not None and returned_at["second"] >= ended, (
        f"the second caller went on {ended - returned_at['second']:.2f} s before the set-up it needs had finished")
    assert npu_dynamo._lazy_inductor_setup.has_run


def test_a_setup_running_in_another_thread_at_fork_runs_again_in_the_child(slow_inductor_setup):
    """The forked child has no copy of the thread running the body: it must neither wait for it nor skip it."""
    import torch_npu.utils._dynamo as npu_dynamo

    runner = threading.Thread(target=npu_dynamo._lazy_inductor_setup)
    runner.start()
    assert slow_inductor_setup["started"].wait(60)
    def child() -> str:
        done = threading.Event()
        threading.Thread(target=lambda: (npu_dynamo._lazy_inductor_setup(), done.set()), daemon=True).start()
        if not done.wait(20):
            return "the child waited for a set-up running in a thread it does not have"
        if not npu_dynamo._lazy_inductor_setup.has_run:
            return "the child skipped the set-up: has_run is False after the call"
        return "ok"

    verdict, _ = verdict_of_forked_child(child)
    runner.join(120)
    assert verdict == "ok", verdict
    assert slow_inductor_setup["calls"] == 1  # the parent's own run, once


def _run_once_condition(wrapped):
    """The ``threading.Condition`` torch_npu's ``run_once`` keeps in the wrapper's closure."""
    cells = dict(zip(wrapped.__code__.co_freevars, wrapped.__closure__ or ()))
    return cells["condition"].cell_contents


def test_a_child_forked_while_another_thread_holds_the_setup_lock_does_not_deadlock():
    """Forked while a thread of the parent holds run_once's lock, the child must get a lock of its own."""
    import torch_npu.utils._dynamo as npu_dynamo

    condition = _run_once_condition(npu_dynamo._lazy_inductor_setup)
    holding, release = threading.Event(), threading.Event()

    def hold():
        with condition:
            holding.set()
            release.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(60)
    def child() -> str:
        # in the main thread: a new thread may get the holder's thread id back and pass its re-entrant lock
        def give_up(signum, frame):
            raise TimeoutError("the child's set-up waited 20 s for a lock held by a thread the fork did not copy")

        signal.signal(signal.SIGALRM, give_up)
        signal.alarm(20)
        npu_dynamo._lazy_inductor_setup()
        signal.alarm(0)
        return "ok" if npu_dynamo._lazy_inductor_setup.has_run else "the child skipped the set-up"

    def let_the_holder_go():
        release.set()
        holder.join(60)

    verdict, _ = verdict_of_forked_child(child, meanwhile=let_the_holder_go)
    assert verdict == "ok", verdict


def test_the_deferred_dynamo_setup_applies_every_step(npu_lazy):
    """Creating the wrapper runs the deferred Dynamo set-up; each of its steps leaves a mark a user relies on.

    Each assertion names the step: a set-up that skips one (a deleted call, a step marked done before it
    ran) leaves Dynamo half-integrated, which the first NPU trace would find much later.
    """
    import torch

    with npu_lazy.phase("wrap"):
        torch.compile(lambda x: x + 1, backend="inductor")
    import torch._dynamo.variables.builtin as builtin
    import torch._dynamo.variables.streams as streams
    from torch._dynamo.device_interface import get_interface_for_device
    import torch._dynamo.variables.torch as dynamo_torch
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable
    from torch._functorch._aot_autograd import utils as aot_utils

    from torch_npu.utils._dynamo_device import NpuInterface

    steps = {
        "device interface 'npu'": get_interface_for_device("npu") is NpuInterface,
        "device interface 'npu:31'": get_interface_for_device("npu:31") is NpuInterface,
        "torch.npu.current_stream handler": torch.npu.current_stream in TorchInGraphFunctionVariable._get_handlers(),
        "NPU stream context handler":
            get_interface_for_device("npu").stream in TorchInGraphFunctionVariable._get_handlers(),
        "NPU autocast class variable": hasattr(UserDefinedClassVariable, "_UserDefinedClassVariable__new__raw")
            or hasattr(UserDefinedClassVariable, "__new__raw"),
        "NPU Event/Stream in graph classes": torch.npu.Event in UserDefinedClassVariable._in_graph_classes(),
        "stream and event python types": "python_type" in streams.StreamVariable.__dict__
            and streams.EventVariable.python_type is streams.StreamVariable.python_type,
        "id() of an NPU event": builtin.BuiltinVariable.call_id.__name__ == "_wrap_call_id",
        # registered by the set-up itself, not only reachable through torch_npu's entry points (absent where
        # torch_npu runs from a source tree without its package metadata)
        "npu Dynamo backend": _registered_by_torch_npu("npu"),
        "npugraph_ex Dynamo backend": _registered_by_torch_npu("npugraph_ex"),
        "NPU trace rules": torch.npu.current_device in dynamo_torch.constant_fold_functions,
        "graph-safe RNG for npu": "npu" in aot_utils._GRAPHSAFE_RNG_DEVICE_TYPES,
        "torch._dynamo.optimize knows the npu backend": torch._dynamo.optimize.__module__ == "torch_npu._compat.dynamo",
    }
    assert [step for step, applied in steps.items() if not applied] == [], "Dynamo set-up steps not applied"
    assert npu_lazy.first_loaded("torch._dynamo") == "wrap"


def _registered_by_torch_npu(name: str) -> bool:
    from torch._dynamo.backends.registry import _COMPILER_FNS

    return getattr(_COMPILER_FNS.get(name), "__module__", None) == "torch_npu.dynamo"


def test_the_run_once_setups_keep_their_names():
    """``run_once`` wraps with functools.wraps: tracebacks, logs and ``npu_lazy.ran`` name the set-up itself."""
    import torch_npu.utils._dynamo as npu_dynamo

    for name in ("_lazy_dynamo_setup", "_lazy_inductor_setup", "add_dynamo_methods_init"):
        setup = getattr(npu_dynamo, name)
        assert (setup.__name__, setup.__qualname__, setup.__module__) == (name, name, npu_dynamo.__name__)
        assert setup.__wrapped__.__name__ == name and setup.__doc__ == setup.__wrapped__.__doc__


def test_the_first_compiled_call_applies_every_inductor_setup_step(npu_lazy):
    """The deferred Inductor set-up's steps, each observable after the first call."""
    import torch

    compiled = npu_lazy.compile(lambda x: torch.sin(x) * 2, backend="inductor")
    assert not npu_lazy.ran("torch_npu.utils._dynamo:_lazy_inductor_setup")
    compiled(torch.randn(8))  # compared with eager
    import torch._inductor.config as inductor_config
    import torch._inductor.compile_fx as compile_fx
    from torch._dynamo.backends.registry import _COMPILER_FNS

    steps = {
        "NPU Inductor backend loaded (register_inductor_npu)": npu_lazy.first_loaded("torch_npu._inductor") is not None,
        "npugraphs backend": "npugraphs" in _COMPILER_FNS,
        "NPU graphs replace cudagraphify": compile_fx.cudagraphify.__module__ == "torch_npu.utils._graph_tree",
        "npu_backend in Inductor's config": "npu_backend" in inductor_config._config,
    }
    assert [step for step, applied in steps.items() if not applied] == [], "Inductor set-up steps not applied"
