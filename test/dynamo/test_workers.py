"""Field failures of worker processes: a worker's first compiled call sets up once and loads what it should.

Seen in the field: ``import torch_npu._inductor`` failed in multiprocessing
workers (pytorch#178535, vllm-ascend#7721): multiprocessing's workers are
daemonic, and a daemonic process may not start children, which Inductor's
compile pool is. Python 3.14 makes ``forkserver`` the default start method on
Linux, so "a worker" is no longer a fork of a set-up parent. The guarantee,
for ``fork``, ``spawn`` and ``forkserver`` workers (daemonic, as a
``multiprocessing.Pool``'s are, with a compile pool of more than one thread
asked for, as on a multi-core host) of a parent that imported torch_npu and of
one that had already compiled:

- the worker's first compiled call succeeds and equals eager;
- it runs the NPU Inductor set-up, and loads the NPU Inductor backend, exactly
  once in the worker: not at all where a forked worker inherited both;
- the parent is left as it was.

Inductor's own compile workers are a case of their own: torch_npu's
``_inductor/__init__.py`` holds device-backend autoload off while it warms
Inductor's compile pool, so the pool's processes (started by
``subprocess.Popen``, fresh interpreters) do not import torch_npu.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest
import regressions
import workers
from breakage import caught
from facts import needs_deferred_setup

pytestmark = [needs_deferred_setup, pytest.mark.npu_lazy(preload=["torch", "torch_npu"], timeout=300),
              pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")]

METHODS = ["fork", "spawn", "forkserver"]
#: how long a worker may take (a fresh interpreter imports torch and compiles)
LIMIT = 240


def _in_worker(method: str) -> dict:
    context = multiprocessing.get_context(method)
    with context.Pool(1) as pool:  # a Pool's workers are daemonic
        return pool.apply_async(workers.first_compiled_call).get(timeout=LIMIT)


def _parent_compiles() -> None:
    import torch

    x = torch.arange(4.0)
    torch.testing.assert_close(torch.compile(lambda t: t * t + 1, backend="inductor")(x), x * x + 1)


@pytest.mark.parametrize("parent", ["imported", "compiled"], ids=["parent-imported", "parent-compiled"])
@pytest.mark.parametrize("method", METHODS)
def test_a_workers_first_compiled_call_sets_up_once(npu_lazy, monkeypatch, method, parent):
    from torch_npu.utils import _dynamo

    if parent == "compiled":
        with npu_lazy.phase("parent_first_call"):
            _parent_compiles()
    # the field's case: a compile pool asked for (a multi-core host's default), in workers that import Inductor
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "2")
    parent_state = (_dynamo._lazy_inductor_setup.has_run, _dynamo._InductorNpuRegistry._loaded_backend)
    with npu_lazy.phase("worker"):
        report = _in_worker(method)
    inherited = method == "fork" and parent == "compiled"
    assert report["pid"] != os.getpid()
    assert report["error"] is None and report["equals_eager"], (
        f"the first compiled call in a {method} worker of a parent that {parent} failed: {report['error']}\n{report}")
    assert report["inductor_setup"] and report["loaded_backend"] == "default", (
        f"the {method} worker's first call did not set up NPU Inductor: {report}")
    assert report["had_inductor_setup"] == inherited, (
        f"a {method} worker of a parent that {parent} started with the NPU Inductor set-up "
        f"{'done' if report['had_inductor_setup'] else 'not done'}: {report}")
    expected_loads = 0 if inherited else 1
    assert report["backend_loads"] == expected_loads, (
        f"the NPU Inductor backend loaded {report['backend_loads']} times in a {method} worker of a parent that "
        f"{parent}, expected {expected_loads}: {report}")
    if method != "fork":
        assert not report["had_torch_npu"], f"a fresh {method} worker already had torch_npu: {report}"
    assert (_dynamo._lazy_inductor_setup.has_run, _dynamo._InductorNpuRegistry._loaded_backend) == parent_state, (
        "the worker changed the parent's set-up")
    if parent == "imported":
        npu_lazy.assert_not_loaded("torch_npu._inductor")


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"], timeout=300)
def test_inductors_compile_workers_do_not_import_torch_npu(npu_lazy, monkeypatch):
    """With a compile pool (two threads), the first compiled call warms it (``import torch_npu._inductor``); once it
    is ready, a second compile builds its C++ kernel through it. Each process of the pool is a fresh interpreter
    started with device-backend autoload off, so none maps torch_npu's native library; the parent's autoload
    variable is back as it was."""
    import torch

    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "2")
    monkeypatch.delenv("TORCH_WARM_POOL", raising=False)
    before = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")
    compiled = npu_lazy.compile(lambda x: torch.tanh(x) * 2 + x, backend="inductor")
    compiled(torch.randn(16))
    from torch._inductor.async_compile import AsyncCompile

    with npu_lazy.phase("pool_ready"):
        AsyncCompile.wait_pool_ready(timeout=LIMIT)
    assert AsyncCompile.use_process_pool(), "no compile pool is in use: nothing checked"
    through_pool = npu_lazy.compile(lambda x: torch.cos(x) - x, backend="inductor", name="through_pool")
    through_pool(torch.randn(16))
    pool = [workers.process_facts(pid) for pid in workers.descendants(os.getpid())]
    pool = [facts for facts in pool if "compile_worker" in facts.get("cmdline", "") or facts.get("torch_mapped")]
    assert pool, f"no compile worker found below this process: {workers.descendants(os.getpid())}"
    npu_lazy.record("compile_workers", repr(pool))
    with_torch_npu = [facts for facts in pool if facts.get("torch_npu_mapped")]
    assert not with_torch_npu, f"Inductor's compile workers imported torch_npu: {with_torch_npu}"
    sidecar = [facts for facts in pool if "compile_worker" in facts.get("cmdline", "")]
    assert sidecar and all(facts["autoload"] == "0" for facts in sidecar), (
        f"the compile pool was started with TORCH_DEVICE_BACKEND_AUTOLOAD other than '0': {sidecar}")
    assert os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == before


# -- the regression zoo for this group ------------------------------------------------------------------------


def test_a_fork_worker_that_loads_the_backend_again_is_caught(npu_lazy, monkeypatch):
    regressions.fork_child_forgets_backend()
    text = caught(test_a_workers_first_compiled_call_sets_up_once, npu_lazy, monkeypatch, "fork", "compiled")
    # without a device the second load is counted; with one, torch_npu's Triton loader cannot load twice
    # (facts.triton_backend_load_not_retryable) and the worker's first call fails there
    assert ("the NPU Inductor backend loaded 1 times in a fork worker of a parent that compiled, expected 0" in text
            or "duplicate registrations for aten.erfc.default" in text), text


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"], timeout=300)
def test_a_compile_pool_started_with_autoload_is_caught(npu_lazy, monkeypatch):
    regressions.compile_pool_with_autoload()
    caught(test_inductors_compile_workers_do_not_import_torch_npu, npu_lazy, monkeypatch,
           says=["Inductor's compile workers imported torch_npu", "'torch_npu_mapped': True"])
