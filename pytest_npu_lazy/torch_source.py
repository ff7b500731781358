"""Where scripts/setup gets PyTorch's CPU build: pip's configured sources, else PyTorch's CPU index.

torch_npu needs the CPU build of torch (see torch_build), and PyPI's
``torch==2.13.0`` is the CUDA build on Linux x86-64: it requires a dozen
``nvidia-*`` packages, and torch_npu aborts beside it. So the requirements
pin the CPU build (``torch==2.13.0+cpu``), which PyPI does not have. It
comes from one of two places:

1. pip's configured sources (``find-links``, an index or a mirror in pip's
   configuration), where a machine serves it, e.g. from a local wheel
   directory;
2. PyTorch's CPU index, https://download.pytorch.org/whl/cpu, for torch
   alone (its dependencies come from the configured sources later).

Each is asked with pip's own resolution, ``pip install --dry-run --report``,
so the answer is the wheel pip would really install, with its version and
``Requires-Dist``. The CPU index is asked only when the configured sources
do not serve the build, with a short network timeout and no retries, so an
index that cannot be reached costs seconds, not pip's minutes of retrying.

    python -m pytest_npu_lazy.torch_source requirements/ci.txt

prints one line saying where the build comes from (or that it is already
installed), then the arguments for ``pip install`` that install it, one a
line (none when installed). Exit status 1, with what each source answered
and what to do, when neither serves it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote

from .torch_build import CPU_INDEX, gpu_build_of

#: pip's network timeout and the whole question's limit, for the CPU index: it is asked only as a fallback,
#: and a machine that cannot reach it must learn that in seconds
PROBE_TIMEOUT = 5
PROBE_LIMIT = 60
#: the configured sources are what every later install uses; a stalled one fails there too, but not here
CONFIGURED_TIMEOUT = 15
CONFIGURED_LIMIT = 180

#: pip options that add sources from pip's configuration; a value of one space empties them (an empty
#: value counts as unset), so a question to one index asks that index alone, proxies and certificates kept
ONLY_THE_INDEX = {"PIP_FIND_LINKS": " ", "PIP_EXTRA_INDEX_URL": " "}


class TorchSourceError(Exception):
    """No source serves the pinned CPU build, or the requirements do not pin one; the message says what to do."""


@dataclass(frozen=True)
class Resolution:
    """What pip would install for a requirement: the wheel's version, where it lies, what it requires."""

    version: str
    url: str
    requires: tuple[str, ...]

    @property
    def gpu(self) -> str | None:
        """Why it is a GPU build, or None for a CPU build."""
        return gpu_build_of(self.version, list(self.requires))


@dataclass(frozen=True)
class Unresolved:
    """pip could not resolve the requirement from these sources: its last error line, or the time limit."""

    reason: str


@dataclass(frozen=True)
class Choice:
    """The source chosen, said for people, and the ``pip install`` arguments that install from it."""

    said: str
    pip_args: tuple[str, ...]


def torch_line(requirements: Path) -> str:
    """The torch line of a requirements file, as written (comments dropped)."""
    lines = [line.split("#", 1)[0].strip() for line in requirements.read_text().splitlines()]
    pins = [line for line in lines if re.match(r"torch\s*(?:[=<>!~;\[]|$)", line)]
    if len(pins) != 1:
        raise TorchSourceError(f"{requirements}: expected one torch line, found {len(pins)}; "
                               "pin the CPU build, e.g. torch==2.13.0+cpu.")
    return pins[0]


def torch_requirement(requirements: Path) -> str:
    """The ``torch==X.Y.Z+cpu`` line of a requirements file: an exact pin of the CPU build, or an error."""
    line = torch_line(requirements)
    pin = re.fullmatch(r"torch\s*===?\s*([0-9][\w.]*\+cpu[\w.]*)", line)
    if pin is None:
        raise TorchSourceError(
            f"{requirements}: {line!r} does not pin torch's CPU build, so pip may pick PyPI's CUDA build, "
            "beside which torch_npu aborts at import; pin it exactly, e.g. torch==2.13.0+cpu.")
    return f"torch=={pin[1]}"


