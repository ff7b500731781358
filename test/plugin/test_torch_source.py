"""scripts/setup installs PyTorch's CPU build on any machine: the pin resolves to it, never to PyPI's CUDA build.

Asked with pip's own resolution (``pip install --dry-run --report``), as
setup asks: from PyPI alone (an ordinary machine's only source), from pip's
configured sources (here a local wheel directory) and from PyTorch's CPU
index, each where this machine can reach it; a source that cannot be
reached skips its test, saying why. The choice between sources is checked
offline, with wheels and an index made in a temporary directory.
"""

from __future__ import annotations

import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from pytest_npu_lazy.torch_build import CPU_INDEX
from pytest_npu_lazy.torch_source import (
    ONLY_THE_INDEX,
    Resolution,
    TorchSourceError,
    Unresolved,
    choose,
    resolve,
    torch_line,
    torch_requirement,
)

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "requirements" / "ci.txt"
PYPI = "https://pypi.org/simple"


def _unreachable(answer: Resolution | Unresolved) -> bool:
    return isinstance(answer, Unresolved) and answer.reason.startswith(("could not reach", "no answer within"))


def test_the_requirements_pin_the_cpu_build_exactly():
    assert torch_requirement(CI).endswith("+cpu"), torch_line(CI)


def test_a_pin_without_the_cpu_build_is_refused_naming_the_fix(tmp_path):
    requirements = tmp_path / "ci.txt"
    requirements.write_text("# torch\ntorch==2.13.0  # the CPU build, one hopes\ntorch-npu==2.13.0\n")
    with pytest.raises(TorchSourceError, match=r"'torch==2.13.0' does not pin torch's CPU build, so pip may pick "
                                               r"PyPI's CUDA build.*pin it exactly, e.g. torch==2.13.0\+cpu"):
        torch_requirement(requirements)


def test_pypi_alone_never_gives_the_pinned_torch_as_a_cuda_build():
    """An ordinary machine's pip knows PyPI only, where torch==2.13.0 is the CUDA build (it requires nvidia-*
    packages): the pin must either resolve to a CPU build there or not at all, so setup looks further."""
    line = torch_line(CI)
    answer = resolve(line, ("--index-url", PYPI), env=ONLY_THE_INDEX)
    if _unreachable(answer):
        pytest.skip(f"needs network access to PyPI ({PYPI}), which this machine cannot reach: {answer.reason}")
    if isinstance(answer, Unresolved):
        assert "No matching distribution found" in answer.reason, answer
        return
    assert answer.gpu is None, f"PyPI resolves {line} to a GPU build ({answer.gpu}): {answer.url}"


def test_pips_configured_sources_give_the_cpu_build_where_they_serve_it():
    requirement = torch_requirement(CI)
    answer = resolve(requirement)
    if isinstance(answer, Unresolved):
        pytest.skip(f"needs pip configured with a source that serves {requirement} (a find-links directory or a "
                    f"mirror, pip config): here it does not ({answer.reason}); setup then asks PyTorch's CPU index, "
                    "tested below")
    assert answer.gpu is None and answer.version == requirement.partition("==")[2], answer
    assert not [r for r in answer.requires if r.lower().startswith("nvidia-")], answer.requires


def test_pytorchs_cpu_index_gives_the_cpu_build():
    requirement = torch_requirement(CI)
    started = time.monotonic()
    answer = resolve(requirement, ("--index-url", CPU_INDEX), env=ONLY_THE_INDEX, timeout=5, retries=0, limit=60)
    if _unreachable(answer):
        assert time.monotonic() - started < 60
        pytest.skip(f"needs network access to PyTorch's CPU index ({CPU_INDEX}), which this machine cannot reach: "
                    f"{answer.reason}")
    assert isinstance(answer, Resolution), answer
    assert answer.gpu is None and answer.version == requirement.partition("==")[2], answer


# -- the choice, offline: wheels and an index in a temporary directory -----------------------------------

def _wheel(folder: Path, version: str, *requires: str) -> Path:
    """A wheel of a 'torch' that pip can resolve: its METADATA is what the choice reads."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version.partition('+')[0]}.dist-info"
    metadata = "\n".join(["Metadata-Version: 2.1", "Name: torch", f"Version: {version}",
                          *(f"Requires-Dist: {r}" for r in requires)]) + "\n"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("torch/__init__.py", "")
        wheel.writestr(f"{info}/METADATA", metadata)
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


def _index(root: Path, *wheels: Path) -> str:
    """A PEP 503 index at a file: URL serving these wheels."""
    project = root / "torch"
    project.mkdir(parents=True)
    links = "".join(f'<a href="{w.as_uri()}">{w.name}</a>\n' for w in wheels)
    (project / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return root.as_uri()


@pytest.fixture
def configured(tmp_path, monkeypatch):
    """pip's configuration as an ordinary machine has it, with its index an empty one here (no network):
    returns the find-links folder, where a test may put what the machine's configuration serves."""
    links = tmp_path / "links"
    links.mkdir()
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_INDEX_URL", empty.as_uri())
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", " ")
    return links


