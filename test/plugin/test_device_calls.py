"""Device calls as evidence, and an emulated NPU that never fakes a result.

The first part drives the emulation call by call from ctypes (as test_cann_emulation does):
after one refused call the device is lost, and every later synchronisation, copy, fill,
launch and operator execution fails naming the first refusal. The second part runs pytest on
small suites: torch_npu's own code under the emulation raises on every kernel after the first
instead of handing back a buffer nothing wrote, the next isolated test starts on a working
device, and ``npu_lazy.device_calls`` / ``assert_no_device_calls`` report what each phase
called, with the Python line, on the stub and the emulation, and skip saying why elsewhere.
"""

from __future__ import annotations

import json

import pytest

from pytest_npu_lazy import cann
from pytest_npu_lazy.probe.device_calls import DeviceCall, _why_unavailable, place_in_phases, summarise

from cann_support import run_python

pytestmark = pytest.mark.needs("torch", "torch_npu")

LOST = 507009  # ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT: a refused call's code, and a lost device's

ACL = """
import ctypes, json, os
from ctypes import byref, c_char_p, c_size_t, c_void_p
acl = ctypes.CDLL(os.path.join({stub_dir!r}, "libascendcl.so"))
acl.aclGetRecentErrMsg.restype = c_char_p
def message():
    text = acl.aclGetRecentErrMsg()
    return text.decode() if text else ""
answer = {{}}
acl.aclrtSetDevice(0)
device, host = c_void_p(), ctypes.create_string_buffer(b"emulated", 64)
acl.aclrtMalloc(byref(device), c_size_t(64), 0)
"""


@pytest.fixture(scope="session")
def emulated(installed_spec, stub_cache):
    return cann.build_stub(installed_spec, stub_cache, emulate=True)


def test_one_refused_call_loses_the_device_for_every_later_call(emulated):
    got = run_python(ACL.format(stub_dir=str(emulated)) + """
answer["before"] = [acl.aclrtMemcpy(device, c_size_t(64), host, c_size_t(64), 1), acl.aclrtSynchronizeDevice(),
                    acl.aclrtSynchronizeStream(None)]
answer["refused"] = [acl.aclopCompileAndExecute(), message()]
after = {}
for name, call in [
        ("aclrtSynchronizeDevice", lambda: acl.aclrtSynchronizeDevice()),
        ("aclrtSynchronizeStream", lambda: acl.aclrtSynchronizeStream(None)),
        ("aclrtMemcpy", lambda: acl.aclrtMemcpy(host, c_size_t(64), device, c_size_t(64), 2)),
        ("aclrtMemcpyAsync", lambda: acl.aclrtMemcpyAsync(host, c_size_t(64), device, c_size_t(64), 2, None)),
        ("aclrtMemset", lambda: acl.aclrtMemset(device, c_size_t(64), 0, c_size_t(64))),
        ("rtKernelLaunch", lambda: acl.rtKernelLaunch()),
        ("aclopCompileAndExecuteV2", lambda: acl.aclopCompileAndExecuteV2())]:
    after[name] = [call(), message()]
answer["after"] = after
answer["host to host"] = acl.aclrtMemcpy(host, c_size_t(64), host, c_size_t(64), 0)
answer["host"] = host.raw[:8].decode()
print(json.dumps(answer))
""")
    assert got["before"] == [0, 0, 0]
    assert got["refused"][0] == LOST and "aclopCompileAndExecute (operator execution)" in got["refused"][1]
    for name, (result, text) in got["after"].items():
        assert result == LOST, (name, result, text)
        if name.startswith("acl") and name != "aclopCompileAndExecuteV2":
            assert text.startswith(f"the emulated NPU is lost since an earlier refused call, so {name} fails"), text
            assert "the first refusal: the emulated NPU (Ascend" in text and "aclopCompileAndExecute" in text, text
    assert got["host to host"] == 0  # no device involved
    assert got["host"] == "emulated"  # the copy back that failed wrote nothing


def test_a_fresh_process_has_a_working_device(emulated):
    """The loss is per process: nothing carries over, and a process that refused nothing syncs and copies."""
    got = run_python(ACL.format(stub_dir=str(emulated)) + """
answer["calls"] = [acl.aclrtMemcpy(device, c_size_t(64), host, c_size_t(64), 1), acl.aclrtSynchronizeDevice(),
                   acl.aclrtMemcpy(host, c_size_t(64), device, c_size_t(64), 2)]
print(json.dumps(answer))
""")
    assert got["calls"] == [0, 0, 0]


# --------------------------------------------------------------------------- torch_npu on the emulated NPU

