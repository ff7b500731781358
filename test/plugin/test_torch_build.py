"""A CUDA build of torch beside torch_npu is refused up front, from metadata, with the command that fixes it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_npu_lazy.torch_build import CPU_INDEX, problem

ROOT = Path(__file__).resolve().parents[2]


def _distribution(site: Path, name: str, version: str, *requires: str) -> None:
    """An installed distribution as importlib.metadata finds it: a dist-info folder with METADATA."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    (info / "METADATA").write_text("\n".join(lines + [f"Requires-Dist: {r}" for r in requires]) + "\n")


@pytest.fixture
def cuda_site(tmp_path: Path) -> Path:
    """What pip leaves where it serves only the CUDA build: torch 2.12.0+cu130 and torch_npu 2.12.0.post3."""
    _distribution(tmp_path, "torch", "2.12.0+cu130", 'nvidia-cuda-runtime==13.0.96; platform_system == "Linux"')
    _distribution(tmp_path, "torch_npu", "2.12.0.post3", "torch==2.12.0.*")
    return tmp_path


def test_a_cuda_local_version_is_refused_with_the_cpu_index_command(cuda_site):
    text = problem(path=[str(cuda_site)], python="py")
    assert text is not None
    assert "torch is a CUDA build (version 2.12.0+cu130) and torch_npu 2.12.0.post3 is installed" in text
    assert "Duplicated key 'pinned_reserve_segment_size_mb'" in text
    assert f"py -m pip install --force-reinstall --no-deps 'torch==2.12.0+cpu' --index-url {CPU_INDEX}" in text


@pytest.mark.parametrize("version, requires, refused", [
    ("2.12.0", ["filelock", "nvidia-cublas-cu12==12.8.4.1; platform_system == 'Linux'", "nvidia-nccl-cu12"], True),
    ("2.14.0+rocm6.4", [], True),
    ("2.13.0+cpu", ["filelock"], False),
    ("2.13.0", ["filelock", "sympy>=1.13"], False),  # a CPU build without a local version (aarch64)
])
def test_gpu_builds_are_told_by_version_or_nvidia_requirements(tmp_path, version, requires, refused):
    _distribution(tmp_path, "torch", version, *requires)
    _distribution(tmp_path, "torch_npu", "2.13.0", "torch==2.13.0.*")
    text = problem(path=[str(tmp_path)])
    assert (text is not None) == refused, text
    if version == "2.12.0":
        assert "which requires nvidia-cublas-cu12 and 1 more nvidia-* package(s)" in text
        assert "'torch==2.12.0+cpu'" in text


def test_a_cuda_torch_without_torch_npu_is_fine(tmp_path):
    _distribution(tmp_path, "torch", "2.12.0+cu130")
    assert problem(path=[str(tmp_path)]) is None


def test_pytest_stops_before_anything_imports_torch(pytester, cuda_site, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(cuda_site), os.environ.get("PYTHONPATH", "")]))
    pytester.makeconftest("import torch\n")  # would abort the process with the CUDA build
    pytester.makepyfile(test_any="def test_any():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert "pytest-npu-lazy: torch is a CUDA build (version 2.12.0+cu130)" in result.stderr.str()
    assert f"'torch==2.12.0+cpu' --index-url {CPU_INDEX}" in result.stderr.str()


def test_setup_script_stops_on_a_cuda_torch(cuda_site):
    """scripts/setup runs the check right after installing; it fails there with the fix."""
    assert ".venv/bin/python -m pytest_npu_lazy.torch_build" in (ROOT / "scripts" / "setup").read_text()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(cuda_site), str(ROOT)]))
    done = subprocess.run([sys.executable, "-m", "pytest_npu_lazy.torch_build"], env=env, capture_output=True,
                          text=True, cwd=ROOT)
    assert done.returncode == 1 and "error: torch is a CUDA build" in done.stderr, done.stderr
    clean = subprocess.run([sys.executable, "-m", "pytest_npu_lazy.torch_build"], capture_output=True, text=True,
                           cwd=ROOT)
    assert clean.returncode == 0, clean.stderr  # this machine's torch is the CPU build
