"""The coverage pass: the suite once, unmutated and serial, with every target function instrumented.

Kept apart from the pass that runs the mutants (:mod:`.session`): it answers which tests run each function, so a
mutant runs only those, and it is the baseline: a suite that fails without a mutant would "catch" every one, so
nothing is judged then and the failures are named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from .config import Config
from .hook import Plan
from .runs import run_suite
from .selection import CoverageMap, attribute, map_key

CACHE_DIR = ".npu-lazy-mutate"


class BaselineFailed(Exception):
    """The suite fails without any mutant; the message names the tests."""


def take_coverage(config: Config, tests: list[str], sources: dict[str, str], retake: bool,
                  progress: Callable[[str], None]) -> CoverageMap:
    """Which tests run each target function, and how long each takes unmutated; read from the cache when the
    sources, the test files, the targets and the options are those it was taken with (``retake``: never)."""
    test_files = sorted(p for t in tests for p in _python_files(config.root / t.split("::")[0]))
    key = map_key(sources, test_files, json.dumps(config.targets, sort_keys=True), config.pytest_args + tests)
    cache = config.root / CACHE_DIR / f"coverage-{key}.json"
    if cache.exists() and not retake:
        progress(f"coverage: reusing {cache.relative_to(config.root)} (sources and tests unchanged)")
        return CoverageMap.from_dict(json.loads(cache.read_text()))
    progress(f"coverage: running {' '.join(tests)} once, serially, with every target function instrumented ...")
    run = run_suite(config, Plan("trace", config.targets), tests, ["-p", "no:xdist"],
                    wall=max(config.mutant_timeout, 3600))
    if run.returncode not in (0,) or run.failures:
        failed = sorted({f["nodeid"] for f in run.failures})
        raise BaselineFailed(
            f"the suite does not pass without a mutant (pytest exit {run.returncode}; failed: "
            f"{', '.join(failed) or 'none reported'}), so no mutant could be judged. Fix the suite or deselect "
            f"those tests (config [run] tests / pytest_args). Last output:\n{run.output_tail}")
    if run.unplaced:  # their probes never fire in code that compiles their source again (Triton): say so
        progress(f"coverage: the probed text of {', '.join(run.unplaced)} did not fit its lines; code that reads "
                 "source (Triton's interpreter) ran the original there, so its mutants may be called unreached")
    spans: dict[str, dict] = {}  # a test may log start and finish more than once (isolated: relayed)
    for window in run.windows:
        span = spans.setdefault(window["nodeid"], dict(window))
        span["start"], span["end"] = min(span["start"], window["start"]), max(span["end"], window["end"])
    windows = sorted(spans.values(), key=lambda w: w["start"])
    by_function, outside = attribute(windows, run.hits)
    tests = [w["nodeid"] for w in windows]
    durations = {w["nodeid"]: round(w["end"] - w["start"], 3) for w in windows}
    coverage = CoverageMap(key, tests, by_function, sorted(outside), round(run.seconds, 1), durations)
    cache.parent.mkdir(exist_ok=True)
    (cache.parent / ".gitignore").write_text("*\n")
    cache.write_text(json.dumps(coverage.to_dict(), indent=1))
    progress(f"coverage: {len(tests)} tests in {run.seconds:.0f} s; {len(by_function)} target functions "
             f"run inside tests, {len(outside)} also outside them (at import, in zygotes)")
    return coverage


def _python_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return [p for p in path.rglob("*.py") if "__pycache__" not in p.parts]
