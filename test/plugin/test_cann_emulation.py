"""The emulated NPU (--npu-lazy-cann=emulate), call by call, from ctypes in fresh interpreters.

Each test loads the built emulation by the soname torch_npu links (libascendcl.so, an empty
shell) and resolves every function with dlsym through it, as torch_npu does. Values come
from ``emulation.MODEL``, never typed twice. Nothing here asks the emulation to compute:
what is checked is discovery, bookkeeping and data that was copied, not produced.
"""

from __future__ import annotations

import json

import pytest
from elftools.elf.elffile import ELFFile

from pytest_npu_lazy import cann
from pytest_npu_lazy.cann import emulation

from cann_support import run_python

pytestmark = pytest.mark.needs("torch", "torch_npu")

MODEL = emulation.MODEL

ACL = """
import ctypes, json, os, sys
from ctypes import byref, c_char_p, c_float, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
acl = ctypes.CDLL(os.path.join({stub_dir!r}, "libascendcl.so"))
acl.aclrtGetSocName.restype = c_char_p
acl.aclGetRecentErrMsg.restype = c_char_p
def message():
    text = acl.aclGetRecentErrMsg()
    return text.decode() if text else None
answer = {{}}
"""


@pytest.fixture(scope="session")
def emulated(installed_spec, stub_cache):
    return cann.build_stub(installed_spec, stub_cache, emulate=True)


def acl(emulated, body: str, **env: str) -> dict:
    """Run ``body`` after loading the emulation; it fills ``answer``, which comes back (with stderr)."""
    return run_python(ACL.format(stub_dir=str(emulated)) + body + "\nprint(json.dumps(answer))\n", **env)


def test_discovery_reports_one_device_of_the_documented_model(emulated):
    got = acl(emulated, """
count = c_uint32(99)
answer["init"] = [acl.aclInit(None), acl.aclInit(None)]
answer["count"] = [acl.aclrtGetDeviceCount(byref(count)), count.value]
answer["soc"] = acl.aclrtGetSocName().decode()
value = c_int64()
answer["capabilities"] = [[acl.aclGetDeviceCapability(0, info, byref(value)), value.value] for info in (0, 1, 2)]
free, total = c_size_t(), c_size_t()
answer["meminfo"] = [acl.aclrtGetMemInfo(1, byref(free), byref(total)), free.value, total.value]
answer["bad info"] = [acl.aclGetDeviceCapability(0, 7, byref(value)), message()]
answer["finalize"] = [acl.aclFinalize(), acl.aclFinalize()]
""")
    assert got["init"] == [0, 100002]  # ACL_ERROR_REPEAT_INITIALIZE, which torch_npu tolerates
    assert got["count"] == [0, MODEL.device_count] == [0, 1]
    assert got["soc"] == MODEL.soc_name
    assert got["capabilities"] == [[0, MODEL.cube_cores], [0, MODEL.vector_cores], [0, MODEL.l2_bytes]]
    assert got["meminfo"] == [0, MODEL.hbm_bytes, MODEL.hbm_bytes]
    assert got["bad info"][0] == 100000 and "aclGetDeviceCapability" in got["bad info"][1]
    assert got["finalize"] == [0, 100037]  # ACL_ERROR_REPEAT_FINALIZE


def test_set_get_reset_device_and_contexts(emulated):
    got = acl(emulated, """
device = c_int32(-5)
answer["before"] = acl.aclrtGetDevice(byref(device))
answer["set"] = acl.aclrtSetDevice(0)
answer["get"] = [acl.aclrtGetDevice(byref(device)), device.value]
primary, mine = c_void_p(), c_void_p()
answer["primary"] = acl.aclrtGetCurrentContext(byref(primary))
answer["create"] = acl.aclrtCreateContext(byref(mine), 0)
answer["switch"] = [acl.aclrtSetCurrentContext(primary), acl.aclrtDestroyContext(mine), acl.aclrtDestroyContext(mine)]
answer["other device"] = [acl.aclrtSetDevice(1), message()]
answer["reset"] = [acl.aclrtResetDevice(0), acl.aclrtGetDevice(byref(device))]
""")
    assert got["before"] == 107002  # no device on this thread yet
    assert got["set"] == 0 and got["get"] == [0, 0] and got["primary"] == 0
    assert got["create"] == 0 and got["switch"] == [0, 0, 107017]  # destroyed twice: not a live context
    assert got["other device"][0] == 107001 and "device 0 only" in got["other device"][1]
    assert got["reset"] == [0, 107002]