KERNELS = """
import pytest

@pytest.mark.requires_npu(emulated=True)
@pytest.mark.npu_lazy(preload=["torch"])
def test_a_three_kernels_in_a_row_each_raise(npu_lazy):
    import torch, torch_npu
    y = torch.tensor([1., 2.]).to("npu")
    for factor in (2, 3, 4):
        with pytest.raises(RuntimeError) as raised:
            print((y * factor).cpu())
        print("KERNEL", factor, str(raised.value).splitlines()[0])

@pytest.mark.requires_npu(emulated=True)
@pytest.mark.npu_lazy(preload=["torch"])
def test_b_copy_back_of_a_refused_output_raises(npu_lazy):
    import torch, torch_npu
    y = torch.tensor([1., 2.]).to("npu")
    try:
        z = torch.sin(y)  # refused: raises here, or at the next synchronisation
    except RuntimeError:
        z = torch.empty(2, device="npu")
    with pytest.raises(RuntimeError, match="emulated NPU"):  # the refusal (async) or the lost device
        print(z.cpu())

@pytest.mark.requires_npu(emulated=True)
@pytest.mark.npu_lazy(preload=["torch"])
def test_c_the_next_test_starts_on_a_working_device(npu_lazy):
    import torch, torch_npu
    host = torch.tensor([1., 2.])
    assert torch.equal(host.to("npu").cpu(), host)
    torch.npu.synchronize()
"""


@pytest.mark.parametrize("isolate", ["marked", "off"])
def test_torch_npu_never_reads_back_a_value_no_kernel_wrote(run_pytest, pytester, without_inherited_stub, isolate):
    pytester.makepyfile(test_kernels=KERNELS)
    args = ("--npu-lazy-cann=emulate", "-s", f"--npu-lazy-isolate={isolate}")
    run = run_pytest(*args) if isolate == "marked" else run_pytest(*args, "-k", "test_a")
    expected = {"test_kernels.py::test_a_three_kernels_in_a_row_each_raise": "passed"}
    if isolate == "marked":  # in one process, b and c would start on the device a lost
        expected["test_kernels.py::test_b_copy_back_of_a_refused_output_raises"] = "passed"
        expected["test_kernels.py::test_c_the_next_test_starts_on_a_working_device"] = "passed"
    assert run.outcomes == expected, run.text()
    assert "tensor([" not in run.result.stdout.str()  # no value ever came back
    assert [line.split()[1] for line in run.result.stdout.lines if line.startswith("KERNEL")] == ["2", "3", "4"]


def test_a_lost_device_stays_lost_in_one_process(run_pytest, pytester, without_inherited_stub):
    """The isolated pass of c is not vacuous: in the process that lost the device, c fails."""
    pytester.makepyfile(test_kernels=KERNELS)
    run = run_pytest("--npu-lazy-cann=emulate", "--npu-lazy-isolate=off")
    assert run.outcomes["test_kernels.py::test_c_the_next_test_starts_on_a_working_device"] == "failed", run.text()
    assert "the emulated NPU is lost since an earlier refused call" in run.text()


# --------------------------------------------------------------------------- device calls through the fixture

CALLS = """
import json, pytest

@pytest.mark.npu_lazy(preload=["torch"])
def test_calls(npu_lazy):
    with npu_lazy.phase("import"):
        import torch, torch_npu
    npu_lazy.assert_no_device_calls("aclInit", "aclrtSetDevice", "*GetDeviceCount")
    with npu_lazy.phase("probe"):
        available = torch.npu.is_available()
    print("CALLS", json.dumps({"import": npu_lazy.device_calls("import"), "probe": npu_lazy.device_calls("probe"),
                               "all": npu_lazy.device_calls(), "available": available}))
    npu_lazy.assert_no_device_calls("aclInit")
"""


def _printed(run) -> dict:
    [line] = [line for line in run.result.stdout.lines if line.startswith("CALLS ")]
    return json.loads(line[len("CALLS "):])


