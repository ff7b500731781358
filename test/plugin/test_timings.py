"""Crashed and timed-out tests keep real durations and the phases they reached (the wait of a spare child
is no test's time: test_report_outputs.py)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET


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
    # the 1 s limit covers the whole isolated test, so its test phase is the limit less collect and setup
    assert 0.9 <= hung["duration"] < 30, hung
    assert [p["name"] for p in crashed["phases"]] == ["collect", "setup", "test", "work"]
    assert [p["name"] for p in hung["phases"]] == ["collect", "setup", "test"]
    work = crashed["phases"][-1]
    assert work["unfinished"] and work["parent"] == "test" and work["duration"] >= 0.4
    assert work["module_count"] is None  # died with the child, and not pretended to be 0
    assert not crashed["phases"][1]["unfinished"]
    times = {case.get("name"): float(case.get("time")) for case in ET.parse(pytester.path / "junit.xml").iter("testcase")}
    assert times["test_crashes"] >= 0.4 and times["test_hangs"] >= 0.9, times
    # the hung test's phase ran until the limit, less the collect and setup before it (0.99 s happens)
    died = [float(seconds) for seconds in re.findall(r"test (\d+\.\d+)s \(died here\)", run.result.stdout.str())]
    assert len(died) == 2 and max(died) >= 0.9, run.result.stdout.str()  # the crash's, then the hang's
