"""Coverage per test, taken once: which tests run each target function, so a mutant runs only those.

The coverage pass runs the suite once, serially, with every target function
instrumented (:func:`operators.instrument`). A hit belongs to the test whose
window holds it. Hits outside every window, or made in a process where no
test is current, come from what the run does for many tests: collection,
and the zygotes' preload (a test marked
``preload=["torch", "torch_npu"]`` imports torch_npu once, in its zygote,
for all tests like it). A function with such a hit runs for tests no window
names, so a mutant there runs every test of the suite, the ones whose
windows hit it first.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .operators import MODULE_LEVEL

OUTSIDE_TESTS = "<outside tests>"


@dataclass
class CoverageMap:
    """function -> the tests that ran it, in suite order; plus the functions also run outside any test."""

    key: str  #: what the map was taken from (sources, tests, configuration): a changed key retakes it
    tests: list[str]  #: every test of the suite, in the order it ran
    by_function: dict[str, list[str]]
    outside_tests: list[str]  #: functions with hits outside every test window
    seconds: float
    durations: dict[str, float]  #: each test's window, unmutated: a mutant's run is bounded by its tests' sum

    def tests_for(self, module: str, function: str) -> list[str]:
        """The tests to run for a mutant of ``function``: the covering ones first, then (if it also runs
        outside tests, at import) every other test."""
        name = f"{module}:{function}"
        covering = list(self.by_function.get(name, []))
        if name in self.outside_tests or function == MODULE_LEVEL:
            covering += [t for t in self.tests if t not in set(covering)]
        return covering

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "CoverageMap":
        return cls(**data)

    def expected_seconds(self, tests: list[str]) -> float:
        return sum(self.durations.get(t, 0.0) for t in tests)


def attribute(windows: list[dict], hits: list[tuple[float, bool, str]]) -> tuple[dict[str, list[str]], set[str]]:
    """Place each hit made in a test in the test whose window holds it; the rest are outside tests."""
    windows = sorted(windows, key=lambda w: w["start"])
    starts = [w["start"] for w in windows]
    order = {w["nodeid"]: i for i, w in enumerate(windows)}
    by_function: dict[str, set[str]] = {}
    outside: set[str] = set()
    for stamp, in_test, function in hits:
        index = bisect.bisect_right(starts, stamp) - 1
        if in_test and index >= 0 and stamp <= windows[index]["end"]:
            by_function.setdefault(function, set()).add(windows[index]["nodeid"])
        else:
            outside.add(function)
    return {f: sorted(tests, key=order.__getitem__) for f, tests in by_function.items()}, outside


def map_key(sources: dict[str, str], test_files: list[Path], targets: str, args: list[str]) -> str:
    """What coverage depends on: the sources, the test files, the targets, the suite's arguments (not the timeouts)."""
    digest = hashlib.sha256()
    for module in sorted(sources):
        digest.update(module.encode() + b"\0" + sources[module].encode())
    for path in sorted(test_files):
        digest.update(str(path).encode() + b"\0" + path.read_bytes())
    digest.update(targets.encode())
    digest.update(json.dumps(args).encode())
    return digest.hexdigest()[:16]
