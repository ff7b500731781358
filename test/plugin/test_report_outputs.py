"""The reports of a run: JSON (schema, atomic, merged under xdist), JUnit properties, the terminal summary."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET

import pytest

from pytest_npu_lazy.probe.summary import DEFAULT_WATCH
from pytest_npu_lazy.reports.schema import SCHEMA, SCHEMA_VERSION, load_report

SUITE = """
import pytest

pytestmark = pytest.mark.npu_lazy(preload=[])

def test_import_ok(npu_lazy):
    with npu_lazy.phase("import"):
        import heavy.core
    npu_lazy.assert_loaded("heavy")

def test_import_violates(npu_lazy):
    with npu_lazy.phase("import"):
        import heavy.core
    npu_lazy.assert_not_loaded("heavy.helpers")

def test_expected_missing(npu_lazy):
    npu_lazy.assert_loaded("heavy")

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass

@pytest.mark.xfail(reason="known")
def test_xfailed():
    assert False

@pytest.fixture
def broken():
    raise RuntimeError("no setup")

def test_setup_error(broken):
    pass
"""

#: the line of test_import_ok's `import heavy.core`, where the import chains start
IMPORT_LINE = SUITE.lstrip("\n").splitlines().index("        import heavy.core") + 1

PLAIN = """
def test_not_isolated():
    pass
"""

INI = """
[pytest]
npu_lazy_watch =
    heavy.helpers
    heavy
