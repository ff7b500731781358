"""Guarantee 7 (test/dynamo/test_concurrency.py), one process per test."""

from __future__ import annotations

from .conftest import check

#: count (and optionally fail) executions of the Inductor setup's body, as the fixture of test/dynamo does
SETUP_BODY_CALLS = """
import torch
import torch_npu
import torch_npu.utils._graph_tree as graph_tree
from torch_npu.utils._dynamo import _lazy_inductor_setup

record = {"calls": 0, "fail_first": False}
original = graph_tree._apply_npugraph_tree_methods


def counting(*args, **kwargs):
    record["calls"] += 1
    if record["fail_first"] and record["calls"] == 1:
        raise RuntimeError("injected failure in the NPU Inductor setup")
    return original(*args, **kwargs)


graph_tree._apply_npugraph_tree_methods = counting
"""


def test_concurrent_first_calls_run_the_setup_once():
    check(SETUP_BODY_CALLS + """
import threading

f = lambda x: torch.cos(x) + x
compiled = torch.compile(f, backend="inductor")
inputs = [torch.randn(16) for _ in range(4)]
results = [None] * len(inputs)
barrier = threading.Barrier(len(inputs))


def first_call(index):
    barrier.wait()
    try:
        results[index] = compiled(inputs[index])
    except BaseException as exc:
        results[index] = exc


assert not loaded("torch_npu._inductor")
threads = [threading.Thread(target=first_call, args=(i,)) for i in range(len(inputs))]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
for x, result in zip(inputs, results):
    assert not isinstance(result, BaseException), result
    torch.testing.assert_close(result, f(x))
assert record["calls"] == 1, record
assert _lazy_inductor_setup.has_run
assert "torch_npu._inductor" in sys.modules
""")


def test_failed_setup_is_retried_by_the_next_call():
    check(SETUP_BODY_CALLS + """
record["fail_first"] = True
f = lambda x: x.abs() + 2
compiled = torch.compile(f, backend="inductor")
x = torch.randn(8)
try:
    compiled(x)
except Exception as exc:
    assert "injected failure in the NPU Inductor setup" in str(exc), exc
else:
    raise AssertionError("the injected failure did not surface")
assert not _lazy_inductor_setup.has_run
torch.testing.assert_close(compiled(x), f(x))
assert _lazy_inductor_setup.has_run
assert record["calls"] == 2, record
""")


def test_setup_works_in_a_process_forked_after_import():
    check("""
import os
import torch
import torch_npu
import torch_npu.utils._dynamo as npu_dynamo

read_end, write_end = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read_end)
    verdict = b"no verdict"
    try:
        x = torch.randn(8)
        out = torch.compile(lambda t: t * 3 - 1, backend="inductor")(x)
        ok = torch.allclose(out, x * 3 - 1) and npu_dynamo._lazy_inductor_setup.has_run
        verdict = b"ok" if ok else b"wrong result or setup not run"
    except BaseException as exc:
        verdict = repr(exc).encode()
    finally:
        os.write(write_end, verdict)
        os._exit(0)
os.close(write_end)
with os.fdopen(read_end, "rb") as pipe:
    verdict = pipe.read()
_, status = os.waitpid(pid, 0)
assert verdict == b"ok", verdict
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
assert not npu_dynamo._lazy_inductor_setup.has_run
""")
