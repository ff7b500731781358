"""torch_npu's device-side lazy initialisation, with the device calls as evidence.

Ported from torch_npu's own tests (Ascend/pytorch: test/test_torch_npu_init.py, the lazy-init
tests of test/test_npu.py and test/npu/test_torch_npu.py; docs/torch_npu-tests.md maps them),
stricter: theirs read ``torch_npu.npu.is_initialized()``, a Python flag, or infer from a device
count after changing ASCEND_RT_VISIBLE_DEVICES that no count was taken. Here every ACL call a
phase makes is recorded by the CANN host stub or the emulated NPU, so "no device call" means no
call reached CANN, and "initialises once" counts ``aclInit``.

On the stub (no device) the import, availability and wrapper checks run; the first device use
and the fork checks need a device and run on the emulated NPU (``--npu-lazy-cann=emulate``) or a
real one. Under real CANN, device calls cannot be recorded and those checks skip, saying so.
"""

from __future__ import annotations


import pytest
import regressions
from breakage import caught
from facts import (
    dynamo_trace_initialises_accelerator,
    inductor_cache_key_initialises_npu,
    needs_deferred_setup,
    npu_inductor_import_initialises_npu,
)

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch"])]

#: calls that initialise the device or make it current
INIT_CALLS = ("aclInit", "aclrtSetDevice")
#: host-side questions about the installed CANN packages: no device is involved
VERSION_QUERIES = {"aclsysGetCANNVersion", "aclsysGetVersionStr"}
#: what asking for availability and the device count may call: the count, and the stub's log of its "no device"
COUNT_CALLS = {"aclrtGetDeviceCount", "aclAppLog"}


def test_import_torch_npu_makes_no_device_call(npu_lazy):
    """Theirs: test_11 and test_lazy_init (a count after import sees a changed ASCEND_RT_VISIBLE_DEVICES),
    test_05 (the flag stays False). Ours: no initialisation, no count, nothing of the runtime at all."""
    with npu_lazy.phase("import"):
        import torch  # noqa: F401
        import torch_npu
    npu_lazy.assert_no_device_calls(*INIT_CALLS, "aclrtGetDeviceCount", "aclrt*", "Hccl*", "rt*", phase="import")
    assert not torch_npu.npu.is_initialized()
    unexpected = set(npu_lazy.device_calls("import")) - VERSION_QUERIES
    assert not unexpected, f"import torch_npu made device calls other than CANN version queries: {sorted(unexpected)}"


def test_availability_and_device_count_do_not_initialise(npu_lazy):
    """Theirs: test_05's first script. Ours: the calls made are the count and nothing that initialises."""
    import torch
    import torch_npu

    with npu_lazy.phase("probe"):
        available = torch.npu.is_available()
        count = torch.npu.device_count()
    npu_lazy.assert_no_device_calls(*INIT_CALLS, phase="probe")  # first: it names the call and the line
    assert not torch_npu.npu.is_initialized()
    assert available == (count > 0)
    calls = npu_lazy.device_calls("probe")
    assert "aclrtGetDeviceCount" in calls and set(calls) <= COUNT_CALLS, calls


def _first_uses():
    import torch
    import torch_npu

    return {
        "to_device": lambda: torch.zeros(2).to("npu"),
        "get_device_properties": lambda: torch.npu.get_device_properties(0),
        "init": torch_npu.npu.init,
        "current_device": torch.npu.current_device,
    }