def test_the_configured_sources_are_chosen_where_they_serve_the_cpu_build(configured, tmp_path):
    _wheel(configured, "2.13.0+cpu", "filelock")
    cpu_index = _index(tmp_path / "cpu", _wheel(tmp_path / "cpu-wheels", "2.13.0+cpu"))
    choice = choose("torch==2.13.0+cpu", cpu_index=cpu_index, check_installed=False)
    assert choice.said.startswith("pip's configured sources (file:") and "torch-2.13.0+cpu" in choice.said
    assert choice.pip_args == ("--no-deps", "torch==2.13.0+cpu")


def test_the_cpu_index_is_chosen_where_the_configured_sources_have_only_a_cuda_build(configured, tmp_path):
    _wheel(configured, "2.13.0", "nvidia-cublas==13.0; platform_system == 'Linux'")  # PyPI's torch, as it were
    cpu_index = _index(tmp_path / "cpu", _wheel(tmp_path / "cpu-wheels", "2.13.0+cpu", "filelock"))
    choice = choose("torch==2.13.0+cpu", cpu_index=cpu_index, check_installed=False)
    assert choice.said.startswith(f"PyTorch's CPU index ({Path(tmp_path / 'cpu-wheels').as_uri()}"), choice.said
    assert "pip's configured sources do not serve it (No matching distribution found" in choice.said
    assert choice.pip_args == ("--no-deps", "--index-url", cpu_index, "torch==2.13.0+cpu")


def test_a_cpu_build_that_requires_nvidia_packages_is_not_taken(configured, tmp_path):
    _wheel(configured, "2.13.0+cpu", "nvidia-nccl-cu13")
    cpu_index = _index(tmp_path / "cpu", _wheel(tmp_path / "cpu-wheels", "2.13.0+cpu"))
    choice = choose("torch==2.13.0+cpu", cpu_index=cpu_index, check_installed=False)
    assert "pip's configured sources do not serve it (it resolves torch==2.13.0+cpu to a GPU build (version " \
           "2.13.0+cpu, which requires nvidia-nccl-cu13)" in choice.said


def test_an_unreachable_cpu_index_costs_seconds_and_the_error_names_both_sources_and_the_fix(configured):
    """Port 9 of this machine refuses connections: the CPU index as a machine without a route to it sees it."""
    started = time.monotonic()
    with pytest.raises(TorchSourceError) as raised:
        choose("torch==2.13.0+cpu", cpu_index="http://127.0.0.1:9/whl/cpu", check_installed=False)
    assert time.monotonic() - started < 30
    text = str(raised.value)
    assert "no source serves torch==2.13.0+cpu, the CPU build torch_npu needs." in text
    assert "pip's configured sources: No matching distribution found for torch==2.13.0+cpu" in text
    assert "PyTorch's CPU index (http://127.0.0.1:9/whl/cpu): could not reach http://127.0.0.1:9/whl/cpu/torch/ (" \
           in text, text
    assert "find-links = a directory holding torch-2.13.0+cpu-*.whl" in text


def test_setup_asks_the_source_and_installs_torch_before_the_requirements():
    setup = (ROOT / "scripts" / "setup").read_text()
    order = [setup.index(".venv/bin/python -m pytest_npu_lazy.torch_source requirements/ci.txt"),
             setup.index('pip install --disable-pip-version-check "${choice[@]:1}"'),
             setup.index("pip install --disable-pip-version-check -r requirements/ci.txt"),
             setup.index(".venv/bin/python -m pytest_npu_lazy.torch_build")]
    assert order == sorted(order)


def test_the_command_line_says_the_source_then_the_pip_arguments(configured, tmp_path):
    _wheel(configured, "2.13.0+cpu")
    requirements = tmp_path / "ci.txt"
    requirements.write_text("torch==2.13.0+cpu\n")
    done = subprocess.run([sys.executable, "-m", "pytest_npu_lazy.torch_source", str(requirements)],
                          capture_output=True, text=True, cwd=ROOT)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert lines[0].startswith(("pip's configured sources (", "already installed (torch 2.13.0+cpu)")), lines
    assert lines[1:] in (["--no-deps", "torch==2.13.0+cpu"], []), lines
