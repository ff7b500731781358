"""The import budget gate: save a baseline, pass within it, fail (ERROR at teardown, exit 1) beyond it."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET

import pytest
from packaging.version import Version

from pytest_npu_lazy.probe.summary import Summary
from pytest_npu_lazy.reports import budget
from pytest_npu_lazy.settings import parse_growth


def _summary(phases: dict[str, list[tuple[str, str | None]]], watched: dict[str, list[dict]] | None = None) -> Summary:
    """A ProbeState.summary() by hand: phase -> [(module, importer)]."""
    watched = watched or {}
    return Summary.from_dict({"watch": ["heavy.helpers"], "phases": [
        {"name": name, "parent": None, "start": 0.0, "duration": 0.1, "module_count": len(mods),
         "modules": [{"name": m, "parent": p, "start": 0.0, "duration": 0.0, "untracked": False} for m, p in mods],
         "watched": watched.get(name, [])}
        for name, mods in phases.items()]})


BASE = _summary({"import": [("heavy", None), ("heavy.core", "heavy")] + [(f"dep{i}", None) for i in range(18)],
                 "wrap": []})


def test_parse_growth():
    assert parse_growth("5%") == pytest.approx(0.05)
    assert parse_growth("12.5") == pytest.approx(0.125)
    assert parse_growth("0") == 0
    with pytest.raises(ValueError, match="expected a percentage"):
        parse_growth("five")
    with pytest.raises(ValueError, match="must not be negative"):
        parse_growth("-1%")


def test_same_imports_are_within_budget():
    entry = budget.baseline_entry(BASE)
    assert entry["phases"]["import"]["count"] == 20
    assert entry["phases"]["import"]["modules"][:2] == ["dep0", "dep1"]  # sorted
    assert budget.check(entry, BASE, ["heavy.helpers"], 0.05) == []


def test_growth_within_the_threshold_passes_and_beyond_it_fails():
    entry = budget.baseline_entry(BASE)
    one_more = _summary({"import": [("heavy", None), ("heavy.core", "heavy")]
                                   + [(f"dep{i}", None) for i in range(19)], "wrap": []})  # 21 = +5%
    assert budget.check(entry, one_more, ["heavy.helpers"], 0.05) == []
    two_more = _summary({"import": [("heavy", None), ("heavy.core", "heavy"), ("extra", "heavy.core"),
                                    ("extra.sub", "extra")] + [(f"dep{i}", None) for i in range(18)],
                         "wrap": []})  # 22 = +10%
    (problem,) = budget.check(entry, two_more, ["heavy.helpers"], 0.05)
    assert problem["kind"] == "growth" and problem["phase"] == "import"
    assert (problem["count"], problem["baseline"], problem["new_count"]) == (22, 20, 2)
    assert problem["growth"] == pytest.approx(0.10)
    assert problem["new"][0] == {"module": "extra", "chain": ["extra", "heavy.core", "heavy"]}
    assert problem["new_modules"] == ["extra", "extra.sub"]
    assert budget.check(entry, two_more, ["heavy.helpers"], 0.10) == []  # a looser threshold
    text = budget.describe([problem], "base.json", 0.05)
    assert "phase 'import' loads 22 modules, baseline 20 (+10.0%, budget +5%); 2 new:" in text
    assert "extra <- heavy.core <- heavy" in text


def test_a_new_watched_module_fails_whatever_the_count():
    entry = budget.baseline_entry(BASE)
    chain = ["heavy.helpers", "heavy.core", "test_x (test_x.py:3 in test)"]
    now = _summary({"import": [("heavy", None), ("heavy.core", "heavy")] + [(f"dep{i}", None) for i in range(17)],
                    "wrap": [("heavy.helpers", None)]},
                   watched={"wrap": [{"pattern": "heavy.helpers", "module": "heavy.helpers", "count": 1,
                                      "chain": chain, "trigger": "heavy/core.py:1 in <module>"}]})
    problems = budget.check(entry, now, ["heavy.helpers"], 0.05)
    assert problems[0] == {"phase": "wrap", "kind": "watched", "pattern": "heavy.helpers",
                           "module": "heavy.helpers", "count": 1, "chain": chain}
    assert problems[1]["kind"] == "growth" and problems[1]["baseline"] == 0  # a phase that loaded nothing
    assert budget.short(problems) == "wrap: new watched heavy.helpers; wrap: 1 modules (baseline 0)"


def test_unknown_phases_and_tests_are_not_judged():
    entry = budget.baseline_entry(_summary({"import": [("heavy", None)]}))
    now = _summary({"import": [("heavy", None)], "other": [(f"m{i}", None) for i in range(50)]})
    assert budget.check(entry, now, ["heavy.helpers"], 0.05) == []


TEST_MODULE = """
import os
import pytest

