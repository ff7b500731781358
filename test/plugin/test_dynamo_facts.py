"""test/dynamo's version facts: which torch_npu releases the deferred-loading guarantees apply to."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dynamo"))
import facts


@pytest.mark.parametrize(("version", "applies"), [
    ("2.8.0.post5", False),
    ("2.9.1", False),
    ("2.10.0", False),
    ("2.10.0.post6", False),
    ("2.10.0.post7", True),
    ("2.11.0.post2", False),
    ("2.11.0.post3", True),
    ("2.12.0", False),
    ("2.12.0.post3", True),
    ("2.13.0", True),
    ("2.13.1", True),
    ("2.14.0", True),
    ("3.0.0", True),
])
def test_deferred_setup_by_release(version, applies):
    reason = facts.deferred_setup_missing(Version(version))
    assert (reason is None) == applies, reason
    if reason:
        assert f"torch_npu {version} predates the deferred Dynamo/Inductor set-up" in reason
        assert reason.startswith("needs torch_npu "), reason
        assert "imports torch._dynamo" in reason


def test_no_torch_npu_is_not_a_version_skip():
    assert facts.deferred_setup_missing(None) is None


def test_the_installed_torch_npu_agrees_with_the_table():
    """Where the table says the set-up exists, torch_npu's source defines it, and the other way round."""
    spec = importlib.util.find_spec("torch_npu")
    if spec is None:
        pytest.skip("needs torch-npu, which is not installed")
    source = (Path(spec.submodule_search_locations[0]) / "utils" / "_dynamo.py").read_text()
    defined = "def _lazy_dynamo_setup(" in source and "def _lazy_inductor_setup(" in source
    version = facts.torch_npu_version()
    assert defined == (facts.deferred_setup_missing(version) is None), f"torch_npu {version}"
