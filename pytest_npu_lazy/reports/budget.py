"""The import budget gate: a phase may not start loading a watched module, nor load many more modules, than before.

A baseline file (``--npu-lazy-save-baseline``) keeps, per test and phase,
the modules first loaded there and their count. A later run
(``--npu-lazy-baseline``) compares each isolated test as its teardown
report arrives, and a test over budget gets a failed teardown report
(``ERROR at teardown``): the run exits non-zero, the terminal, JUnit XML
and xdist name the test, and the text lists the new modules with their
import chains. Tests and phases the baseline does not know are not judged,
nor tests whose Inductor cache was cold where the baseline's was warm (or
the other way round): like is compared with like (:mod:`.inductor_cache`).
"""

from __future__ import annotations

from typing import Iterable

from ..probe import inductor_cache
from ..probe.recorder import importers, matches
from ..probe.summary import Summary
from .schema import BASELINE_SCHEMA, BASELINE_SCHEMA_VERSION

#: New modules listed per phase in a failure; the JSON report has them all.
MAX_LISTED = 12


def baseline_entry(summary: Summary) -> dict:
    """A test's phases as the baseline keeps them: module count and sorted names, and the Inductor cache state."""
    return {"inductor_cache": summary.inductor_cache, "phases": {
        phase["name"]: {"count": phase.get("module_count", len(phase["modules"])),
                        "modules": sorted(m["name"] for m in phase["modules"])}
        for phase in summary.phases
    }}


def not_comparable(baseline: dict, summary: Summary) -> str | None:
    """Why this test's run cannot be judged against its baseline entry (cold against warm cache), or None."""
    return inductor_cache.not_comparable(baseline.get("inductor_cache", ...), summary.inductor_cache)


def baseline_document(environment: dict, watch: Iterable[str], summaries: dict[str, Summary]) -> dict:
    return {
        "schema": BASELINE_SCHEMA,
        "schema_version": BASELINE_SCHEMA_VERSION,
        "environment": environment,
        "watch": list(watch),
        "tests": {nodeid: baseline_entry(summary) for nodeid, summary in summaries.items()},
    }


def _loads(summary: Summary) -> dict[str, dict]:
    """Every module this test loaded, across its phases."""
    return {m["name"]: m for phase in summary.phases for m in phase["modules"]}


def chain_of(name: str, loads: dict[str, dict]) -> list[str]:
    """``[name, importer, ..., the code that asked for the first one]``, as far as this test loaded them."""
    chain = importers(name, lambda module: loads.get(module, {}).get("parent"))
    trigger = loads.get(chain[-1], {}).get("trigger")
    return [*chain, trigger] if trigger else chain


def check(baseline: dict, summary: Summary, watch: Iterable[str], growth: float) -> list[dict]:
    """Problems of one test against its baseline entry; empty when within budget.

    ``baseline`` is the test's entry in the baseline file (``{"phases": ...}``).
    """
    watch = list(watch)
    loads = _loads(summary)
    problems: list[dict] = []
    for phase in summary.phases:
        before = baseline.get("phases", {}).get(phase["name"])
        if before is None:
            continue
        names = [m["name"] for m in phase["modules"]]
        known = set(before.get("modules", []))
        watched = {w["pattern"]: w for w in phase.get("watched", [])}
        for pattern in watch:
            hits = [n for n in names if matches(n, pattern)]
            if hits and not any(matches(n, pattern) for n in known):
                entry = watched.get(pattern)
                module = entry["module"] if entry else hits[0]
                problems.append({
                    "phase": phase["name"], "kind": "watched", "pattern": pattern, "module": module,
                    "count": len(hits), "chain": entry["chain"] if entry else chain_of(module, loads)})
        count = phase.get("module_count", len(names))
        allowed = before["count"] * (1 + growth)
        if count > allowed:
            new = [n for n in names if n not in known]
            roots = [n for n in new if loads[n].get("parent") not in new]  # what started each new subtree
            listed = (roots + [n for n in new if n not in roots])[:MAX_LISTED]
            problems.append({
                "phase": phase["name"], "kind": "growth", "count": count, "baseline": before["count"],
                "growth": (count - before["count"]) / before["count"] if before["count"] else None,
                "new_count": len(new), "new_modules": new,
                "new": [{"module": n, "chain": chain_of(n, loads)} for n in listed]})
    return problems


def describe(problems: list[dict], source: str, growth: float) -> str:
    """The failure text of a test over budget."""
    lines = [f"npu_lazy import budget exceeded (baseline {source}):"]
    for problem in problems:
        if problem["kind"] == "watched":
            lines.append(f"  phase {problem['phase']!r} loads watched {problem['pattern']!r} ({problem['count']} "
                         f"module(s)), which it did not load in the baseline")
            lines.append("    " + " <- ".join(problem["chain"]))
        else:
            grew = "from none" if problem["growth"] is None else f"+{problem['growth']:.1%}"
            lines.append(f"  phase {problem['phase']!r} loads {problem['count']} modules, baseline "
                         f"{problem['baseline']} ({grew}, budget +{growth:.0%}); {problem['new_count']} new:")
            lines += ["    " + " <- ".join(item["chain"]) for item in problem["new"]]
            if problem["new_count"] > len(problem["new"]):
                lines.append(f"    ... and {problem['new_count'] - len(problem['new'])} more "
                             "(all of them: new_modules in the JSON report)")
    lines.append("If the change is intended, write a new baseline with --npu-lazy-save-baseline.")
    return "\n".join(lines)


def short(problems: list[dict]) -> str:
    """One line, for JUnit properties and the terminal summary."""
    parts = []
    for problem in problems:
        if problem["kind"] == "watched":
            parts.append(f"{problem['phase']}: new watched {problem['pattern']}")
        else:
            parts.append(f"{problem['phase']}: {problem['count']} modules (baseline {problem['baseline']})")
    return "; ".join(parts)