@pytest.mark.parametrize("mode", ["stub", "emulate"])
def test_device_calls_per_phase_and_the_failure_names_call_phase_and_line(run_pytest, pytester,
                                                                          without_inherited_stub, mode):
    pytester.makepyfile(test_calls=CALLS)
    run = run_pytest(f"--npu-lazy-cann={mode}", "-s", "--npu-lazy-json=report.json")
    calls = _printed(run)
    assert "aclInit" not in calls["import"] and "aclrtGetDeviceCount" not in calls["import"]
    assert calls["probe"][0] == "aclrtGetDeviceCount", calls  # a count, no initialisation
    assert set(calls["probe"]) <= {"aclrtGetDeviceCount", "aclAppLog"}, calls  # the stub logs its "no device"
    assert calls["all"] == calls["import"] + calls["probe"]
    assert calls["available"] is (mode == "emulate")
    # is_available() asks for the device count only, on the emulation too: the last assert holds on both
    assert run.outcomes == {"test_calls.py::test_calls": "passed"}, run.text()
    [test] = json.loads((pytester.path / "report.json").read_text())["tests"]
    by_phase = {phase["name"]: phase["device_calls"] for phase in test["phases"]}
    assert [entry["name"] for entry in by_phase["probe"]][0] == "aclrtGetDeviceCount"
    entry = by_phase["probe"][0]
    assert entry["count"] == calls["probe"].count("aclrtGetDeviceCount") and entry["where"].startswith("test_calls.py:9 in test_calls via torch_npu/")
    assert test["device_calls_unavailable"] is None


INIT = """
import pytest

@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_first_device_use_does_not_initialise(npu_lazy):
    import torch
    with npu_lazy.phase("first_use"):
        torch.zeros(2).to("npu")
    npu_lazy.assert_no_device_calls("aclrtSetDev*", phase="first_use")
"""


@pytest.mark.parametrize("isolation", ["fork", "spawn"])
def test_a_device_call_violation_names_the_call_phase_and_line(run_pytest, pytester, without_inherited_stub,
                                                               isolation):
    pytester.makepyfile(test_init=INIT)
    run = run_pytest("--npu-lazy-cann=emulate", "--npu-lazy-json=report.json", f"--npu-lazy-isolation={isolation}")
    assert run.outcomes == {"test_init.py::test_first_device_use_does_not_initialise": "failed"}, run.text()
    text = run.report("test_first_device_use_does_not_initialise", "call")["longrepr"]
    assert "npu_lazy: device call 'aclrtSetDevice' must not be made, but it was made during phase 'first_use'" in text
    # torch releases the GIL around the copy: the line is read by the sampler while the call waits
    assert "called at: test_init.py:7 in test_first_device_use_does_not_initialise" in text, text
    assert 'torch.zeros(2).to("npu")' in text
    assert "<< VIOLATION: aclrtSetDevice must not be called" in run.text()
    [test] = json.loads((pytester.path / "report.json").read_text())["tests"]
    assert test["violation"]["kind"] == "device_call" and test["violation"]["module"] == "aclrtSetDevice"
    assert test["violation"]["phase"] == "first_use"


def test_without_a_recorder_the_fixture_skips_saying_why(run_pytest, pytester, without_inherited_stub):
    pytester.makepyfile(test_off="""
import pytest

@pytest.mark.npu_lazy(preload=[])
def test_asks(npu_lazy):
    npu_lazy.device_calls()
""")
    run = run_pytest("--npu-lazy-cann=off", "-rs")
    assert run.outcomes == {"test_off.py::test_asks": "skipped"}, run.text()
    assert "device calls are not recorded: no CANN host stub or emulated NPU is loaded" in run.text()


def test_unavailable_reasons_name_the_mode_and_the_fix():
    assert "--npu-lazy-cann=real" in _why_unavailable("real") and "stub or emulate" in _why_unavailable("real")
    assert "delete it to rebuild" in _why_unavailable("stub")


def test_a_native_thread_is_named_as_its_code_named_it():
    import threading

    from pytest_npu_lazy.probe.device_calls import _native_thread

    tid = threading.get_native_id()
    with open(f"/proc/self/task/{tid}/comm") as comm:
        assert _native_thread(tid) == f"native thread {tid} {comm.read().strip()!r}"
    assert _native_thread(2 ** 30) == f"native thread {2 ** 30}"  # ended, or never was


def test_queued_calls_are_placed_by_time_and_runs_are_counted():
    queued = DeviceCall("aclrtSetDevice", 0, 5.0, None, None, None, thread="native thread 7")
    held = DeviceCall("aclrtMalloc", 0, 6.0, "copy", None, None)
    spans = [("test", 0.0, None), ("init", 4.0, 5.5), ("copy", 5.5, 7.0)]
    placed = place_in_phases([queued, held, held], spans, lambda stamp: stamp)
    assert [call.phase for call in placed] == ["init", "copy", "copy"]
    assert placed[0].where() == "no Python line (made on native thread 7: Python cannot be read then)"
    unread = DeviceCall("aclrtMemcpy", 0, 5.1, "init", None, None, thread="Python thread 'MainThread' while the GIL was released")
    assert unread.where().startswith("Python line not read (made on Python thread 'MainThread'")
    summary = summarise(placed)
    assert summary["init"][0]["name"] == "aclrtSetDevice" and summary["copy"][0]["count"] == 2