@pytest.mark.npu_lazy(preload=[])
def test_imports(npu_lazy):
    with npu_lazy.phase("import"):
        import heavy.core
        if os.environ.get("MORE"):
            import heavy.lazy

@pytest.mark.npu_lazy(preload=[])
def test_steady(npu_lazy):
    with npu_lazy.phase("import"):
        import heavy
"""


@pytest.fixture
def gated(pytester, fake_heavy_package):
    pytester.makepyfile(test_gate=TEST_MODULE)
    pytester.makeini("[pytest]\nnpu_lazy_watch = heavy.lazy\n")
    return pytester


def test_gate_passes_then_fails_naming_the_test(gated, run_pytest, monkeypatch):
    saved = run_pytest("--npu-lazy-save-baseline=budget.json")
    assert saved.result.ret == 0, saved.text()
    data = json.loads((gated.path / "budget.json").read_text())
    assert data["schema"] == "pytest-npu-lazy-baseline" and data["watch"] == ["heavy.lazy"]
    phases = data["tests"]["test_gate.py::test_imports"]["phases"]
    assert phases["import"] == {"count": 3, "modules": ["heavy", "heavy.core", "heavy.helpers"]}

    same = run_pytest("--npu-lazy-baseline=budget.json")
    assert same.result.ret == 0, same.text()
    assert "2 isolated test(s) within the budget of budget.json (growth allowed: 5%)" in same.text()

    monkeypatch.setenv("MORE", "1")
    over = run_pytest("--npu-lazy-baseline=budget.json", "--junitxml=junit.xml")
    assert over.result.ret == pytest.ExitCode.TESTS_FAILED, over.text()
    assert over.outcomes == {"test_gate.py::test_imports": "error", "test_gate.py::test_steady": "passed"}
    failure = over.report("test_imports", "teardown")["longrepr"]
    assert "npu_lazy import budget exceeded (baseline budget.json)" in failure
    assert "phase 'import' loads watched 'heavy.lazy' (1 module(s)), which it did not load in the baseline" in failure
    assert "heavy.lazy <- test_gate (test_gate.py:9 in test_imports)" in failure
    assert ("phase 'import' loads 4 modules, baseline 3 (+33.3%, budget +5%); 1 new:\n"
            "    heavy.lazy <- test_gate (test_gate.py:9 in test_imports)") in failure
    text = over.text()
    assert "ERROR at teardown of test_imports" in text
    assert "OVER BUDGET test_gate.py::test_imports: import: new watched heavy.lazy; import: 4 modules (baseline 3)" in text
    section = " ".join(text.split("npu_lazy: phases and watched modules", 1)[1].split("npu_lazy import budget")[0].split())
    assert "ERROR test_gate.py::test_imports" in section and "test_steady" not in section  # within: not listed
    assert "budget: OVER: import: new watched heavy.lazy; import: 4 modules (baseline 3)" in section
    if Version(pytest.__version__) >= Version("9"):  # pytest 8 writes no message after an error's node id there
        assert "ERROR test_gate.py::test_imports - npu_lazy import budget exceeded" in text
    case = next(c for c in ET.parse(gated.path / "junit.xml").getroot().iter("testcase") if c.get("name") == "test_imports")
    assert case.find("error") is not None
    props = {p.get("name"): p.get("value") for p in case.find("properties")}
    assert props["npu_lazy.budget"] == "import: new watched heavy.lazy; import: 4 modules (baseline 3)"

    looser = run_pytest("--npu-lazy-baseline=budget.json", "-o", "npu_lazy_watch=heavy.core",
                        "-o", "npu_lazy_budget_growth=40%")
    assert looser.result.ret == 0, looser.text()  # 4 of 3 is within +40%, heavy.lazy not watched


@pytest.mark.needs("xdist")
def test_gate_under_xdist(gated, run_pytest, monkeypatch):
    assert run_pytest("--npu-lazy-save-baseline=budget.json").result.ret == 0
    monkeypatch.setenv("MORE", "1")
    over = run_pytest("-n", "2", "--npu-lazy-baseline=budget.json", "--npu-lazy-json=r.json")
    assert over.result.ret == pytest.ExitCode.TESTS_FAILED, over.text()
    assert over.outcomes["test_gate.py::test_imports"] == "error"
    tests = {t["nodeid"]: t for t in json.loads((gated.path / "r.json").read_text())["tests"]}
    assert [p["kind"] for p in tests["test_gate.py::test_imports"]["budget"]] == ["watched", "growth"]
    assert tests["test_gate.py::test_steady"]["budget"] is None


def test_missing_or_bad_baseline_is_a_usage_error(gated, run_pytest):
    missing = run_pytest("--npu-lazy-baseline=nowhere.json")
    assert missing.result.ret == pytest.ExitCode.USAGE_ERROR
    assert "nowhere.json: no such file; create it with pytest --npu-lazy-save-baseline=PATH" in missing.text()
    (gated.path / "bad.json").write_text('{"schema": "something-else"}')
    bad = run_pytest("--npu-lazy-baseline=bad.json")
    assert bad.result.ret == pytest.ExitCode.USAGE_ERROR
    assert "not a pytest-npu-lazy import baseline" in bad.text()
    growth = run_pytest("-o", "npu_lazy_budget_growth=lots")
    assert growth.result.ret == pytest.ExitCode.USAGE_ERROR
    assert "npu_lazy_budget_growth = 'lots': expected a percentage such as 5%" in growth.text()



COMPILES = """
import collections, os, sys, types
import pytest

