"""Guarantees by environment: ``python -m pytest_npu_lazy.reports.matrix A.json B.json ... [--markdown | --html]``.

Each input is a JSON report (``--npu-lazy-json``) of a suite run in one
environment (torch, torch_npu, Triton flavour, CANN). Rows are the tests
(the guarantees), columns the environments, cells the outcome; a failure
names the phase and the first link of the import chain that broke the
guarantee. Where the reports hold several suites (test directories, such
as test/dynamo and test/upstream), each gets its own table with only the
environments that ran it. ``--phases GLOB`` adds, for the tests matching
GLOB, what each of their own phases loaded in each environment (module
count and the watched modules). Inputs that cannot be compared are refused
with the reason, exit status 2.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from html import escape

from .schema import ReportError, environment_label, load_report, write_text

SHORT = {"passed": "pass", "failed": "FAIL", "error": "ERROR", "skipped": "skip",
         "xfailed": "xfail", "xpassed": "XPASS"}
NOT_RUN = "-"
_QUALIFIED = re.compile(r"^(?:[A-Za-z_][\w]*\.)+([A-Za-z_]\w*:)")  # pkg.errors.SomeError: -> SomeError:


@dataclass(frozen=True)
class Column:
    path: str
    label: str
    report: dict


def cell(test: dict | None) -> str:
    """An outcome, and for a failure the phase and the first import chain link when the report knows them."""
    if test is None:
        return NOT_RUN
    text = SHORT.get(test["outcome"], test["outcome"])
    violation = test.get("violation")
    if test["outcome"] in ("failed", "error"):
        if violation:
            chain = violation.get("chain") or [violation["module"]]
            names = [link.split(" (", 1)[0] for link in chain]  # the table shows modules, not code locations
            link = f"{names[0]} <- {names[1]}" if len(names) > 1 else names[0]
            verb = {"loaded": "loaded", "device_call": "called"}.get(violation.get("kind"), "not loaded")
            text += f": {violation['phase']}: {verb} {link}"
        elif test.get("budget"):
            problem = test["budget"][0]
            text += f": {problem['phase']}: over import budget"
        elif test.get("message"):
            first = _QUALIFIED.sub(r"\1", test["message"].strip().splitlines()[0])
            text += ": " + (first if len(first) <= 90 else first[:87] + "...")
    return text


def load_columns(paths: list[str]) -> list[Column]:
    """Read every input; refuse unreadable ones, two reports of one environment, and reports of unrelated suites."""
    columns = []
    for path in paths:
        report = load_report(path)
        columns.append(Column(path, environment_label(report["environment"]), report))
    seen: dict[str, str] = {}
    for column in columns:
        if column.label in seen:
            raise ReportError(f"{seen[column.label]} and {column.path} report the same environment ({column.label}); "
                              "a matrix needs one report per environment")
        seen[column.label] = column.path
    nodeids = [{t["nodeid"] for t in c.report["tests"]} for c in columns]
    for column, ids in zip(columns, nodeids):
        if not ids:
            raise ReportError(f"{column.path}: has no test; was the suite deselected or did collection fail?")
    for column, ids in zip(columns[1:], nodeids[1:]):
        if not ids & nodeids[0]:
            raise ReportError(f"{columns[0].path} and {column.path} share no test: they are reports of different "
                              "suites (or of different rootdirs), which a matrix cannot compare")
    return columns


def table(columns: list[Column]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per test, in the order of first appearance."""
    order: list[str] = []
    by_column = []
    for column in columns:
        tests = {t["nodeid"]: t for t in column.report["tests"]}
        by_column.append(tests)
        order += [n for n in tests if n not in order]
    header = ["guarantee (test)"] + [c.label for c in columns]
    rows = [[nodeid] + [cell(tests.get(nodeid)) for tests in by_column] for nodeid in order]
    return header, rows


def _totals(columns: list[Column]) -> list[str]:
    totals = []
    for column in columns:
        counts: dict[str, int] = {}
        for test in column.report["tests"]:
            counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
        totals.append(", ".join(f"{n} {SHORT.get(k, k)}" for k, n in counts.items()))
    return totals


def suite_of(nodeid: str) -> str:
    """A test's suite: the directory of its file (``test/upstream``), ``.`` at the rootdir."""
    path = nodeid.split("::", 1)[0]
    return path.rsplit("/", 1)[0] if "/" in path else "."


def suites(columns: list[Column]) -> list[tuple[str, list[int], list[Column]]]:
    """Per suite, in order of first appearance: the indices of the columns that ran it, and those columns
    holding only its tests."""
    order: list[str] = []
    for column in columns:
        order += [s for s in dict.fromkeys(suite_of(t["nodeid"]) for t in column.report["tests"]) if s not in order]
    result = []
    for suite in order:
        indices, parts = [], []
        for index, column in enumerate(columns):
            tests = [t for t in column.report["tests"] if suite_of(t["nodeid"]) == suite]
            if tests:
                indices.append(index)
                parts.append(replace(column, report={**column.report, "tests": tests}))
        result.append((suite, indices, parts))
    return result


def phase_cell(phase: dict | None) -> str:
    """What a phase loaded: its module count and each watched module's."""
    if phase is None:
        return NOT_RUN
    watched = ", ".join(f"{w['pattern']} {w['count']}" for w in phase.get("watched", []))
    return f"+{phase.get('module_count', 0)}" + (f": {watched}" if watched else "")


