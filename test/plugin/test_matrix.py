"""`python -m pytest_npu_lazy.reports.matrix`: guarantees by environment from hand-made reports; bad inputs refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_npu_lazy.reports import matrix
from pytest_npu_lazy.reports.schema import SCHEMA, SCHEMA_VERSION, environment_label, result_entry


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


UP_IMPORT = "test/upstream/test_upstream_import.py::test_import_torch_defers_the_compiler_stack"
UP_TRITON = "test/upstream/test_upstream_triton.py::test_wrapper_creation_does_not_load_triton"
UP_CUDA = "test/upstream/test_upstream_compile.py::test_first_compiled_call_on_cuda_runs_a_triton_kernel"


def _alone(torch: str, device: str) -> dict:
    """The environment of PyTorch alone (test/upstream): no torch_npu, CANN off."""
    return {"torch": torch, "torch_npu": None, "cann_mode": "off", "cann_version": None, "cann": "CANN: off",
            "triton_flavour": "upstream", "triton": "3.6.0", "device": device, "python": "3.12.3",
            "platform": "linux-x86_64"}


def _wrap_phase(triton: int) -> dict:
    watched = [{"pattern": "torch._dynamo", "count": 94}] + ([{"pattern": "triton", "count": triton}] if triton else [])
    return {"name": "wrap", "parent": "test", "duration": 1.0, "module_count": 1450, "watched": watched}


@pytest.fixture
def suites(tmp_path, reports):
    """The torch_npu report of test/dynamo and test/upstream, and PyTorch alone on CPU and on CUDA."""
    npu = json.loads(reports["upstream"].read_text())
    npu["tests"] += [result_entry(UP_IMPORT, "passed", 1.0), result_entry(UP_TRITON, "xfailed", 1.0)]
    cpu = _report(_alone("2.11.0", "cpu (CUDA build, no GPU visible)"), [
        result_entry(UP_IMPORT, "passed", 1.0), result_entry(UP_TRITON, "xfailed", 1.0),
        result_entry(UP_CUDA, "skipped", 0.0, message="Skipped: needs a CUDA device")])
    cuda = _report(_alone("2.11.0", "cuda (1 NVIDIA GPU visible)"), [
        result_entry(UP_IMPORT, "passed", 1.0), result_entry(UP_TRITON, "failed", 1.0, message="[XPASS(strict)] ..."),
        result_entry(UP_CUDA, "passed", 9.0)])
    cpu["tests"][1]["phases"] = [_wrap_phase(70)]
    cuda["tests"][1]["phases"] = [_wrap_phase(0), {"name": "setup", "parent": None, "duration": 0.0,
                                                   "module_count": 3, "watched": []}]
    paths = []
    for name, data in (("npu", npu), ("cpu", cpu), ("cuda", cuda)):
        paths.append(str(tmp_path / f"{name}.json"))
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    return paths


def test_pytorch_alone_is_labelled_by_device():
    assert environment_label(_alone("2.11.0", "cuda (1 NVIDIA GPU visible)")) == "torch 2.11.0 / triton 3.6.0 / cuda"
    assert environment_label(_alone("2.11.0", "cpu (CUDA build, no GPU visible)")) == "torch 2.11.0 / triton 3.6.0 / cpu"
    # with torch_npu the label stays what it was
    assert environment_label(_env("absent", None)) == "torch 2.13.0+cpu / torch_npu 2.13.0 / no triton / CANN stub"


def test_each_suite_gets_its_own_table_with_the_environments_that_ran_it(suites, tmp_path, capsys):
    out = tmp_path / "m.md"
    assert matrix.main([*suites, "--markdown", "-o", str(out)]) == 0
    text = out.read_text()
    dynamo, upstream = text.split("## test/dynamo\n", 1)[1].split("## test/upstream\n", 1)
    assert dynamo.splitlines()[1].count("torch 2.11.0") == 0  # PyTorch alone never ran test/dynamo
    assert f"| `{WRAP}` | FAIL: wrap: loaded torch_npu._inductor &lt;- torch_npu.utils._dynamo |" in dynamo
    header = upstream.splitlines()[1]
    assert header == ("| guarantee (test) | torch 2.13.0+cpu / torch_npu 2.13.0 / triton 3.7.1 / CANN stub "
                      "| torch 2.11.0 / triton 3.6.0 / cpu | torch 2.11.0 / triton 3.6.0 / cuda |")
    assert f"| `{UP_TRITON}` | xfail | xfail | FAIL: [XPASS(strict)] ... |" in upstream
    assert f"| `{UP_CUDA}` | - | skip | pass |" in upstream
    assert "| total | 1 pass, 1 xfail | 1 pass, 1 xfail, 1 skip | 2 pass, 1 FAIL |" in upstream
    assert matrix.main(suites) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "== test/upstream" in lines
    upstream_header = lines[lines.index("== test/upstream") + 1].split()
    assert upstream_header[-3:] == ["[1]", "[2]", "[3]"]
    assert lines[lines.index("== test/dynamo") + 1].split()[-1] == "[1]"


def test_phases_table_shows_what_each_phase_loaded_per_environment(suites, tmp_path, capsys):
    out = tmp_path / "m.md"
    assert matrix.main([*suites, "--markdown", "--phases", "test/upstream/*triton*", "-o", str(out)]) == 0
    text = out.read_text().split("## Modules by phase\n", 1)[1]
    assert "| test · phase | torch 2.11.0 / triton 3.6.0 / cpu | torch 2.11.0 / triton 3.6.0 / cuda |" in text
    assert (f"| `{UP_TRITON} · wrap` | +1450: torch._dynamo 94, triton 70 | +1450: torch._dynamo 94 |") in text
    assert "· setup" not in text  # the runner's phases are not the test's
    assert matrix.main([*suites, "--phases", "nothing/*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == ["== modules by phase", "test · phase"]
