"""What runs inside a worker process (fork, spawn or forkserver child; Inductor's compile workers) for
test_workers.py: importable by reference, so a spawned or forkserver child can unpickle it. Imports torch only
when called."""

from __future__ import annotations

import os
import sys


def _count_backend_loads() -> list:
    """Count each load of an NPU Inductor backend from now on (``_load_backend`` calls
    ``restore_inductor_baseline`` first), whether or not torch_npu._inductor is loaded yet."""
    # test/breakage.py: on sys.path in every worker (the parent's sys.path)
    from breakage import after_import

    loads: list = []

    def count(module) -> None:
        original = module.restore_inductor_baseline

        def counted(*args, **kwargs):
            loads.append(os.getpid())
            return original(*args, **kwargs)

        module.restore_inductor_baseline = counted

    after_import("torch_npu._inductor.lowering_patch", count)
    return loads


def first_compiled_call() -> dict:
    """In the worker: import torch_npu (if the worker has not), compile and call once on CPU tensors; say what
    the worker had before, what the call set up and loaded, and whether it equals eager."""
    report = {"pid": os.getpid(), "had_torch_npu": "torch_npu" in sys.modules,
              "had_npu_inductor": "torch_npu._inductor" in sys.modules,
              "autoload": os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD")}
    loads = _count_backend_loads()
    import torch
    import torch_npu  # noqa: F401
    from torch_npu.utils import _dynamo

    report["had_inductor_setup"] = _dynamo._lazy_inductor_setup.has_run
    x = torch.arange(8.0)
    try:
        out = torch.compile(lambda t: torch.cos(t) * 3 - 1, backend="inductor")(x)
        report["equals_eager"] = bool(torch.allclose(out, torch.cos(x) * 3 - 1))
        report["error"] = None
    except Exception as exc:
        root = exc
        while getattr(root, "inner_exception", None) or root.__cause__:
            root = getattr(root, "inner_exception", None) or root.__cause__
        report["equals_eager"], report["error"] = False, f"{type(root).__name__}: {str(root).strip()[:400]}"
    report.update(inductor_setup=_dynamo._lazy_inductor_setup.has_run, backend_loads=len(loads),
                  loaded_backend=_dynamo._InductorNpuRegistry._loaded_backend,
                  npu_inductor="torch_npu._inductor" in sys.modules)
    return report


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (read from /proc), children first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def process_facts(pid: int) -> dict:
    """What a running process is and has: its command line, its autoload variable, whether torch_npu's native
    library is mapped into it (it imported torch_npu) and whether torch's is."""
    facts = {"pid": pid}
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            facts["cmdline"] = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = dict(item.split(b"=", 1) for item in handle.read().split(b"\0") if b"=" in item)
        facts["autoload"] = environ.get(b"TORCH_DEVICE_BACKEND_AUTOLOAD", b"(unset)").decode()
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as handle:
            maps = handle.read()
        facts["torch_npu_mapped"] = "libtorch_npu" in maps
        facts["torch_mapped"] = "libtorch_python" in maps
    except OSError as exc:
        facts["gone"] = str(exc)
    return facts
