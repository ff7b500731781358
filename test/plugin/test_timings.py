"""Durations in the reports are the test's own: no spare child's wait, and real ones for dead children."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET


def _end(test: dict) -> float:
    return max(p["start"] + p["duration"] for p in test["phases"])


def test_a_spare_childs_wait_is_not_in_json_or_html(run_pytest, pytester):
    """The second test's child collects while the first sleeps; that wait is not the second test's time."""
    pytester.makepyfile(test_pair="""
        import time
        import pytest

        pytestmark = pytest.mark.npu_lazy(preload=[])

        def test_1_slow():
            time.sleep(1.0)

        def test_2_fast():
            pass
    """)
    run = run_pytest("--npu-lazy-json=report.json", "--npu-lazy-html=report.html")
    assert set(run.outcomes.values()) == {"passed"}, run.text()
    tests = {t["nodeid"].split("::")[1]: t for t in json.loads((pytester.path / "report.json").read_text())["tests"]}
    assert _end(tests["test_1_slow"]) >= 1.0
    assert _end(tests["test_2_fast"]) < 0.5, tests["test_2_fast"]["phases"]
    html = (pytester.path / "report.html").read_text()
    fast = re.search(r'test_2_fast <span class="num">\(([\d.]+) (ms|s) in the fork child\)', html)
    assert fast is not None and (fast[2] == "ms" or float(fast[1]) < 0.5), fast and fast[0]


def test_crashed_and_timed_out_tests_keep_their_durations_and_phases(run_pytest, pytester):
    pytester.makepyfile(test_dead="""
        import os, time
        import pytest

        @pytest.mark.npu_lazy(preload=[])
        def test_crashes(npu_lazy):
            with npu_lazy.phase("work"):
                time.sleep(0.4)
                os.abort()

        @pytest.mark.npu_lazy(preload=[], timeout=1)
        def test_hangs():
            time.sleep(60)
    """)
    run = run_pytest("--npu-lazy-json=report.json", "--junitxml=junit.xml")
    assert run.outcomes == {"test_dead.py::test_crashes": "failed", "test_dead.py::test_hangs": "failed"}, run.text()
    tests = {t["nodeid"].split("::")[1]: t for t in json.loads((pytester.path / "report.json").read_text())["tests"]}
    crashed, hung = tests["test_crashes"], tests["test_hangs"]
    assert 0.4 <= crashed["duration"] < 30, crashed
    assert 1.0 <= hung["duration"] < 30, hung
    assert [p["name"] for p in crashed["phases"]] == ["collect", "setup", "test", "work"]
    assert [p["name"] for p in hung["phases"]] == ["collect", "setup", "test"]
    work = crashed["phases"][-1]
    assert work["unfinished"] and work["parent"] == "test" and work["duration"] >= 0.4
    assert work["module_count"] is None  # died with the child, and not pretended to be 0
    assert not crashed["phases"][1]["unfinished"]
    times = {case.get("name"): float(case.get("time")) for case in ET.parse(pytester.path / "junit.xml").iter("testcase")}
    assert times["test_crashes"] >= 0.4 and times["test_hangs"] >= 1.0, times
    assert "test 1.0" in run.result.stdout.str() and "(died here)" in run.result.stdout.str()