def test_the_primary_context_is_active_while_a_device_is_set(emulated):
    """torch_npu 2.13.0 asks aclrtGetPrimaryCtxState in MaybeSetDevice; absent, it throws, at shutdown fatally."""
    got = acl(emulated, """
flags, active = c_uint32(7), c_int32(7)
answer["before"] = [acl.aclrtGetPrimaryCtxState(0, byref(flags), byref(active)), flags.value, active.value]
acl.aclrtSetDevice(0)
answer["set"] = [acl.aclrtGetPrimaryCtxState(0, byref(flags), byref(active)), active.value]
acl.aclrtResetDevice(0)
answer["reset"] = [acl.aclrtGetPrimaryCtxState(0, None, byref(active)), active.value]
answer["other device"] = [acl.aclrtGetPrimaryCtxState(1, None, byref(active)), message()]
""")
    assert got["before"] == [0, 0, 0]
    assert got["set"] == [0, 1] and got["reset"] == [0, 0]
    assert got["other device"][0] == 107001 and "device 0 only" in got["other device"][1]


def test_memory_is_host_memory_that_round_trips(emulated):
    got = acl(emulated, """
acl.aclrtSetDevice(0)
device = c_void_p()
answer["malloc"] = acl.aclrtMalloc(byref(device), c_size_t(4096), 0)
answer["aligned"] = device.value % 512 == 0
free, total = c_size_t(), c_size_t()
acl.aclrtGetMemInfo(1, byref(free), byref(total))
answer["in use"] = total.value - free.value
sent = (ctypes.c_ubyte * 4096)(*[i % 251 for i in range(4096)])
back = (ctypes.c_ubyte * 4096)()
answer["h2d"] = acl.aclrtMemcpy(device, c_size_t(4096), sent, c_size_t(4096), 1)
answer["d2h"] = acl.aclrtMemcpy(back, c_size_t(4096), device, c_size_t(4096), 2)
answer["equal"] = bytes(back) == bytes(sent)
answer["too long"] = acl.aclrtMemcpy(back, c_size_t(16), device, c_size_t(4096), 2)
answer["not device"] = [acl.aclrtMemcpy(back, c_size_t(4096), sent, c_size_t(4096), 1), message()]
answer["past the end"] = acl.aclrtMemcpy(c_void_p(device.value + 8), c_size_t(4096), sent, c_size_t(4096), 1)
answer["free"] = [acl.aclrtFree(device), acl.aclrtFree(device)]
host = c_void_p()
answer["host"] = [acl.aclrtMallocHost(byref(host), c_size_t(64)), acl.aclrtFree(host), acl.aclrtFreeHost(host)]
acl.aclrtGetMemInfo(1, byref(free), byref(total))
answer["after"] = total.value - free.value
""")
    assert got["malloc"] == 0 and got["aligned"] and got["in use"] == 4096
    assert got["h2d"] == 0 and got["d2h"] == 0 and got["equal"]
    assert got["too long"] == 100000  # count larger than destMax
    assert got["not device"][0] == 100000 and "not inside memory from aclrtMalloc" in got["not device"][1]
    assert got["past the end"] == 100000
    assert got["free"] == [0, 207002]  # ACL_ERROR_RT_MEMORY_FREE for a pointer already freed
    assert got["host"] == [0, 207002, 0]  # host memory is not freed with aclrtFree
    assert got["after"] == 0


