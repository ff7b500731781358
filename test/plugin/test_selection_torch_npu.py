"""Change-driven selection on the real torch_npu: a map of three isolated tests, one-line changes of its lazy code.

The three tests stand at the three moments of the deferred-loading guarantee: ``import torch_npu``,
the ``torch.compile`` wrapper, the first compiled call. A change in the body of
``_lazy_inductor_setup`` (run by the first call only) must select the first-call test and no other;
one in ``_lazy_dynamo_setup`` (run by the wrapper) the wrapper and first-call tests; one in a function
of torch_npu's AMP grad scaler, which none of them runs, no test. Each change is a unified diff of
the installed source, with the file's git blob id as ``git diff --full-index`` writes it.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs("torch", "torch_npu")

TESTS = '''\
import pytest


@pytest.mark.npu_lazy(preload=["torch"])
def test_import(npu_lazy):
    with npu_lazy.phase("import"):
        import torch_npu  # noqa: F401
    npu_lazy.assert_not_loaded("torch_npu._inductor")


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_wrapper(npu_lazy):
    npu_lazy.compile(lambda x: x + 1, backend="inductor")
    npu_lazy.assert_not_loaded("torch_npu._inductor")


@pytest.mark.npu_lazy(preload=["torch", "torch_npu"])
def test_first_call(npu_lazy):
    import torch

    fn = npu_lazy.compile(lambda x: x * 2, backend="inductor")
    fn(torch.ones(4))
    assert npu_lazy.first_loaded("torch_npu._inductor") == "first_call"
'''


def _installed(relative: str) -> Path:
    return Path(importlib.util.find_spec("torch_npu").origin).parent.parent / relative


def _body_line_diff(relative: str, qualname: str) -> str:
    """A one-line change of the first statement of ``qualname``'s body after its docstring, as git writes it."""
    from pytest_npu_lazy.selection.sources import git_blob_id

    path = _installed(relative)
    source = path.read_text()
    tree = ast.parse(source)
    owner: ast.AST = tree
    for part in qualname.split("."):
        owner = next(n for n in ast.iter_child_nodes(owner) if getattr(n, "name", None) == part)
    body = owner.body[1:] if isinstance(owner.body[0], ast.Expr) and isinstance(owner.body[0].value, ast.Constant) \
        else owner.body
    line = body[0].lineno
    old = source.splitlines()[line - 1]
    return (f"diff --git a/{relative} b/{relative}\nindex {git_blob_id(path.read_bytes())}..{'1' * 40} 100644\n"
            f"--- a/{relative}\n+++ b/{relative}\n@@ -{line} +{line} @@\n-{old}\n+{old}  # changed\n")


@pytest.fixture(scope="module")
def taken(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("torch-npu-map")
    (folder / "test_moments.py").write_text(TESTS)
    (folder / "pytest.ini").write_text("[pytest]\n")
    # as test/dynamo's conftest: no compile-worker pool, which would outlive each test and leave it opaque
    env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1")
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "npu_lazy", "-p", "no:cacheprovider",
                             "--npu-lazy-take-map", "-q"], cwd=folder, capture_output=True, text=True, timeout=600,
                            env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "selection map of 3 tests written" in result.stdout
    return folder


def _selected(folder: Path, diff: str) -> list[str]:
    (folder / "change.diff").write_text(diff)
    result = subprocess.run([sys.executable, "-m", "pytest_npu_lazy.selection", "--changed", "change.diff",
                             "--as", "json"], cwd=folder, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["everything"] is None, data
    return sorted(n.split("::")[1] for n in data["selected"])


def test_the_first_calls_set_up_selects_only_the_first_call_test(taken):
    assert _selected(taken, _body_line_diff("torch_npu/utils/_dynamo.py", "_lazy_inductor_setup")) == ["test_first_call"]


def test_the_dynamo_set_up_selects_the_wrapper_and_the_first_call(taken):
    assert _selected(taken, _body_line_diff("torch_npu/utils/_dynamo.py", "_lazy_dynamo_setup")) == [
        "test_first_call", "test_wrapper"]


def test_a_change_outside_the_lazy_code_selects_none(taken):
    assert _selected(taken, _body_line_diff("torch_npu/npu/amp/grad_scaler.py", "GradScaler._unscale_grads_")) == []


def test_inductors_isa_probes_are_measured_not_opaque(taken):
    """The first call's Inductor starts Pythons of its own (its ISA probes, ``python -c``, run nothing of torch_npu
    on Linux): each measures itself and sends its lines home, so the test stays selectable by what it ran."""
    data = json.loads((taken / ".npu-lazy-map.json").read_text())
    assert data["tests"]["test_moments.py::test_first_call"]["opaque"] == []