@pytest.mark.npu_lazy(preload=[])
def test_compiles(npu_lazy):
    with npu_lazy.phase("wrap"):
        # torch's cache counters, where the plugin reads them; without torch, for speed
        utils = sys.modules["torch._dynamo.utils"] = types.ModuleType("torch._dynamo.utils")
        utils.counters = collections.defaultdict(collections.Counter)
    with npu_lazy.phase("first_call"):
        # what a first compiled call does: look the graph up in the cache; a miss compiles
        # through more modules (torch 2.13: 218 instead of 141)
        cold = os.environ["INDUCTOR_CACHE"] == "cold"
        utils.counters["inductor"]["fxgraph_cache_miss" if cold else "fxgraph_cache_hit"] += 1
        import kernel_0, kernel_1
        if cold:
            import kernel_2, kernel_3, kernel_4
        if os.environ.get("REGRESSION"):
            import kernel_5, kernel_6
"""


def test_cold_and_warm_inductor_cache_give_the_same_verdict(run_pytest, pytester, monkeypatch):
    """A cold cache loads more modules; judged against a warm baseline that would flip the gate."""
    pytester.makepyfile(test_compiles=COMPILES, **{f"kernel_{i}": "" for i in range(7)})
    monkeypatch.setenv("INDUCTOR_CACHE", "warm")
    saved = run_pytest("--npu-lazy-save-baseline=warm.json")
    assert saved.outcomes == {"test_compiles.py::test_compiles": "passed"}, saved.text()
    assert json.loads((pytester.path / "warm.json").read_text())["tests"]["test_compiles.py::test_compiles"][
        "inductor_cache"] == "warm"
    monkeypatch.setenv("INDUCTOR_CACHE", "cold")
    cold = run_pytest("--npu-lazy-baseline=warm.json", "--npu-lazy-json=cold.json")
    assert cold.outcomes == {"test_compiles.py::test_compiles": "passed"}, cold.text()
    assert "1 isolated test(s) not judged, not comparable with the baseline: Inductor cache cold now, " \
           "warm in the baseline" in cold.text()
    listed = " ".join(cold.text().split("npu_lazy: phases and watched modules", 1)[1].split())
    assert "PASSED test_compiles.py::test_compiles" in listed  # passed, but not judged: listed with the reason
    assert "budget: not judged: Inductor cache cold now, warm in the baseline" in listed
    (entry,) = json.loads((pytester.path / "cold.json").read_text())["tests"]
    assert entry["inductor_cache"] == "cold"
    assert entry["budget_not_judged"] == "Inductor cache cold now, warm in the baseline"
    # like with like is still gated: a cold baseline, then a cold run that loads more
    run_pytest("--npu-lazy-save-baseline=cold.json")
    monkeypatch.setenv("REGRESSION", "1")
    regressed = run_pytest("--npu-lazy-baseline=cold.json")
    assert regressed.outcomes == {"test_compiles.py::test_compiles": "error"}, regressed.text()
    assert "phase 'first_call' loads 7 modules, baseline 5" in regressed.report("test_compiles", "teardown")["longrepr"]


def test_the_cache_counters_read_are_torchs():
    """The counter names come from torch's source: a rename there must fail here, not silently read zeros."""
    from importlib.util import find_spec
    from pathlib import Path

    from pytest_npu_lazy.probe.inductor_cache import _COUNTERS

    spec = find_spec("torch")
    if spec is None:
        pytest.skip("needs torch, which is not installed")
    root = Path(spec.origin).parent
    source = (root / "_inductor" / "codecache.py").read_text() + (
        root / "_functorch" / "_aot_autograd" / "autograd_cache.py").read_text()
    for group, hit, miss in _COUNTERS:
        for name in (group, hit, miss):
            assert f'"{name}"' in source, name


def test_a_baseline_without_the_cache_state_judges_only_tests_that_compiled_nothing():
    entry = budget.baseline_entry(BASE)
    del entry["inductor_cache"]
    assert budget.not_comparable(entry, BASE) is None
    reason = budget.not_comparable(entry, dataclasses.replace(BASE, inductor_cache="warm"))
    assert "not recorded in the baseline" in reason and "--npu-lazy-save-baseline" in reason