def test_streams_and_events_complete_at_once_and_time_on_the_host(emulated):
    got = acl(emulated, """
import time
acl.aclrtSetDevice(0)
stream, start, end = c_void_p(), c_void_p(), c_void_p()
status = c_int32(-1)
answer["stream"] = [acl.aclrtCreateStreamWithConfig(byref(stream), 0, 0), acl.aclrtStreamQuery(stream, byref(status)),
                    status.value, acl.aclrtSynchronizeStream(stream)]
answer["events"] = [acl.aclrtCreateEventExWithFlag(byref(start), 8), acl.aclrtCreateEvent(byref(end))]
acl.aclrtQueryEventStatus(start, byref(status))
answer["before record"] = status.value
answer["record"] = acl.aclrtRecordEvent(start, stream)
time.sleep(0.05)
answer["record end"] = acl.aclrtRecordEvent(end, None)
acl.aclrtQueryEventStatus(start, byref(status))
answer["after record"] = status.value
ms = c_float()
answer["elapsed"] = [acl.aclrtEventElapsedTime(byref(ms), start, end), ms.value]
answer["wait"] = [acl.aclrtStreamWaitEvent(stream, end), acl.aclrtSynchronizeEvent(end)]
answer["destroy"] = [acl.aclrtDestroyEvent(start), acl.aclrtDestroyEvent(start), acl.aclrtDestroyStream(stream),
                     acl.aclrtSynchronizeStream(stream), acl.aclrtDestroyStream(stream)]
""")
    assert got["stream"] == [0, 0, 0, 0]  # ACL_STREAM_STATUS_COMPLETE: nothing is ever queued
    assert got["events"] == [0, 0]
    assert got["before record"] == 0 and got["record"] == 0 and got["record end"] == 0 and got["after record"] == 1
    assert got["elapsed"][0] == 0 and 45 <= got["elapsed"][1] < 5000  # the host's clock, in milliseconds
    assert got["wait"] == [0, 0]
    assert got["destroy"] == [0, 107017, 0, 107017, 107017]


@pytest.mark.parametrize("call, what, linked", [
    ("rtKernelLaunch", "kernel launch", True),
    ("aclopCompileAndExecute", "operator execution", True),
    ("aclrtLaunchKernelWithHostArgs", "kernel launch", False),  # torch_npu finds it with dlsym only
    ("HcclAllReduce", "collective communication", False),
])
def test_compute_calls_are_refused_naming_the_call(emulated, call, what, linked):
    got = acl(emulated, f"""
answer["result"] = acl.{call}()
answer["message"] = message()
answer["again"] = message()
""")
    assert (call in {s for symbols in cann.analyse().libraries.values() for s in symbols}) is linked
    expected = f"the emulated NPU ({MODEL.soc_name}) cannot run kernels: {call} ({what}) needs a real Ascend device"
    assert got["result"] == 507009  # ACL_ERROR_RT_TASK_TYPE_NOT_SUPPORT
    assert got["message"].startswith(expected)
    assert got["again"] is None  # read once, like CANN's own message
    assert f"pytest-npu-lazy: {expected}" in got["stderr"]  # said even when nobody reads the message


def test_trace_logs_every_call_with_its_result(emulated, tmp_path):
    trace = tmp_path / "trace.log"
    got = acl(emulated, """
answer["pid"] = os.getpid()
acl.aclrtGetDeviceCount(byref(c_uint32()))
acl.aclrtSetDevice(3)
acl.aclmdlInitDump()
acl.aclrtGetSocName()
acl.rtKernelLaunch()
""", **{cann.ENV_TRACE: str(trace)})
    prefix = f"pytest-npu-lazy CANN emulation [pid {got['pid']}]: "
    lines = trace.read_text().splitlines()
    assert all(line.startswith(prefix) for line in lines), lines
    lines = [line[len(prefix):] for line in lines]
    assert lines[:4] == [
        "aclrtGetDeviceCount -> 0",
        "aclrtSetDevice -> 107001",
        "aclmdlInitDump -> 207000 (not emulated)",
        f"aclrtGetSocName -> {MODEL.soc_name}",
    ]
    assert lines[4].startswith("the emulated NPU") and "rtKernelLaunch (kernel launch)" in lines[4]