"""

EXPECTED_OUTCOMES = {
    "test_suite.py::test_import_ok": "passed",
    "test_suite.py::test_import_violates": "failed",
    "test_suite.py::test_expected_missing": "failed",
    "test_suite.py::test_skipped": "skipped",
    "test_suite.py::test_xfailed": "xfailed",
    "test_suite.py::test_setup_error": "error",
    "test_plain.py::test_not_isolated": "passed",
}


@pytest.fixture
def suite(pytester, fake_heavy_package):
    pytester.makepyfile(test_suite=SUITE, test_plain=PLAIN)
    pytester.makeini(INI)
    return pytester


def _tests(report: dict) -> dict[str, dict]:
    return {t["nodeid"]: t for t in report["tests"]}


def _modules(chain: list[str]) -> list[str]:
    """The module names of an import chain, without the code locations some links carry."""
    return [link.split(" (", 1)[0] for link in chain]


def _phase(test: dict, name: str) -> dict:
    (phase,) = [p for p in test["phases"] if p["name"] == name]
    return phase


def test_json_report_follows_the_schema(suite, run_pytest):
    run = run_pytest("--npu-lazy-json=out/report.json", "--junitxml=out/junit.xml")
    assert run.result.ret == pytest.ExitCode.TESTS_FAILED, run.text()
    report = load_report(suite.path / "out" / "report.json")  # validates schema, version and outcomes
    assert report["schema"] == SCHEMA and report["schema_version"] == SCHEMA_VERSION
    env = report["environment"]
    assert set(env) >= {"torch", "torch_npu", "cann_mode", "cann_version", "triton_flavour", "triton", "python", "platform"}
    assert env["triton_flavour"] in ("triton-ascend", "upstream", "absent")
    assert report["run"]["watch"] == ["heavy.helpers", "heavy"]
    assert report["run"]["exitstatus"] == 1
    tests = _tests(report)
    assert {n: t["outcome"] for n, t in tests.items()} == EXPECTED_OUTCOMES

    ok = tests["test_suite.py::test_import_ok"]
    assert ok["isolation"] == "fork" and ok["preload"] == [] and ok["violation"] is None
    names = [p["name"] for p in ok["phases"]]
    assert names == ["collect", "setup", "test", "import", "teardown"]
    assert all(p["duration"] >= 0 and p["start"] >= 0 for p in ok["phases"])
    imported = _phase(ok, "import")
    assert imported["parent"] == "test"
    assert imported["module_count"] == 3  # heavy, heavy.core, heavy.helpers
    assert "modules" not in imported  # only with --npu-lazy-json-modules
    watched = {w["pattern"]: w for w in imported["watched"]}
    assert watched["heavy"]["module"] == "heavy" and watched["heavy"]["count"] == 3
    helpers = watched["heavy.helpers"]
    assert helpers["count"] == 1
    assert _modules(helpers["chain"]) == ["heavy.helpers", "heavy.core", "test_suite"]
    assert helpers["chain"][-1] == f"test_suite (test_suite.py:{IMPORT_LINE} in test_import_ok)"
    assert helpers["trigger"].startswith("heavy") and "core.py:1" in helpers["trigger"]
    assert _phase(ok, "collect")["watched"] == []  # the test module, nothing watched

    bad = tests["test_suite.py::test_import_violates"]
    assert bad["violation"] == {"kind": "loaded", "module": "heavy.helpers", "phase": "import",
                                "chain": bad["violation"]["chain"]}
    assert _modules(bad["violation"]["chain"]) == ["heavy.helpers", "heavy.core", "test_suite"]
    assert "must not be loaded yet" in bad["message"]
    missing = tests["test_suite.py::test_expected_missing"]
    assert missing["violation"]["kind"] == "missing" and missing["violation"]["module"] == "heavy"
    assert tests["test_suite.py::test_skipped"]["message"] == "Skipped: not here"
    assert tests["test_suite.py::test_xfailed"]["message"] == "xfail: known"
    assert "RuntimeError: no setup" in tests["test_suite.py::test_setup_error"]["message"]
    plain = tests["test_plain.py::test_not_isolated"]
    assert plain["isolation"] is None and plain["phases"] == []
    assert sorted(p.name for p in (suite.path / "out").iterdir()) == ["junit.xml", "report.json"]  # no temp file left


def test_json_modules_option_adds_the_waterfall_data(suite, run_pytest):
    run = run_pytest("--npu-lazy-json=r.json", "--npu-lazy-json-modules", "-k", "import_ok")
    assert run.result.ret == 0, run.text()
    test = _tests(load_report(suite.path / "r.json"))["test_suite.py::test_import_ok"]
    modules = {m["name"]: m for m in _phase(test, "import")["modules"]}
    assert set(modules) == {"heavy", "heavy.core", "heavy.helpers"}
    assert modules["heavy.helpers"]["parent"] == "heavy.core"
    phase = _phase(test, "import")
    for module in modules.values():
        assert phase["start"] <= module["start"] <= phase["start"] + phase["duration"]
        assert 0 <= module["duration"] <= phase["duration"]


@pytest.mark.needs("xdist")
def test_xdist_writes_one_merged_report(suite, run_pytest):
    run = run_pytest("-n", "2", "--npu-lazy-json=out/merged.json")
    assert run.result.ret == pytest.ExitCode.TESTS_FAILED, run.text()
    report = load_report(suite.path / "out" / "merged.json")
    tests = _tests(report)
    assert {n: t["outcome"] for n, t in tests.items()} == EXPECTED_OUTCOMES
    assert len(report["tests"]) == len(EXPECTED_OUTCOMES)  # each test once
    assert {t["worker"] for t in report["tests"]} == {"gw0", "gw1"}
    assert report["run"]["xdist_workers"] == 2
    assert _phase(tests["test_suite.py::test_import_ok"], "import")["module_count"] == 3
    assert [p.name for p in (suite.path / "out").iterdir()] == ["merged.json"]  # workers wrote nothing


def test_junit_xml_carries_the_key_facts(suite, run_pytest):
    run = run_pytest("--junitxml=junit.xml")
    assert run.result.ret == pytest.ExitCode.TESTS_FAILED, run.text()
    root = ET.parse(suite.path / "junit.xml").getroot()
    suite_props = {p.get("name"): p.get("value") for p in root.find("testsuite").find("properties")}
    assert suite_props["npu_lazy.torch_npu"] and suite_props["npu_lazy.triton_flavour"]
    assert "npu_lazy.cann_mode" in suite_props
    hidden = json.loads(suite_props["npu_lazy.hidden_warnings"])  # as the JSON report has it, not a Python repr
    assert isinstance(hidden, list) and all("message" in w for w in hidden)
    home = os.path.expanduser("~")
    assert not [v for v in suite_props.values() if v and (home in v or str(suite.path) in v)], suite_props
    cases = {c.get("name"): c for c in root.iter("testcase")}

    def props(name):
        node = cases[name].find("properties")
        return {} if node is None else {p.get("name"): p.get("value") for p in node}

    ok = props("test_import_ok")
    assert ok["npu_lazy.isolation"] == "fork"
    assert ok["npu_lazy.first_loaded.heavy"] == "import"
    assert _modules(ok["npu_lazy.chain.heavy.helpers"].split(" <- ")) == ["heavy.helpers", "heavy.core", "test_suite"]
    assert "import " in ok["npu_lazy.phases"] and "(3 modules)" in ok["npu_lazy.phases"]
    assert "npu_lazy.violation" not in ok
    bad = props("test_import_violates")
    assert bad["npu_lazy.violation"].startswith("heavy.helpers (loaded) in phase import: heavy.helpers <- heavy.core")
    assert bad["npu_lazy.violation"].endswith("test_suite (test_suite.py:12 in test_import_violates)")
    assert props("test_expected_missing")["npu_lazy.first_loaded.heavy"] == "not loaded"
    assert props("test_not_isolated") == {}


@pytest.mark.needs("xdist")
def test_junit_properties_under_xdist(suite, run_pytest):
    run_pytest("-n", "2", "--junitxml=junit.xml", "-k", "import_ok")
    root = ET.parse(suite.path / "junit.xml").getroot()
    (case,) = list(root.iter("testcase"))
    names = [p.get("name") for p in case.find("properties")]
    assert names.count("npu_lazy.first_loaded.heavy") == 1  # added once, by the controller


def test_terminal_summary(suite, run_pytest):
    text = run_pytest().result.stdout.str()
    section = text.split("npu_lazy: phases and watched modules", 1)[1]
    assert "FAILED test_suite.py::test_import_violates  (fork," in section
    assert "<< VIOLATION: heavy.helpers must not be loaded" in section
    assert "<< VIOLATION: heavy was not loaded" in section
    assert "ERROR test_suite.py::test_setup_error  (fork," in section
    assert "test_import_ok" not in section  # passed: shown with -v or --npu-lazy-summary=all
    assert "test_not_isolated" not in section  # not isolated: nothing to say

    every = run_pytest("--npu-lazy-summary=all").result.stdout.str().split("npu_lazy: phases and watched modules", 1)[1]
    assert "PASSED test_suite.py::test_import_ok  (fork," in every
    assert re.search(r"\| import \d+\.\d{3}s \+3 \[heavy\.helpers \(1\), heavy \(3\)\] \| teardown",
                     " ".join(every.split()))  # the phases, wrapped between them to the terminal's width
    assert "test_not_isolated" not in every

    verbose = run_pytest("-v").result.stdout.str().split("npu_lazy: phases and watched modules", 1)[1]
    passed = verbose.split("PASSED test_suite.py::test_import_ok", 1)[1].split("\n", 1)[1]
    passed = passed.split("\n", 2)[:2]  # -v: a passing test in a line or two, no chains
    assert "<-" not in " ".join(passed) and "import" in " ".join(passed), verbose
    flat = " ".join(verbose.split())  # a failing test's chains, wider than the terminal, wrapped between links
    assert "<< VIOLATION: heavy.helpers must not be loaded" in flat and " <- " in flat
    very = run_pytest("-vv").result.stdout.str().split("npu_lazy: phases and watched modules", 1)[1]
    flat = " ".join(very.split())  # -vv: every test's chains
    assert re.search(rf"heavy\.helpers <- heavy\.core.* <- test_suite \(test_suite\.py:{IMPORT_LINE} in "
                     r"test_import_ok\)", flat)
    assert "3 modules" in very

    quiet = run_pytest("-q").result.stdout.str().split("npu_lazy: phases and watched modules", 1)[1]
    assert "test_import_violates" in quiet and "test_import_ok" not in quiet  # -q: only what broke


def test_default_watch_list(pytester, run_pytest, fake_heavy_package):
    pytester.makepyfile(test_one="""
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_one():
            import heavy
    """)
    run = run_pytest("--npu-lazy-json=r.json")
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["run"]["watch"] == list(DEFAULT_WATCH)
    assert run.reports[-1]["npu_lazy"]["watch"] == list(DEFAULT_WATCH)
    assert all(p["watched"] == [] for p in report["tests"][0]["phases"])


def test_unwritable_report_path_fails_the_run_clearly(suite, run_pytest):
    (suite.path / "blocker").write_text("a file, not a directory")
    run = run_pytest("--npu-lazy-json=blocker/r.json", "-k", "import_ok")
    assert run.result.ret == pytest.ExitCode.USAGE_ERROR
    assert "npu_lazy: cannot write the JSON report to blocker/r.json" in run.text()


def test_collect_phase_excludes_the_wait_for_the_previous_test(pytester, run_pytest):
    """The next test's child collects while this one runs; its collect phase is the collecting, and the wait
    for its turn is in no phase and no part of its time line (JSON and HTML)."""
    pytester.makepyfile(test_pair="""
        import time
        import pytest

        pytestmark = pytest.mark.npu_lazy(preload=[])

        def test_1_slow():
            time.sleep(2)

        def test_2_collected_meanwhile():
            pass
    """)
    run = run_pytest("--npu-lazy-json=report.json", "--npu-lazy-html=report.html")
    assert run.result.ret == pytest.ExitCode.OK, run.text()
    tests = _tests(load_report(pytester.path / "report.json"))
    second = tests["test_pair.py::test_2_collected_meanwhile"]
    collect, setup = _phase(second, "collect"), _phase(second, "setup")
    assert collect["duration"] < 1.0, second["phases"]
    assert abs(setup["start"] - (collect["start"] + collect["duration"])) < 0.1, second["phases"]  # no gap
    assert max(p["start"] + p["duration"] for p in second["phases"]) < 1.0, second["phases"]
    html = (pytester.path / "report.html").read_text()
    shown = re.search(r'test_2_collected_meanwhile <span class="num">\(([\d.]+) (ms|s) in the fork child\)', html)
    assert shown is not None and (shown[2] == "ms" or float(shown[1]) < 1.0), shown and shown[0]


def test_json_report_names_no_absolute_directory_of_this_machine(suite, run_pytest):
    """Reports get committed and shared: paths in them are relative to the rootdir, and the CANN stub's
    directory relative to its cache root, even when the command line names absolute paths."""
    out = suite.path / "out" / "report.json"
    run = run_pytest(f"--npu-lazy-json={out}", "-k", "import_ok")
    assert run.result.ret == pytest.ExitCode.OK, run.text()
    text = out.read_text()
    report = json.loads(text)
    assert str(suite.path) not in text, text
    assert report["run"]["rootdir"] == "."
    assert "--npu-lazy-json=out/report.json" in report["run"]["args"]
    cann = report["environment"]["cann"]
    if report["environment"]["cann_mode"] in ("stub", "emulate"):
        assert "; cann-" in cann or "; emulated-" in cann, cann
        assert "/" not in cann.rsplit(";", 1)[-1], cann


LOOKALIKES = """
import pytest

