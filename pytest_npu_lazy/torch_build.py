"""A CUDA build of torch beside torch_npu, found in the installed metadata before anything imports torch.

torch_npu needs the CPU build of torch. Where pip serves only the CUDA
build (PyPI's default torch on Linux), ``import torch_npu``, and with it
plain ``import torch`` through device-backend autoload, aborts the process
in a static initialiser: ``Duplicated key 'pinned_reserve_segment_size_mb'``,
a message nobody connects with its cause. The installed distribution says
it without importing anything: a CUDA build's version has a local part such
as ``+cu130``, or the build requires ``nvidia-*`` packages.

The plugin refuses such a run before any conftest imports torch, and
``scripts/setup`` runs this module after installing:

    python -m pytest_npu_lazy.torch_build     # exit status 1 and the fix, or 0
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

#: PyTorch's own index of CPU-only wheels
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _find(names: tuple[str, ...], path: list[str] | None) -> metadata.Distribution | None:
    for name in names:
        found = next(iter(metadata.distributions(name=name, path=path if path is not None else sys.path)), None)
        if found is not None:
            return found
    return None


def gpu_build(torch: metadata.Distribution) -> str | None:
    """Why this torch is a GPU build ("version 2.12.0+cu130", "it requires nvidia-..."), or None for a CPU build."""
    return gpu_build_of(torch.version, torch.requires or [])


def gpu_build_of(version: str, requires: list[str]) -> str | None:
    """The same answer from a version and Requires-Dist lines, as a wheel or pip's install report gives them
    (scripts/setup asks before installing, see torch_source)."""
    local = version.partition("+")[2]
    if local.startswith(("cu", "rocm")):
        return f"version {version}"
    # the pattern matches every string (maybe empty): ``if match`` only tells mypy so
    names = (match.group() for match in (re.match(r"[A-Za-z0-9._-]*", r) for r in requires) if match)
    nvidia = sorted({name for name in names if name.lower().startswith("nvidia-")})
    if nvidia:
        more = f" and {len(nvidia) - 1} more nvidia-* package(s)" if len(nvidia) > 1 else ""
        return f"version {version}, which requires {nvidia[0]}{more}"
    return None


def problem(path: list[str] | None = None, python: str = "python") -> str | None:
    """What is wrong, with the exact command that fixes it; None when torch_npu and torch can go together.

    ``path`` is where to look for installed distributions (default ``sys.path``);
    ``python`` the interpreter the fix names.
    """
    torch_npu = _find(("torch_npu", "torch-npu"), path)
    torch = _find(("torch",), path)
    if torch_npu is None or torch is None:
        return None
    why = gpu_build(torch)
    if why is None:
        return None
    release = torch.version.partition("+")[0]
    return (f"torch is a CUDA build ({why}) and torch_npu {torch_npu.version} is installed beside it. torch_npu "
            "needs the CPU build of torch: with this one, importing torch_npu (and importing torch, which "
            "auto-loads it) aborts the process with \"Duplicated key 'pinned_reserve_segment_size_mb'\". "
            "Install the CPU build from PyTorch's CPU wheel index:\n"
            f"    {python} -m pip install --force-reinstall --no-deps 'torch=={release}+cpu' --index-url {CPU_INDEX}")


def main() -> int:
    text = problem(python=sys.executable)
    if text is None:
        return 0
    print(f"error: {text}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
