"""The deferred-loading suites in every environment of matrix.toml, then the matrix: ``nox``.

Two kinds of environment, one virtual environment each, from matrix.toml (or
the file named by ``NPU_LAZY_MATRIX``):

- ``env``: a (torch, torch_npu) pair and Triton flavour; runs test/dynamo
  (torch_npu's guarantees) and test/upstream (stock PyTorch's, which
  torch_npu relies on);
- ``upstream``: a PyTorch release alone, PyPI's wheel with what it requires
  (the CUDA build, its nvidia-* packages and Triton; it runs on CPU too);
  runs test/upstream.

Each writes ``<output>/<id>.json`` (``--npu-lazy-json``); the ``matrix``
session then draws ``<output>.md`` from the reports with ``python -m
pytest_npu_lazy.reports.matrix``. A failing guarantee is a result, not a broken
run: only an environment that cannot be built or cannot run pytest fails
its session.

    pip install nox
    nox                         # every environment, then the matrix
    nox -l                      # the environments
    nox -s "env(torch2.13.0-npu2.13.0-none)" -- -x    # one, with extra pytest arguments
    nox -s "upstream(torch2.15.0)" matrix               # one PyTorch release, then the matrix

The plugin's own tests against the oldest and the newest pytest that
pyproject.toml declares (not run by a plain ``nox``):

    nox -s "pytest(oldest)" "pytest(newest)"               # test/plugin, 2 workers
    nox -s "pytest(oldest)" -- test/plugin/test_modes.py    # other pytest arguments
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nox

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent
CONFIG = Path(os.environ.get("NPU_LAZY_MATRIX", ROOT / "matrix.toml"))
EXACT = re.compile(r"^\d+(\.\d+)*(\.post\d+)?(\+[a-z0-9.]+)?$")

nox.options.sessions = ["env", "upstream", "matrix"]
#: the CANN modes a [[pair]] may list Triton flavours under, besides the host stub every flavour runs on
EMULATED = ("emulate", "compute")
nox.options.reuse_venv = "yes"


@dataclass(frozen=True)
class Environment:
    torch: str
    torch_npu: str
    flavour: str
    triton: tuple[str, ...]
    pip_args: tuple[str, ...]
    #: the CANN mode the suites run under: "stub" (no device), "emulate" (the emulated NPU) or "compute" (the
    #: emulated NPU that computes: test/dynamo's first calls on npu tensors, and test/npu_kernels)
    cann: str = "stub"

    @property
    def id(self) -> str:
        suffix = "" if self.cann == "stub" else f"-{self.cann}"
        return f"torch{self.torch}-npu{self.torch_npu}-{self.flavour}{suffix}"


@dataclass(frozen=True)
class Upstream:
    """A PyTorch release without torch_npu: PyPI's wheel and everything it requires."""

    torch: str
    pip_args: tuple[str, ...]
    #: variables for its ``pip install`` only (e.g. ``PIP_CONSTRAINT = "/dev/null"`` where a constraint caps torch)
    pip_env: tuple[tuple[str, str], ...]

    @property
    def id(self) -> str:
        return f"torch{self.torch}"


def _upstreams(path: Path, config: dict) -> list[Upstream]:
    upstreams = []
    for index, entry in enumerate(config.get("upstream", [])):
        if not EXACT.match(str(entry.get("torch", ""))):
            raise SystemExit(f"{path}: upstream {index + 1}: torch = {entry.get('torch')!r}: pin an exact version")
        upstreams.append(Upstream(str(entry["torch"]), tuple(entry.get("pip_args", [])),
                                  tuple((str(k), str(v)) for k, v in entry.get("pip_env", {}).items())))
    return upstreams


def _environments(path: Path) -> tuple[dict, list[Environment]]:
    with open(path, "rb") as handle:
        config = tomllib.load(handle)
    environments = []
    for index, pair in enumerate(config.get("pair", [])):
        for key in ("torch", "torch_npu"):
            if not EXACT.match(str(pair.get(key, ""))):
                raise SystemExit(f"{path}: pair {index + 1}: {key} = {pair.get(key)!r}: pin an exact version "
                                 "(a looser spec can pull a CUDA build of torch, which torch_npu cannot import)")
        flavours = pair.get("triton", {"none": []})
        for mode in EMULATED:
            unknown = [name for name in pair.get(mode, []) if name not in flavours]
            if unknown:
                raise SystemExit(f"{path}: pair {index + 1}: {mode} names Triton flavours it does not have: {unknown}")
        for flavour, packages in flavours.items():
            for cann in ["stub"] + [mode for mode in EMULATED if flavour in pair.get(mode, [])]:
                environments.append(Environment(str(pair["torch"]), str(pair["torch_npu"]), flavour,
                                                tuple(packages), tuple(pair.get("pip_args", [])), cann))
    if not environments:
        raise SystemExit(f"{path}: no [[pair]] with a torch and torch_npu version")
    return config.get("matrix", {}), environments


SETTINGS, ENVIRONMENTS = _environments(CONFIG)

#: the ends of the range ``pytest`` has in pyproject.toml's dependencies; keep the two in step
PYTEST_RELEASES = {"oldest": "8.0.0", "newest": "9.2.0"}
with open(CONFIG, "rb") as _handle:
    UPSTREAMS = _upstreams(CONFIG, tomllib.load(_handle))
OUTPUT = ROOT / SETTINGS.get("output", "docs/matrix")