@pytest.mark.requires_npu(emulated=True)
@pytest.mark.parametrize("first_use", ["to_device", "get_device_properties", "init", "current_device"])
def test_first_device_use_initialises_exactly_once(npu_lazy, first_use):
    """Theirs: test_05's second and third scripts (the flag is True after get_device_properties(0), after
    init()). Ours: that first use is the phase with the one aclInit of the test, and every later use, of
    any kind, initialises nothing again."""
    import torch_npu

    uses = _first_uses()
    with npu_lazy.phase("first_use"):
        uses[first_use]()
    assert torch_npu.npu.is_initialized()
    assert npu_lazy.device_calls("first_use").count("aclInit") == 1, npu_lazy.device_calls("first_use")
    with npu_lazy.phase("later_uses"):
        for use in uses.values():
            use()
    npu_lazy.assert_no_device_calls("aclInit", phase="later_uses")  # a first tensor may still bind its thread
    assert npu_lazy.device_calls().count("aclInit") == 1


def _answer(body, connection) -> None:
    try:
        answer = f"ok {body()}"
    except BaseException as error:
        answer = f"raised {type(error).__name__}: {error}"
    connection.send(answer)


def _in_a_fork(body) -> str:
    """Run ``body()`` in a child forked by multiprocessing (torch_npu marks a bad fork in multiprocessing's
    after-fork hook, as in their test), and return its answer: the value, or the error it raised."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_answer, args=(body, sender))
    child.start()
    sender.close()
    try:
        if not receiver.poll(120):
            raise AssertionError("the forked child gave no answer within 120 s")
        return receiver.recv()
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()


def test_a_fork_after_the_availability_check_is_a_good_fork(npu_lazy):
    """Stricter than theirs (not checked there): asking whether a device exists leaves a fork usable."""
    import torch
    import torch_npu

    with npu_lazy.phase("probe"):
        torch.npu.is_available()
    answer = _in_a_fork(lambda: torch_npu.npu._is_in_bad_fork())
    assert answer == "ok False", answer
    npu_lazy.assert_no_device_calls(*INIT_CALLS)


@pytest.mark.requires_npu(emulated=True)
def test_a_fork_after_initialisation_cannot_initialise_again(npu_lazy):
    """Theirs: test/npu/test_torch_npu.py::test_lazy_init (a multiprocessing child of the default fork start
    method). Ours names the start method, so Python 3.14's forkserver default cannot make it pass vacuously,
    and checks the parent initialised exactly once."""
    import torch
    import torch_npu

    with npu_lazy.phase("init"):
        torch.npu.current_device()
    answer = _in_a_fork(lambda: torch.zeros(2).to("npu:0"))
    assert answer.startswith("raised RuntimeError") and "Cannot re-initialize NPU in forked subprocess" in answer, answer
    assert torch_npu.npu.is_initialized() and npu_lazy.device_calls().count("aclInit") == 1


@pytest.mark.parametrize("backend", ["inductor", "eager", "aot_eager", "npugraphs"])
def test_wrapper_creation_makes_no_device_call(npu_lazy, backend):
    """The wrapper of every backend that defers its set-up to the first call touches no device (ours only;
    theirs check modules, not the device)."""
    import torch
    import torch_npu

    npu_lazy.compile(lambda x: torch.sin(x) + 1, backend=backend)
    npu_lazy.assert_no_device_calls("acl*", "Hccl*", "rt*", phase="wrap")
    assert not torch_npu.npu.is_initialized()


def _cpu_first_call_initialises(backend: str) -> str | None:
    """Who initialises the NPU during a first compiled call on CPU tensors here, or None (facts.py)."""
    import torch

    causes = []
    if torch.npu.is_available() and dynamo_trace_initialises_accelerator():
        causes.append(f"stock torch: {dynamo_trace_initialises_accelerator()} asks for the current accelerator "
                      "stream as every Dynamo trace starts, with a device present")
    if backend == "inductor" and inductor_cache_key_initialises_npu():
        causes.append(f"torch_npu: {inductor_cache_key_initialises_npu()}")
    return "; ".join(causes) or None


@pytest.mark.parametrize("backend", ["inductor", "eager", "aot_eager"])
def test_first_call_on_cpu_tensors_does_not_initialise_the_device(npu_lazy, backend, request):
    """A CPU-only compile has no business initialising the NPU. Where torch or torch_npu does it anyway
    (facts: who and where), the test is a strict xfail naming them: it flips to a failure once they stop."""
    import torch

    with npu_lazy.phase("import"):
        import torch_npu
    cause = _cpu_first_call_initialises(backend)
    if cause:
        request.applymarker(pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"known: {cause}"))
    fn = npu_lazy.compile(lambda x: torch.sin(x) + 1, backend=backend)
    fn(torch.randn(8))
    npu_lazy.assert_no_device_calls("aclInit", phase="first_call")
    assert not torch_npu.npu.is_initialized()


@pytest.mark.requires_npu(emulated=True)
@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_importing_npu_inductor_does_not_initialise_the_device(npu_lazy, request):
    """``import torch_npu._inductor`` (the first Inductor call's, or a library's at start-up) is an import: it must
    leave the device alone, as ``import torch_npu`` does, so that a process may still fork workers that use the NPU.
    Where torch_npu reads the SoC version at import (facts), a strict xfail naming the line: it flips to a failure
    once torch_npu stops."""
    cause = npu_inductor_import_initialises_npu()
    if cause:
        request.applymarker(pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"known: {cause}"))
    with npu_lazy.phase("npu_inductor"):
        import torch_npu._inductor  # noqa: F401 - the import is the test
    npu_lazy.assert_no_device_calls(*INIT_CALLS, phase="npu_inductor")


# -- the regression zoo for this group ------------------------------------------------------------------------


def test_import_probing_the_device_count_is_caught(npu_lazy):
    regressions.import_probes_device_count()
    caught(test_import_torch_npu_makes_no_device_call, npu_lazy,
           says=("device call 'aclrtGetDeviceCount' must not be made, but it was made during phase 'import'",
                 "called at: "))


def test_availability_check_initialising_is_caught(npu_lazy):
    regressions.availability_check_initialises()
    caught(test_availability_and_device_count_do_not_initialise, npu_lazy,
           says=("device call 'aclInit' must not be made, but it was made during phase 'probe'",))


def test_wrapper_initialising_the_device_is_caught(npu_lazy):
    regressions.wrapper_initialises_device()
    caught(test_wrapper_creation_makes_no_device_call, npu_lazy, "inductor",
           says=("device call 'aclInit' must not be made, but it was made during phase 'wrap'",))


@pytest.mark.requires_npu(emulated=True)
def test_runtime_initialised_twice_is_caught(npu_lazy):
    regressions.runtime_initialised_twice()
    caught(test_first_device_use_initialises_exactly_once, npu_lazy, "to_device", says=("assert 2 == 1",))


@pytest.mark.requires_npu(emulated=True)
@pytest.mark.parametrize("start", ["empty", "copy"])
def test_the_task_queues_device_call_belongs_to_the_phase_that_started_the_device(npu_lazy, start):
    """Ours: a device start that copies nothing returns before torch_npu's queue thread has run (``init()`` and
    ``set_device`` alone start no queue: the first allocation does); a host copy under ``compute`` runs on the
    caller's thread; either way the queue thread's
    ``aclrtSetDevice`` (made on a thread that runs no Python) is still the starting phase's, never the next
    phase's own call, however late a loaded machine runs that thread."""
    import torch
    import torch_npu  # noqa: F401 - the npu device

    if not npu_lazy.device_calls_recorded:
        pytest.skip("needs recorded device calls (the emulated NPU): a real CANN has no call hook")
    with npu_lazy.phase("start"):
        torch.empty(4, device="npu") if start == "empty" else torch.ones(4).to("npu")
    with npu_lazy.phase("next"):
        pass
    started = [call.thread for call in npu_lazy.device_call_records("start") if call.name == "aclrtSetDevice"]
    assert any(thread.startswith("native thread") for thread in started), started
    npu_lazy.assert_no_device_calls("aclrtSetDevice", phase="next")