def phase_table(columns: list[Column], patterns: list[str]) -> tuple[list[str], list[list[str]]]:
    """Rows ``nodeid · phase`` for the tests matching ``patterns``, over their own phases (not the runner's:
    collect, setup, test, teardown), cells from :func:`phase_cell`; only columns where such a phase ran."""
    order: list[tuple[str, str]] = []
    chosen, by_column = [], []
    for column in columns:
        phases = {}
        for test in column.report["tests"]:
            if _matches(test["nodeid"], patterns):
                for phase in test.get("phases") or []:
                    if phase.get("parent") is not None:
                        phases[(test["nodeid"], phase["name"])] = phase
        if phases:  # a column whose matching tests recorded no phase of their own has nothing to show
            chosen.append(column)
            by_column.append(phases)
            order += [key for key in phases if key not in order]
    header = ["test · phase"] + [c.label for c in chosen]
    rows = [[f"{nodeid} · {name}"] + [phase_cell(p.get((nodeid, name))) for p in by_column] for nodeid, name in order]
    return header, rows


def _matches(nodeid: str, patterns: list[str]) -> bool:
    return any(fnmatchcase(nodeid, pattern) for pattern in patterns)


def _text_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    return ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in [header] + rows]


def render_text(columns: list[Column], phases: Sequence[str] = ()) -> str:
    lines = [f"[{i + 1}] {c.label}  ({c.path})" for i, c in enumerate(columns)]
    sections = suites(columns)
    for suite, indices, parts in sections:
        header, rows = table(parts)
        lines += [""] + ([f"== {suite}"] if len(sections) > 1 else [])
        lines += _text_table([header[0]] + [f"[{i + 1}]" for i in indices], rows + [["total"] + _totals(parts)])
    if phases:
        header, rows = phase_table(columns, list(phases))
        labels = {c.label: i for i, c in enumerate(columns)}
        lines += ["", "== modules by phase"]
        lines += _text_table([header[0]] + [f"[{labels[h] + 1}]" for h in header[1:]], rows)
    return "\n".join(lines) + "\n"


def _md(value: str) -> str:
    return value.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md(h) for h in header) + " |", "|" + " --- |" * len(header)]
    return lines + ["| " + " | ".join(_md(v) if i else f"`{_md(v)}`" for i, v in enumerate(row)) + " |"
                    for row in rows]


def render_markdown(columns: list[Column], phases: Sequence[str] = ()) -> str:
    sections = suites(columns)
    lines: list[str] = []
    for suite, _indices, parts in sections:
        header, rows = table(parts)
        if len(sections) > 1:
            lines += [f"## {_md(suite)}", ""]
        lines += _md_table(header, rows)
        lines += ["| total | " + " | ".join(_md(t) for t in _totals(parts)) + " |", ""]
    if phases:
        header, rows = phase_table(columns, list(phases))
        lines += ["## Modules by phase" if len(sections) > 1 else "Modules by phase:", "",
                  "Each of a test's own phases: `+N` modules first loaded there, then the watched ones among them.",
                  ""] + _md_table(header, rows) + [""]
    lines += ["Reports:", ""]
    for column in columns:
        env = column.report["environment"]
        lines.append(f"- {_md(column.label)}: `{_md(os.path.basename(column.path))}`, Python {env.get('python')}, "
                     f"{env.get('platform')}, device {_md(str(env.get('device')))}, "
                     f"created {column.report.get('created')}")
    return "\n".join(lines) + "\n"


def render_html(columns: list[Column]) -> str:
    header, rows = table(columns)

    def css(value: str) -> str:
        return value.split(":")[0].lower().replace(NOT_RUN, "notrun")

    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr><td><code>" + escape(row[0]) + "</code></td>"
                   + "".join(f'<td class="{css(v)}">{escape(v)}</td>' for v in row[1:]) + "</tr>" for row in rows)
    totals = "<tr><td>total</td>" + "".join(f"<td>{escape(t)}</td>" for t in _totals(columns)) + "</tr>"
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>pytest-npu-lazy matrix</title>"
            "<style>body{font:14px system-ui,sans-serif;margin:1.5em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;text-align:left}"
            ".pass{background:#dafbe1}.fail,.error,.xpass{background:#ffebe9}.xfail,.skip{background:#fff8c5}"
            ".notrun{color:#999}</style></head><body><h1>Guarantees by environment</h1>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}{totals}</tbody></table></body></html>\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_npu_lazy.reports.matrix",
        description="A table of guarantees (tests) by environment from JSON reports written with --npu-lazy-json.")
    parser.add_argument("reports", nargs="+", metavar="REPORT.json", help="one JSON report per environment")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--markdown", action="store_true", help="write a Markdown table")
    form.add_argument("--html", action="store_true", help="write an HTML page")
    parser.add_argument("--phases", action="append", default=[], metavar="GLOB",
                        help="also show what each phase of the tests matching GLOB (a node id glob, such as "
                             "'test/upstream/*') loaded; text and Markdown; repeatable")
    parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of standard output")
    args = parser.parse_args(argv)
    try:
        columns = load_columns(args.reports)
    except ReportError as exc:
        parser.error(str(exc))
    if args.html:
        text = render_html(columns)
    else:
        text = (render_markdown if args.markdown else render_text)(columns, args.phases)
    if args.output:
        write_text(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
