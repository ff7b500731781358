"""The benchmark command (``python -m benchmarks``) still works: run it on tiny inputs and check its JSON.

Benchmarks are not tests and CI does not run them; this only makes sure the
command, its subprocess suite and its report keep working. The numbers of a
``--quick`` run mean nothing, so only their presence and sanity are checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs("torch", "torch_npu", "xdist")

REPO = Path(__file__).resolve().parents[2]
FIGURES = ("zygote_median_ms", "subprocess_over_zygote", "suite_speedup", "recorder_overhead_pct", "xdist_speedup")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    json_path, md_path = folder / "latest.json", folder / "table.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(json_path), "--markdown", str(md_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert json_path.exists(), result.stderr[-3000:]
    return json.loads(json_path.read_text()), result.stdout, md_path.read_text()


def test_every_figure_is_there(quick_run):
    data, _, _ = quick_run
    assert data["quick"] is True
    assert set(data["targets"]) == set(FIGURES)
    missing = [name for name, verdict in data["targets"].items() if verdict["value"] is None]
    assert not missing, f"figures without a value: {missing}"
    for key in ("cpu", "cores", "torch", "torch_npu", "pytest"):
        assert data["machine"][key], key
    assert len(data["load"]["start"]) == 3 and len(data["load"]["end"]) == 3


def test_trivial_tests_are_timed_sanely(quick_run):
    data, _, _ = quick_run
    variants = data["trivial"]["variants"]
    assert set(variants) >= {"none", "forked", "zygote", "spawn", "subprocess"}
    for name in ("none", "zygote", "spawn", "subprocess"):
        entry = variants[name]
        assert "error" not in entry, (name, entry.get("error"))
        assert entry["outcomes"].get("passed") == entry["tests"], (name, entry["outcomes"])
        assert entry["marginal"]["median_ms"] > 0 and entry["marginal"]["p90_ms"] >= entry["marginal"]["median_ms"]
        assert entry["startup_s"] > 0
    forked = variants["forked"]
    if "impossible" in forked:  # no side venv with an older pytest: the reason must say why
        assert "pytest-forked" in forked["impossible"] and "pytest" in forked["impossible"]
    else:
        assert forked["outcomes"].get("passed") == forked["tests"], forked
        assert forked["marginal"]["median_ms"] > 0
    # orders of magnitude that hold on any machine, even a busy one
    median = {name: variants[name]["marginal"]["median_ms"] for name in ("none", "zygote", "spawn", "subprocess")}
    assert median["none"] < median["zygote"] < median["subprocess"], median
    assert median["zygote"] < median["spawn"], median
    assert median["subprocess"] > 200, median  # an interpreter that imports torch and torch_npu
    floor = data["trivial"]["fork_floor"]
    assert 0 < floor["fork_to_running_child_ms"] < 1000 and 0 < floor["fork_exit_reap_ms"] < 1000, floor


def test_suites_ran_the_same_checks(quick_run):
    data, _, _ = quick_run
    suite, xdist = data["suite"], data["xdist"]
    for name in ("npu_lazy", "subprocess"):
        assert suite[name]["returncode"] == 0, suite[name].get("error")
        assert suite[name]["outcomes"] == {"passed": 1}, suite[name]["outcomes"]
        assert suite[name]["wall_s"] > 0
    assert suite["same_outcomes"] is True
    assert xdist["n2"]["returncode"] == 0 and xdist["n2"]["outcomes"] == {"passed": 1}
    assert xdist["n0_s"] > 0 and xdist["n2_s"] > 0


def test_recorder_overhead_is_measured(quick_run):
    data, _, _ = quick_run
    recorder = data["recorder"]
    assert "error" not in recorder, recorder.get("error")
    assert len(recorder["off_s"]) == len(recorder["on_s"]) == recorder["runs"] >= 1
    assert all(0.2 < t < 120 for t in recorder["off_s"] + recorder["on_s"]), recorder
    assert 0.5 < recorder["ratio"] < 2.0, recorder


def test_markdown_table_is_printed_and_written(quick_run):
    data, stdout, written = quick_run
    assert written == data["markdown"]
    assert data["markdown"].strip() in stdout
    for heading in ("### 1.", "### 2.", "### 3.", "### 4.", "### Targets"):
        assert heading in written
    assert "python -m benchmarks --quick" in written


def test_module_zygote_part_compares_the_four_ways(tmp_path):
    """``--only modules``: every row has its columns, module zygotes and per-test collection pass alike."""
    json_path = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    result = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "modules", "--json", str(json_path)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    data = json.loads(json_path.read_text())
    rows = data["modules"]["rows"]
    assert set(rows) == {"trivial", "parametrized", "heavy_import", "dynamo"}, rows.keys()
    for name, row in rows.items():
        for column in ("per_test", "module"):
            entry = row["columns"][column]
            assert "error" not in entry, (name, column, entry.get("error"))
            assert entry["outcomes"].get("passed") == entry["tests"], (name, column, entry["outcomes"])
        assert row["columns"]["module"]["module_zygotes_seen"] >= 1, (name, row)
    assert rows["parametrized"]["columns"]["per_test"]["subset"].startswith("first 3")
    assert {"module_trivial_ms", "module_over_forked_worst"} <= set(data["targets"])
    assert data["targets"]["module_trivial_ms"]["value"] > 0
    assert "### Isolation at fork cost" in data["markdown"]


def test_selection_map_part_times_both_columns(tmp_path):
    """``--only selection_map``: each suite ran with and without the map, every test passed, a map was written."""
    json_path = tmp_path / "selection.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    result = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "selection_map", "--json",
                             str(json_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    rows = json.loads(json_path.read_text())["selection_map"]["rows"]
    assert set(rows) == {"dynamo", "trivial"}
    for name, row in rows.items():
        for column in ("plain", "map"):
            entry = row["columns"][column]
            assert "error" not in entry, (name, column, entry.get("error"))
            assert entry["outcomes"].get("passed") == entry["tests"], (name, column, entry["outcomes"])
        assert row["map_kib"] > 0 and "extra_median_ms" in row, row


def test_interpreter_part_times_each_kernel_beside_numpy(tmp_path):
    """``--only interpreter``: every kernel ran in all three variants, beside NumPy's pass, and the targets are judged."""
    json_path = tmp_path / "interpreter.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    result = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "interpreter", "--json",
                             str(json_path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    data = json.loads(json_path.read_text())
    cases = data["interpreter"]["cases"]
    assert len(cases) == 6, data["interpreter"]  # the index codegen's sub-block sum among them
    for name, case in cases.items():
        assert min(case[k] for k in ("shipped_per_s", "one_by_one_per_s", "compute_per_s", "numpy_per_s")) > 0, \
            (name, case)
    assert data["targets"]["numerics_over_shipped_max"]["value"] > 0
    assert data["targets"]["compute_over_numpy_max"]["value"] > 0
    assert "### Triton's interpreter under compute mode" in data["markdown"]


def test_xdist_isolation_part_runs_each_suite_each_way(tmp_path):
    """``--only xdist_isolation``: both suites, serially and with workers, in-process and ours (pytest-forked where
    a pytest before 9.2 has it), every run clean, each target judged from a row that ran."""
    json_path = tmp_path / "xdist_isolation.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    result = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "xdist_isolation",
                             "--xdist-workers", "2", "--json", str(json_path)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    data = json.loads(json_path.read_text())["xdist_isolation"]
    assert data["workers"] == [0, 2]
    for name, suite in data["suites"].items():
        assert "errors" not in suite["rows"], (name, suite["rows"]["errors"])
        for workers in ("0", "2"):
            assert suite["rows"][workers]["inprocess"] > 0 and suite["rows"][workers]["ours"] > 0, (name, suite)
        assert suite["fork_floor"]["fork_exit_reap_ms"] > 0, suite["fork_floor"]
    assert "### 8. Every test isolated under pytest-xdist" in json.loads(json_path.read_text())["markdown"]