def resolve(requirement: str, pip_args: tuple[str, ...] = (), *, env: dict[str, str] | None = None,
            python: str = sys.executable, timeout: float = CONFIGURED_TIMEOUT, retries: int = 1,
            limit: float = CONFIGURED_LIMIT) -> Resolution | Unresolved:
    """What ``pip install requirement`` would install, asked without installing (``--dry-run --report``).

    ``--no-deps``: torch's own wheel is the question; ``--ignore-installed``: an installed torch must not
    answer for the source; ``--only-binary``: a source distribution would be built to read its metadata.
    ``-vv``: pip says an index it could not reach only in its debug lines, and otherwise reports it as an
    index without the version ("from versions: none").
    """
    with tempfile.TemporaryDirectory(prefix="npu-lazy-torch-source-") as folder:
        report = Path(folder) / "report.json"
        command = [python, "-m", "pip", "install", "-vv", "--dry-run", "--report", str(report), "--no-deps",
                   "--ignore-installed", "--only-binary=:all:", "--disable-pip-version-check",
                   "--timeout", str(timeout), "--retries", str(retries), *pip_args, requirement]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=limit,
                                  env={**os.environ, **(env or {})})
        except subprocess.TimeoutExpired:
            return Unresolved(f"no answer within {limit:.0f} s")
        if done.returncode != 0 or not report.exists():
            return Unresolved(_why_not(done.stdout + done.stderr, done.returncode))
        try:
            installs = json.loads(report.read_text())["install"]
            item = next(i for i in installs if i["metadata"]["name"].lower() == "torch")
        except (ValueError, KeyError, StopIteration):
            return Unresolved(f"pip's report names no torch wheel: {report.read_text()[:300]!r}")
    return Resolution(item["metadata"]["version"], unquote(item["download_info"]["url"]),
                      tuple(item["metadata"].get("requires_dist", ())))


def _why_not(output: str, status: int) -> str:
    """pip's reason, shortest first: an index it could not reach (and why), else its last error line."""
    unreachable = re.search(r"Could not fetch URL (\S+?):? (?:connection error: )?(.*?)(?: - skipping)?$", output,
                            flags=re.M)
    if unreachable:
        cause = re.findall(r"(\[Errno [^\]]+\][^'\")]*|timed out|[A-Za-z]*Error\b[^'\")]*)", unreachable[2])
        return f"could not reach {unreachable[1]} ({(cause[-1] if cause else unreachable[2][:200]).strip()})"
    errors = [line.strip().removeprefix("ERROR: ") for line in output.splitlines() if line.startswith("ERROR:")]
    return errors[-1] if errors else output.strip()[-300:] or f"pip exited with status {status}"


def _installed(requirement: str) -> str | None:
    """The installed torch's version when it is exactly the pinned CPU build, else None."""
    try:
        torch = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None
    wanted = requirement.partition("==")[2]
    if torch.version == wanted and gpu_build_of(torch.version, torch.requires or []) is None:
        return torch.version
    return None


def _answer(resolution: Resolution | Unresolved, requirement: str) -> str | None:
    """None when the resolution is the pinned CPU build; else what the source answered instead."""
    if isinstance(resolution, Unresolved):
        return resolution.reason
    if resolution.gpu is not None:
        return f"it resolves {requirement} to a GPU build ({resolution.gpu}) from {resolution.url}"
    return None


def choose(requirement: str, *, cpu_index: str = CPU_INDEX, check_installed: bool = True,
           python: str = sys.executable) -> Choice:
    """The first source that serves ``requirement`` as a CPU build; raises TorchSourceError when none does."""
    if check_installed and _installed(requirement):
        return Choice(f"already installed (torch {_installed(requirement)})", ())
    configured = resolve(requirement, python=python)
    configured_answer = _answer(configured, requirement)
    if configured_answer is None and isinstance(configured, Resolution):  # no answer: always a Resolution
        return Choice(f"pip's configured sources ({configured.url})", ("--no-deps", requirement))
    index = resolve(requirement, ("--index-url", cpu_index), env=ONLY_THE_INDEX, python=python,
                    timeout=PROBE_TIMEOUT, retries=0, limit=PROBE_LIMIT)
    index_answer = _answer(index, requirement)
    if index_answer is None and isinstance(index, Resolution):
        return Choice(f"PyTorch's CPU index ({index.url}); pip's configured sources do not serve it "
                      f"({configured_answer})",
                      ("--no-deps", "--index-url", cpu_index, requirement))
    raise TorchSourceError(
        f"no source serves {requirement}, the CPU build torch_npu needs.\n"
        f"  pip's configured sources: {configured_answer}\n"
        f"  PyTorch's CPU index ({cpu_index}): {index_answer}\n"
        f"Make {cpu_index} reachable (a proxy in pip's configuration counts), or put the wheel where pip's "
        f"configuration finds it (find-links = a directory holding torch-{requirement.partition('==')[2]}-*.whl, "
        "or an index or mirror that serves it), then run scripts/setup again.")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m pytest_npu_lazy.torch_source REQUIREMENTS_FILE", file=sys.stderr)
        return 2
    try:
        choice = choose(torch_requirement(Path(args[0])))
    except TorchSourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(choice.said)
    for arg in choice.pip_args:
        print(arg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
