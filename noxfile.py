"""The deferred-loading suite in every environment of matrix.toml, then the matrix: ``nox``.

One virtual environment per (torch, torch_npu) pair and Triton flavour of
matrix.toml (or of the file named by ``NPU_LAZY_MATRIX``). Each runs
``pytest -p npu_lazy test/dynamo --npu-lazy-json=<output>/<id>.json``; the
``matrix`` session then draws ``<output>.md`` from the reports with
``python -m pytest_npu_lazy.reports.matrix``. A failing guarantee is a result, not
a broken run: only an environment that cannot be built or cannot run
pytest fails its session.

    pip install nox
    nox                         # every environment, then the matrix
    nox -l                      # the environments
    nox -s "env(torch2.13.0-npu2.13.0-none)" -- -x    # one, with extra pytest arguments

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

nox.options.sessions = ["env", "matrix"]
nox.options.reuse_venv = "yes"


@dataclass(frozen=True)
class Environment:
    torch: str
    torch_npu: str
    flavour: str
    triton: tuple[str, ...]
    pip_args: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"torch{self.torch}-npu{self.torch_npu}-{self.flavour}"


def _environments(path: Path) -> tuple[dict, list[Environment]]:
    with open(path, "rb") as handle:
        config = tomllib.load(handle)
    environments = []
    for index, pair in enumerate(config.get("pair", [])):
        for key in ("torch", "torch_npu"):
            if not EXACT.match(str(pair.get(key, ""))):
                raise SystemExit(f"{path}: pair {index + 1}: {key} = {pair.get(key)!r}: pin an exact version "
                                 "(a looser spec can pull a CUDA build of torch, which torch_npu cannot import)")
        for flavour, packages in pair.get("triton", {"none": []}).items():
            environments.append(Environment(str(pair["torch"]), str(pair["torch_npu"]), flavour,
                                            tuple(packages), tuple(pair.get("pip_args", []))))
    if not environments:
        raise SystemExit(f"{path}: no [[pair]] with a torch and torch_npu version")
    return config.get("matrix", {}), environments


SETTINGS, ENVIRONMENTS = _environments(CONFIG)

#: the ends of the range ``pytest`` has in pyproject.toml's dependencies; keep the two in step
PYTEST_RELEASES = {"oldest": "9.1.1", "newest": "9.2.0"}
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
    """test/dynamo in one environment, with a JSON report."""
    session.install(*environment.pip_args, f"torch=={environment.torch}", f"torch-npu=={environment.torch_npu}",
                    *environment.triton, *SETTINGS.get("test_requirements", []))
    session.install("-e", str(ROOT))
    session.run("python", "-c", CHECK_BUILD, environment.flavour)
    report = OUTPUT / f"{environment.id}.json"
    report.unlink(missing_ok=True)  # never draw a stale result
    session.chdir(ROOT)
    session.run("python", "-m", "pytest", *SETTINGS.get("pytest_args", ["-p", "npu_lazy", "test/dynamo"]),
                f"--npu-lazy-json={report}", *session.posargs, success_codes=[0, 1])


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


@nox.session(venv_backend="none")
def matrix(session: nox.Session) -> None:
    """The matrix of the reports the env sessions wrote (pytest_npu_lazy.reports.matrix needs only the standard library)."""
    reports = [str(OUTPUT / f"{e.id}.json") for e in ENVIRONMENTS if (OUTPUT / f"{e.id}.json").exists()]
    missing = [e.id for e in ENVIRONMENTS if not (OUTPUT / f"{e.id}.json").exists()]
    if missing:
        session.warn(f"no report from {', '.join(missing)}: run their env sessions")
    if not reports:
        session.error("no report to draw")
    env = {"PYTHONPATH": str(ROOT)}
    session.run(sys.executable, "-m", "pytest_npu_lazy.reports.matrix", *reports, env=env)
    session.run(sys.executable, "-m", "pytest_npu_lazy.reports.matrix", *reports, "--markdown",
                "-o", str(OUTPUT.with_suffix(".md")), env=env)