CHECK_BUILD = """
import importlib.metadata as m, importlib.util, sys
flavour = sys.argv[1]
names = sorted({(d.metadata["Name"] or "").lower() for d in m.distributions()})
cuda = [n for n in names if n.startswith("nvidia-")]
if cuda:
    sys.exit(f"a CUDA build of torch came in ({', '.join(cuda[:3])}, ...): torch_npu needs the CPU build; "
             "pin torch exactly and give pip_args the index of the CPU builds")
if flavour == "none" and importlib.util.find_spec("triton") is not None:
    sys.exit("flavour 'none' but a triton package is installed: something pulled it in")
print("torch", m.version("torch"), "torch_npu", m.version("torch-npu"))
"""


@nox.session(name="env")
@nox.parametrize("environment", [nox.param(e, id=e.id) for e in ENVIRONMENTS])
def env(session: nox.Session, environment: Environment) -> None:
    """test/dynamo and test/upstream in one (torch, torch_npu) environment and CANN mode, with a JSON report."""
    session.install(*environment.pip_args, f"torch=={environment.torch}", f"torch-npu=={environment.torch_npu}",
                    *environment.triton, *SETTINGS.get("test_requirements", []))
    session.install("-e", str(ROOT))
    session.run("python", "-c", CHECK_BUILD, environment.flavour)
    report = OUTPUT / f"{environment.id}.json"
    report.unlink(missing_ok=True)  # never draw a stale result
    session.chdir(ROOT)
    session.run("python", "-m", "pytest", *SETTINGS.get("pytest_args", ["-p", "npu_lazy", "test/dynamo"]),
                f"--npu-lazy-cann={environment.cann}", f"--npu-lazy-json={report}", *session.posargs,
                success_codes=[0, 1])


def _ci_requirements_except_pytest() -> list[str]:
    """requirements/ci.txt without its pytest pin (its plugins' pins support the whole declared range)."""
    lines = (ROOT / "requirements" / "ci.txt").read_text().splitlines()
    requirements = [line.split("#", 1)[0].strip() for line in lines]
    return [r for r in requirements if r and not re.match(r"^pytest\s*[=<>!~]", r)]


@nox.session(name="pytest")
@nox.parametrize("release", [nox.param(version, id=end) for end, version in PYTEST_RELEASES.items()])
def pytest_release(session: nox.Session, release: str) -> None:
    """The plugin's own tests (test/plugin) on one end of the declared pytest range."""
    session.install(*_ci_requirements_except_pytest(), f"pytest=={release}")
    session.install("--no-deps", "-e", str(ROOT))
    session.run("python", "-c", "import pytest, sys; v = pytest.__version__; "
                f"sys.exit(None if v == {release!r} else f'pytest {{v}} came in, not {release}')")
    session.chdir(ROOT)
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider",
                *(session.posargs or ["-n", "2", "test/plugin"]))


CHECK_UPSTREAM = """
import importlib.metadata as m, sys
names = {(d.metadata["Name"] or "").lower().replace("_", "-") for d in m.distributions()}
if "torch-npu" in names:
    sys.exit("torch_npu came in: an upstream environment tests PyTorch alone")
print("torch", m.version("torch"), "triton", m.version("triton") if "triton" in names else "absent")
"""


@nox.session(name="upstream")
@nox.parametrize("release", [nox.param(u, id=u.id) for u in UPSTREAMS])
def upstream(session: nox.Session, release: Upstream) -> None:
    """test/upstream with one PyTorch release from PyPI, with a JSON report."""
    # `===`: exactly this version, never a local build such as 2.13.0+cpu that a --find-links folder offers
    session.install(*release.pip_args, f"torch==={release.torch}", *SETTINGS.get("upstream_requirements", []),
                    env=dict(release.pip_env))
    session.install("--no-deps", "-e", str(ROOT))  # its requirements are in upstream_requirements
    session.run("python", "-c", CHECK_UPSTREAM)
    report = OUTPUT / f"{release.id}.json"
    report.unlink(missing_ok=True)
    session.chdir(ROOT)
    session.run("python", "-m", "pytest", *SETTINGS.get("upstream_pytest_args", ["-p", "npu_lazy", "test/upstream"]),
                f"--npu-lazy-json={report}", *session.posargs, success_codes=[0, 1])


@nox.session(venv_backend="none")
def matrix(session: nox.Session) -> None:
    """The matrix of the reports the env sessions wrote (pytest_npu_lazy.reports.matrix needs only the standard library)."""
    ids = [e.id for e in ENVIRONMENTS] + [u.id for u in UPSTREAMS] + SETTINGS.get("extra_reports", [])
    reports = [str(OUTPUT / f"{i}.json") for i in ids if (OUTPUT / f"{i}.json").exists()]
    missing = [i for i in ids if not (OUTPUT / f"{i}.json").exists()]
    if missing:
        session.warn(f"no report from {', '.join(missing)}: run their env sessions")
    if not reports:
        session.error("no report to draw")
    env = {"PYTHONPATH": str(ROOT)}
    session.run(sys.executable, "-m", "pytest_npu_lazy.reports.matrix", *reports, env=env)
    phases = [f"--phases={pattern}" for pattern in SETTINGS.get("matrix_phases", [])]
    session.run(sys.executable, "-m", "pytest_npu_lazy.reports.matrix", *reports, "--markdown", *phases,
                "-o", str(OUTPUT.with_suffix(".md")), env=env)