pytestmark = pytest.mark.npu_lazy(preload=[])

def test_text_only():
    raise AssertionError("npu_lazy: 'heavy' must not be loaded yet, but it was loaded during phase 'import'\\n"
                         "  import chain: heavy <- test_lookalikes")

def test_caught_then_failed(npu_lazy):
    import heavy
    with pytest.raises(AssertionError):
        npu_lazy.assert_not_loaded("heavy")
    assert 1 == 2
"""


@pytest.mark.parametrize("isolate", ["marked", "off"])
def test_violation_is_the_probes_data_not_the_failure_text(pytester, fake_heavy_package, run_pytest, isolate):
    """A failure that only reads like a violation has none; one the test caught is not its failure.

    In-process and from an isolated child alike, the violation travels as
    data on the failing report; nothing parses the text back.
    """
    pytester.makepyfile(test_lookalikes=LOOKALIKES, test_suite=SUITE)
    # in one process, a module one test imported is loaded for the next: in-process, one import each
    chosen = [] if isolate == "marked" else ["-k", "test_text_only or test_import_violates"]
    run = run_pytest(f"--npu-lazy-isolate={isolate}", "--npu-lazy-json=out/report.json", *chosen)
    tests = _tests(load_report(pytester.path / "out" / "report.json"))
    assert tests["test_lookalikes.py::test_text_only"]["outcome"] == "failed", run.text()
    assert tests["test_lookalikes.py::test_text_only"]["violation"] is None
    bad = tests["test_suite.py::test_import_violates"]["violation"]
    assert (bad["kind"], bad["module"], bad["phase"]) == ("loaded", "heavy.helpers", "import"), run.text()
    assert _modules(bad["chain"])[:2] == ["heavy.helpers", "heavy.core"]
    if isolate == "marked":
        assert tests["test_lookalikes.py::test_caught_then_failed"]["outcome"] == "failed"
        assert tests["test_lookalikes.py::test_caught_then_failed"]["violation"] is None
        assert tests["test_suite.py::test_expected_missing"]["violation"]["kind"] == "missing"


@pytest.mark.parametrize("option", [None, "--npu-lazy-json-modules", "-vv"])
def test_module_lists_go_home_only_where_a_report_reads_them(suite, run_pytest, option):
    """A child's summary counts every phase's modules; it lists them only for the reports that use them."""
    run = run_pytest(*([option] if option else []), "--npu-lazy-json=out/report.json", "-k", "test_import_ok")
    summary = run.report("test_import_ok", "teardown")["npu_lazy"]
    imported = next(p for p in summary["phases"] if p["name"] == "import")
    assert imported["module_count"] == 3
    names = sorted(m["name"] for m in imported["modules"])
    assert names == ([] if option is None else ["heavy", "heavy.core", "heavy.helpers"]), summary


KILLED = """
import os, signal, pytest

pytestmark = pytest.mark.npu_lazy(preload=[])

def test_killed():
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.needs("xdist")
@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["in-order", "xdist"])
def test_a_crash_message_is_the_crash_not_the_worker_line(pytester, run_pytest, workers):
    """A report without a crash entry (a child killed) is described by its own text: under xdist pytest's text of
    the report starts with the worker's line ("[gw0] linux -- Python ..."), which says nothing of the failure."""
    pytester.makepyfile(test_killed=KILLED)
    run = run_pytest(*workers, "--npu-lazy-json=out.json")
    assert run.result.ret == pytest.ExitCode.TESTS_FAILED, run.text()
    (test,) = load_report(pytester.path / "out.json")["tests"]
    first = test["message"].splitlines()[0]
    assert "SIGKILL" in first and not first.startswith("[gw"), test["message"][:500]
