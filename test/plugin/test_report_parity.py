"""What an isolated test records and writes reaches the terminal and JUnit XML as in-process."""

from __future__ import annotations

import xml.etree.ElementTree as ET

IN_PROCESS = ("--npu-lazy-isolate=off",)
ISOLATED = ("--npu-lazy-isolate=all", "--npu-lazy-preload=")

INI = """
[pytest]
log_cli = true
log_cli_level = WARNING
junit_family = xunit1
junit_logging = all
"""

RECORDING_TESTS = """
import logging
import pytest

@pytest.fixture
def resource():
    yield "r"

def test_records(record_property, record_xml_attribute, record_testsuite_property, resource, request):
    logging.getLogger("rep").warning("live line from the test")
    record_property("prop", "p-value")
    record_xml_attribute("attr", "a-value")
    record_testsuite_property("suite_prop", "s-value")
    request.node.user_properties.append(("user", "u-value"))
    request.node.add_report_section("call", "custom", "custom section text")
    print("to stdout")

def test_fails_with_sections(request):
    request.node.add_report_section("call", "custom", "failing custom text")
    print("printed before failing")
    assert False
"""

#: What both runs must show, in this order for the live log of the first test.
TERMINAL_LINES = (
    "test_recording.py::test_records",
    "SETUP    F resource",
    "live log call",
    "WARNING  rep:test_recording.py:9 live line from the test",
    "TEARDOWN F resource",
    "Captured custom call",
    "failing custom text",
    "printed before failing",
)


def _xml_view(path) -> dict:
    """The parts of the JUnit XML that tests control, without this plugin's own properties and times."""
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    view = {"suite": sorted((p.get("name"), p.get("value")) for p in suite.iter("property")
                            if p.get("name") == "suite_prop")}
    for case in suite.iter("testcase"):
        view[case.get("name")] = {
            "attrs": {k: v for k, v in case.attrib.items() if k not in ("time",)},
            "properties": [(p.get("name"), p.get("value")) for p in case.iter("property")
                           if not p.get("name").startswith("npu_lazy.")],
            "children": sorted((child.tag, (child.text or "").count("to stdout"),
                                (child.text or "").count("printed before failing"))
                               for child in case if child.tag != "properties"),
        }
    return view


def test_properties_live_logs_setup_show_and_sections_match(run_pytest, pytester):
    pytester.makeini(INI)
    pytester.makepyfile(test_recording=RECORDING_TESTS)
    views, texts = {}, {}
    for mode, args in (("in-process", IN_PROCESS), ("isolated", ISOLATED)):
        xml = pytester.path / f"{mode}.xml"
        run = run_pytest("--setup-show", "-rA", f"--junitxml={xml}", *args)
        assert run.outcomes == {"test_recording.py::test_records": "passed",
                                "test_recording.py::test_fails_with_sections": "failed"}, run.text()
        views[mode], texts[mode] = _xml_view(xml), run.result.stdout.str()
    for mode, text in texts.items():
        positions = [text.find(line) for line in TERMINAL_LINES]
        assert -1 not in positions, f"{mode}: {TERMINAL_LINES[positions.index(-1)]!r} missing from\n{text}"
        assert positions[:5] == sorted(positions[:5]), f"{mode}: live output out of order\n{text}"
    assert views["isolated"] == views["in-process"]
    records = views["isolated"]["test_records"]
    assert records["attrs"]["attr"] == "a-value"
    assert ("prop", "p-value") in records["properties"] and ("user", "u-value") in records["properties"]
    assert views["isolated"]["suite"] == [("suite_prop", "s-value")]