def test_no_trace_without_the_variable(emulated):
    got = acl(emulated, "acl.aclrtGetDeviceCount(byref(c_uint32()))\n")
    assert "CANN emulation" not in got["stderr"]


def test_emulation_build_exports_every_cann_symbol_under_its_own_key(installed_spec, emulated):
    assert emulated.name != installed_spec.key() and emulated.name.startswith("emulated-")
    manifest = json.loads((emulated / cann.MANIFEST_NAME).read_text())
    assert manifest["load_order"][:2] == [cann.common.RECORDER_SONAME, emulation.EMULATION_SONAME]
    assert manifest["emulation"]["model"]["soc_name"] == MODEL.soc_name
    with open(emulated / emulation.EMULATION_SONAME, "rb") as stream:
        exported = {s.name for s in ELFFile(stream).get_section_by_name(".dynsym").iter_symbols()
                    if s.name and s["st_shndx"] != "SHN_UNDEF"}
    wanted = {s for symbols in installed_spec.libraries.values() for s in symbols}
    assert wanted <= exported
    assert {"aclrtGetSocName", "aclrtSetDevice", "aclrtMalloc", "aclrtCreateStream"} <= set(manifest["emulation"]["emulated"])
    assert "HcclAllReduce" in manifest["emulation"]["refused"] and "HcclAllReduce" in exported
    with open(emulated / emulation.EMULATION_SONAME, "rb") as stream:  # every call reaches the recorder
        dynamic = ELFFile(stream).get_section_by_name(".dynamic")
        assert cann.common.RECORDER_SONAME in [t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    for soname in installed_spec.libraries:  # empty shells that pull the emulation in by soname
        with open(emulated / soname, "rb") as stream:
            dynamic = ELFFile(stream).get_section_by_name(".dynamic")
            assert emulation.EMULATION_SONAME in [t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"]


def test_refusal_table():
    assert emulation.refusal("HcclAllReduce") == "collective communication"
    assert emulation.refusal("aclopCompileAndExecuteV2") == "operator execution"
    assert emulation.refusal("aclmdlRIExecuteAsync") == "graph execution"
    assert emulation.refusal("aclrtMalloc") is None and emulation.refusal("aclrtSetDevice") is None


# --------------------------------------------------------------------------- through the plugin

ISOLATED = """
import pytest

@pytest.mark.requires_npu(emulated=True)
@pytest.mark.npu_lazy(preload=["torch"])
def test_a_initialises_and_keeps_memory(npu_lazy):
    import torch, torch_npu
    assert not torch_npu.npu.is_initialized()
    assert torch.npu.is_available() and torch.npu.device_count() == 1
    assert npu_lazy.device == "cpu"  # available, but it runs no kernels
    kept = torch.arange(1024.).to("npu")
    free, total = torch.npu.mem_get_info()
    assert total - free >= kept.numel() * 4
    with open("a-ran", "w") as done:
        done.write(str(total - free))

@pytest.mark.requires_npu(emulated=True)
@pytest.mark.npu_lazy(preload=["torch"])
def test_b_starts_from_a_fresh_device(npu_lazy):
    import os, torch, torch_npu
    assert os.path.exists("a-ran")  # a ran first, in its own child, and kept its memory
    assert not torch_npu.npu.is_initialized()
    free, total = torch.npu.mem_get_info()
    assert (free, total) == (total, {hbm})

@pytest.mark.requires_npu
def test_needs_real_hardware():
    pass
""".format(hbm=MODEL.hbm_bytes)


def test_emulate_mode_runs_device_paths_in_fresh_children_and_says_so(run_pytest, pytester, without_inherited_stub):
    pytester.makepyfile(test_isolated=ISOLATED)
    run = run_pytest("-rs", "--npu-lazy-cann=emulate", "--npu-lazy-json=report.json", "-v")  # -v: the CANN line
    assert run.outcomes == {"test_isolated.py::test_a_initialises_and_keeps_memory": "passed",
                            "test_isolated.py::test_b_starts_from_a_fresh_device": "passed",
                            "test_isolated.py::test_needs_real_hardware": "skipped"}, run.text()
    header = run.result.stdout.lines[:6]
    expected = f"CANN: emulated NPU ({MODEL.soc_name}) - device paths run, kernels do not"
    assert any(expected in line for line in header), header
    assert any(f"device npu (emulated {MODEL.soc_name}" in line for line in header), header
    # the header and the fixture say the same: the emulated NPU runs no kernel, so tests compute on cpu
    assert any("tests compute on cpu, npu_lazy.device" in line for line in header), header
    assert f"running on the emulated NPU ({MODEL.soc_name}), which cannot run kernels" in run.text()
    environment = json.loads((pytester.path / "report.json").read_text())["environment"]
    assert environment["cann_mode"] == "emulate" and environment["cann"].startswith(expected)


def test_a_shared_process_would_be_caught(run_pytest, pytester, without_inherited_stub):
    """The fresh-device check is not vacuous: without isolation, b sees what a left behind."""
    pytester.makepyfile(test_isolated=ISOLATED)
    run = run_pytest("--npu-lazy-cann=emulate", "--npu-lazy-isolate=off")
    assert run.outcomes["test_isolated.py::test_a_initialises_and_keeps_memory"] == "passed", run.text()
    assert run.outcomes["test_isolated.py::test_b_starts_from_a_fresh_device"] == "failed"
    assert "assert not torch_npu.npu.is_initialized()" in run.report("test_b_starts_from_a_fresh_device", "call")["longrepr"]


def test_emulated_tests_skip_on_the_stub(run_pytest, pytester, without_inherited_stub):
    pytester.makepyfile(test_isolated=ISOLATED)
    run = run_pytest("-rs", "--npu-lazy-cann=stub")
    assert set(run.outcomes.values()) == {"skipped"}, run.text()
    assert "needs an NPU device, real or emulated (--npu-lazy-cann=emulate): running on the CANN host stub" in run.text()


def test_emulation_is_not_a_real_npu_for_require_npu(run_pytest, pytester, without_inherited_stub):
    pytester.makepyfile(test_isolated=ISOLATED)
    run = run_pytest("--npu-lazy-require-npu", "--npu-lazy-cann=emulate")
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"no usable NPU device: needs a real NPU device: running on the emulated NPU ({MODEL.soc_name})" in run.text()


def test_emulate_from_ini_and_environment(run_pytest, pytester, without_inherited_stub, monkeypatch):
    pytester.makepyfile(test_isolated=ISOLATED)
    pytester.makeini("[pytest]\nnpu_lazy_cann = emulate\n")
    assert run_pytest().outcomes["test_isolated.py::test_b_starts_from_a_fresh_device"] == "passed"
    pytester.makeini("[pytest]\nnpu_lazy_cann = stub\n")
    monkeypatch.setenv(cann.ENV_MODE, "emulate")  # the environment beats the ini
    assert run_pytest().outcomes["test_isolated.py::test_b_starts_from_a_fresh_device"] == "passed"


def test_bad_requires_npu_arguments_are_an_error(run_pytest, pytester, without_inherited_stub):
    pytester.makepyfile(test_bad="import pytest\n\n@pytest.mark.requires_npu(emulated='yes')\ndef test_x():\n    pass\n")
    run = run_pytest("--npu-lazy-cann=emulate")
    assert run.outcomes == {"test_bad.py::test_x": "error"}
    assert "requires_npu takes only emulated=True, emulated=False or emulated='compute'" in run.text()


def test_matrix_tells_the_emulation_from_the_stub():
    from pytest_npu_lazy.cann.activation import CannStatus
    from pytest_npu_lazy.reports.environment import describe
    from pytest_npu_lazy.reports.schema import environment_label

    stub = CannStatus("stub", "stub", None, "/cache/stub", "stub")
    emulated = CannStatus("emulate", "emulate", MODEL.soc_name, "/cache/emulated", "emulated NPU")
    labels = [environment_label(describe(status).to_dict()) for status in (stub, emulated)]
    assert labels[0].endswith("/ CANN stub") and labels[1].endswith(f"/ CANN emulate {MODEL.soc_name}")


def test_command_line_lists_the_emulation(emulated, stub_cache, capsys):
    assert cann.main(["--emulate", "--cache-dir", str(stub_cache), "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["build"]["ok"] and report["build"]["stub_dir"] == str(emulated)
    assert report["emulation"]["model"]["soc_name"] == MODEL.soc_name
    assert "aclrtSetDevice" in report["emulation"]["emulated"] and "rtKernelLaunch" in report["emulation"]["refused"]
    assert "aclrtSetDevice" not in report["emulation"]["not_emulated"]


COMPATIBLE_IMPL = """
import os

# as torch_npu's test/_inductor/test_inductor_graph_partition.py: read when torch_npu initialises
os.environ["TORCH_NPU_USE_COMPATIBLE_IMPL"] = "1"

import torch_npu

torch_npu.npu._lazy_init()  # at import: in the collecting process too


def test_initialised():
    assert torch_npu.npu.is_initialized()
"""


def test_compatible_impl_mode_initialises_and_exits_cleanly(run_pytest, pytester, without_inherited_stub):
    """With TORCH_NPU_USE_COMPATIBLE_IMPL=1 torch_npu asks aclrtGetPrimaryCtxState: at init (a collection error
    without it) and at shutdown, where its absence ended the pytest process with SIGABRT (exit 134)."""
    pytester.makepyfile(test_compatible=COMPATIBLE_IMPL)
    run = run_pytest("--npu-lazy-cann=emulate")
    assert run.outcomes == {"test_compatible.py::test_initialised": "passed"}, run.text()
    assert run.result.ret == pytest.ExitCode.OK, run.text()
    assert "terminate called" not in run.text()


def test_the_queue_state_tells_the_task_queues_binding_from_the_callers_own(emulated):
    """torch_npu's device start makes the default stream on the caller's thread, then its queue's thread (a C++
    thread that runs no Python) sets the device: only that thread's aclrtSetDevice says the queue is bound."""
    got = acl(emulated, """
import threading
state = acl.npu_lazy_emulation_queue_state
answer["fresh"] = state()
answer["set by the caller"] = [acl.aclrtSetDevice(0), state()]  # ctypes released the GIL: still a Python thread
stream = c_void_p()
answer["default stream"] = [acl.aclrtCreateStreamWithConfig(byref(stream), 0, 0), state()]
thread = threading.Thread(target=acl.aclrtSetDevice, args=(0,))
thread.start(); thread.join()
answer["set by another Python thread"] = state()
libc, tid = ctypes.CDLL(None), c_uint64()
start = ctypes.cast(acl.aclrtSetDevice, c_void_p)  # its argument NULL: device 0
answer["native thread"] = [libc.pthread_create(byref(tid), None, start, None), libc.pthread_join(tid, None)]
answer["bound"] = state()
""")
    got.pop("stderr")
    assert got == {"fresh": 0, "set by the caller": [0, 0], "default stream": [0, 1],
                   "set by another Python thread": 1, "native thread": [0, 0], "bound": 2}
