"""`python -m pytest_npu_lazy.reports.matrix`: guarantees by environment from hand-made reports; bad inputs refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_npu_lazy.reports import matrix
from pytest_npu_lazy.reports.schema import SCHEMA, SCHEMA_VERSION, result_entry


def _env(flavour: str, triton: str | None) -> dict:
    return {"torch": "2.13.0+cpu", "torch_npu": "2.13.0", "cann_mode": "stub", "cann_version": None,
            "cann": "CANN: host stub", "triton_flavour": flavour, "triton": triton,
            "device": "cpu", "python": "3.11.7", "platform": "linux-x86_64"}


def _report(env: dict, tests: list[dict]) -> dict:
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "created": "2026-12-02T00:00:00+00:00",
            "environment": env, "run": {"watch": ["triton"]}, "tests": tests}


IMPORT = "test/dynamo/test_import.py::test_import_torch_npu_defers_compiler_stack"
WRAP = "test/dynamo/test_wrapper.py::test_wrapper_runs_dynamo_setup_only[plain]"
TRITON = "test/dynamo/test_triton.py::test_wrapper_loads_triton"
NPU = "test/dynamo/test_npu_device.py::test_on_device"


@pytest.fixture
def reports(tmp_path):
    violation = {"kind": "loaded", "module": "torch_npu._inductor", "phase": "wrap",
                 "chain": ["torch_npu._inductor", "torch_npu.utils._dynamo", "torch (torch/__init__.py:2797 in compile)"]}
    none = _report(_env("absent", None), [
        result_entry(IMPORT, "passed", 0.1),
        result_entry(WRAP, "passed", 1.0),
        result_entry(TRITON, "skipped", 0.0, message="Skipped: no triton"),
        result_entry(NPU, "skipped", 0.0, message="Skipped: needs a real NPU device"),
    ])
    upstream = _report(_env("upstream", "3.7.1"), [
        result_entry(IMPORT, "passed", 0.1),
        result_entry(WRAP, "failed", 1.0, violation=violation, message="AssertionError: npu_lazy: ..."),
        result_entry(TRITON, "xfailed", 0.5, message="xfail: stock torch loads triton"),
        result_entry(NPU, "error", 0.0, message="pytest_npu_lazy.errors.ProbeUsageError: boom\nmore lines"),
    ])
    paths = {}
    for name, data in (("none", none), ("upstream", upstream)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(data))
    return paths


def test_text_table(reports, capsys):
    assert matrix.main([str(reports["none"]), str(reports["upstream"])]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"[1] torch 2.13.0+cpu / torch_npu 2.13.0 / no triton / CANN stub  ({reports['none']})"
    assert out[1] == f"[2] torch 2.13.0+cpu / torch_npu 2.13.0 / triton 3.7.1 / CANN stub  ({reports['upstream']})"
    rows = {line.split()[0]: line.split(None, 1)[1] for line in out[3:]}
    assert rows[IMPORT].split() == ["pass", "pass"]
    assert rows[WRAP].split(None, 1) == ["pass", "FAIL: wrap: loaded torch_npu._inductor <- torch_npu.utils._dynamo"]
    assert rows[TRITON].split() == ["skip", "xfail"]
    assert rows[NPU].split(None, 1) == ["skip", "ERROR: ProbeUsageError: boom"]  # first line, class unqualified
    assert rows["total"].split("  ")[0] == "2 pass, 2 skip"


def test_markdown_and_html(reports, tmp_path):
    out = tmp_path / "m.md"
    assert matrix.main([str(reports["none"]), str(reports["upstream"]), "--markdown", "-o", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert lines[0] == ("| guarantee (test) | torch 2.13.0+cpu / torch_npu 2.13.0 / no triton / CANN stub "
                        "| torch 2.13.0+cpu / torch_npu 2.13.0 / triton 3.7.1 / CANN stub |")
    assert lines[1] == "| --- | --- | --- |"
    assert f"| `{WRAP}` | pass | FAIL: wrap: loaded torch_npu._inductor &lt;- torch_npu.utils._dynamo |" in lines
    html_out = tmp_path / "m.html"
    assert matrix.main([str(reports["none"]), str(reports["upstream"]), "--html", "-o", str(html_out)]) == 0
    page = html_out.read_text()
    assert page.count("<tr>") == 1 + 4 + 1  # header, one per test, totals
    assert '<td class="fail">FAIL: wrap: loaded torch_npu._inductor &lt;- torch_npu.utils._dynamo</td>' in page


def test_a_test_missing_from_one_environment_is_marked_not_run(reports, tmp_path, capsys):
    data = json.loads(reports["upstream"].read_text())
    data["tests"] = data["tests"][:2]
    reports["upstream"].write_text(json.dumps(data))
    matrix.main([str(reports["none"]), str(reports["upstream"])])
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[3:]}
    assert rows[TRITON] == ["skip", matrix.NOT_RUN]


def _error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exc:
        matrix.main(list(argv))
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_bad_inputs_get_a_clear_error(reports, tmp_path, capsys):
    none = str(reports["none"])
    assert f"{tmp_path}/gone.json: no such file" in _error(capsys, none, str(tmp_path / "gone.json"))
    (tmp_path / "junk.json").write_text("{not json")
    assert "junk.json: not JSON" in _error(capsys, str(tmp_path / "junk.json"))
    (tmp_path / "other.json").write_text(json.dumps({"schema": "pytest-npu-lazy-baseline", "schema_version": 1}))
    err = _error(capsys, str(tmp_path / "other.json"))
    assert "not a pytest-npu-lazy JSON report (schema is 'pytest-npu-lazy-baseline'" in err
    future = json.loads(reports["none"].read_text()) | {"schema_version": SCHEMA_VERSION + 1}
    (tmp_path / "future.json").write_text(json.dumps(future))
    assert "is newer than this pytest-npu-lazy reads" in _error(capsys, str(tmp_path / "future.json"))
    broken = json.loads(reports["none"].read_text())
    broken["tests"][0]["outcome"] = "fine"
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    assert "has outcome 'fine'; expected one of passed, failed" in _error(capsys, str(tmp_path / "broken.json"))
    assert _error(capsys, none, str(reports["upstream"]), "--markdown", "--html")  # one format only


def test_mismatched_inputs_are_refused(reports, tmp_path, capsys):
    none = str(reports["none"])
    err = _error(capsys, none, none)
    assert "report the same environment (torch 2.13.0+cpu / torch_npu 2.13.0 / no triton / CANN stub)" in err
    other = _report(_env("triton-ascend", "3.2.0"), [result_entry("elsewhere/test_x.py::test_y", "passed", 0.1)])
    (tmp_path / "other_suite.json").write_text(json.dumps(other))
    err = _error(capsys, none, str(tmp_path / "other_suite.json"))
    assert "share no test: they are reports of different suites" in err
    empty = _report(_env("triton-ascend", "3.2.0"), [])
    (tmp_path / "empty.json").write_text(json.dumps(empty))
    assert "empty.json: has no test" in _error(capsys, none, str(tmp_path / "empty.json"))


def test_runs_as_a_module(reports):
    done = subprocess.run([sys.executable, "-m", "pytest_npu_lazy.reports.matrix", str(reports["none"]), str(reports["upstream"]),
                           "--markdown"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("| guarantee (test) |")
    bad = subprocess.run([sys.executable, "-m", "pytest_npu_lazy.reports.matrix", "nowhere.json"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "nowhere.json: no such file" in bad.stderr
