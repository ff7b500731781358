"""``python -m pytest_npu_lazy.selection.recall``: the rule checked against the mutation pass's ground truth.

Every mutant the mutation pass caught (docs/mutation.json) is a one-line change of torch_npu that a
known test fails on. For each, the change "this line of this file" goes through the selection rule
with the map of the same suite; the selection must hold the test that caught it. Reported, overall
and per function of torch_npu: recall (goal 100 %) and the fraction of the map's tests selected,
beside two other rules on the same changes: *exact line* (the tests that ran that very line: what a
line-coverage selection without function scopes would pick) and torch_npu's own CI rule, which
picks test files by the changed file's name (:mod:`.filename_rule`), asked whether it picks torch_npu's
deferred-loading guarantee file (``test/dynamo/test_compile_trigger.py``, of which test/dynamo here
is the stricter port).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from . import filename_rule
from .changes import ChangeSet, FileChange
from .map import SelectionMap, installed_versions
from .rule import select

#: torch_npu's deferred-loading guarantee file, which test/dynamo here ports (docs/torch_npu-tests.md)
THEIR_GUARANTEE_FILE = "test/dynamo/test_compile_trigger.py"


def map_path_of(smap: SelectionMap, module: str) -> str | None:
    base = module.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if candidate in smap.files:
            return candidate
    return None


def measure(smap: SelectionMap, record: dict) -> dict:
    versions = installed_versions(tuple(smap.packages))
    their_tests = [f"test/dynamo/{name}" for name in filename_rule.THEIR_TEST_DYNAMO_FILES] + [
        "test/test_utils.py", "test/npu/test_core_example.py"]
    rows = []
    for entry in record["mutants"]:
        if entry["status"] != "caught":
            continue
        mutant = entry["mutant"]
        path = map_path_of(smap, mutant["module"])
        killer = entry["killed_by"].split(" ")[0]
        change = ChangeSet(mutant["id"], "one mutant", (FileChange(path or mutant["module"], "modified",
                                                                   frozenset({mutant["line"]})),), Path("."))
        selection = select(smap, change, versions)
        chosen = set(smap.tests) if selection.everything else set(selection.selected)
        unmeasured = {n for n in chosen if not smap.tests[n].evidence}
        exact = {n for n in smap.tests if path and smap.ran(n, path, mutant["line"], mutant["line"])}
        theirs = filename_rule.files_selected([path or ""], their_tests) if path else {}
        rows.append({"id": mutant["id"], "function": mutant["function"], "file": path, "line": mutant["line"],
                     "killed_by": killer, "in_map": killer in smap.tests, "selected": len(chosen),
                     "selected_without_evidence": len(unmeasured),
                     "caught_selected": killer in chosen, "exact_line": len(exact),
                     "exact_line_caught": killer in exact,
                     "filename_rule": sorted(theirs), "filename_rule_guarantee": THEIR_GUARANTEE_FILE in theirs,
                     "everything": selection.everything})
    always = {"failed": sum(1 for t in smap.tests.values() if t.evidence and t.outcome == "failed"),
              "opaque": sum(1 for t in smap.tests.values() if t.evidence and t.outcome != "failed" and t.opaque),
              "no_evidence": sum(1 for t in smap.tests.values() if not t.evidence)}
    taken = dict(smap.taken, command=[_portable(arg) for arg in smap.taken.get("command", [])])
    return {"map_tests": len(smap.tests), "versions": smap.versions, "map_taken": taken, "rows": rows,
            "always": always}


def _portable(argument: str) -> str:
    """A command-line argument without this machine's directories: ``--npu-lazy-map=/tmp/x/map.json`` ->
    ``--npu-lazy-map=map.json`` (a committed report carries no absolute path)."""
    option, sep, value = argument.rpartition("=")
    value = value if not value.startswith("/") else value.rsplit("/", 1)[-1]
    return f"{option}{sep}{value}"


#: torch_npu's deferred-loading code: the files the mutation pass edits
LAZY_FILES = ("torch_npu/utils/_dynamo.py", "torch_npu/dynamo/__init__.py", "torch_npu/_inductor/__init__.py")


def every_function(smap: SelectionMap) -> dict:
    """For every function of the watched packages: how many tests a change of one line in its body selects
    (those that ran it, the rule's function scope), in the lazy files and outside them."""
    groups: dict[str, list[tuple[str, int]]] = {"lazy": [], "outside": []}
    for path, facts in sorted(smap.files.items()):
        for name, first, last in facts.functions or ():
            count = sum(1 for nodeid in smap.tests if smap.ran(nodeid, path, first, last))
            groups["lazy" if path in LAZY_FILES else "outside"].append((f"{path}:{name}", count))
    unparsed = sum(1 for facts in smap.files.values() if facts.functions is None)
    out: dict = {"files_no_test_loaded": unparsed, "files": len(smap.files)}
    for group, counts in groups.items():
        values = sorted(c for _, c in counts)
        out[group] = {"functions": len(values), "selecting_none": sum(1 for v in values if v == 0),
                      "median": values[len(values) // 2] if values else None, "max": values[-1] if values else None,
                      "most": sorted(counts, key=lambda item: -item[1])[:5]}
    return out


def summary(rows: list[dict], map_tests: int) -> dict:
    def block(part: list[dict]) -> dict:
        n = len(part)
        return {"mutants": n, "recall": sum(r["caught_selected"] for r in part) / n,
                "selected_fraction": sum(r["selected"] for r in part) / n / map_tests,
                "selected_measured_fraction": sum(r["selected"] - r["selected_without_evidence"] for r in part) / n
                / map_tests,
                "exact_line_recall": sum(r["exact_line_caught"] for r in part) / n,
                "exact_line_fraction": sum(r["exact_line"] for r in part) / n / map_tests,
                "filename_rule_recall": sum(r["filename_rule_guarantee"] for r in part) / n}

    by_function = defaultdict(list)
    for row in rows:
        by_function[(row["file"], row["function"])].append(row)
    return {"overall": block(rows),
            "functions": [{"file": f, "function": fn, **block(part)} for (f, fn), part in sorted(by_function.items())]}


def markdown(result: dict, command: str) -> str:
    totals = result["summary"]["overall"]
    missed = [r for r in result["rows"] if not r["caught_selected"]]
    lines = [
        "# Change-driven selection against the mutation record",
        "",
        "Each mutant the mutation pass caught ([mutation.md](mutation.md)) is a one-line change of torch_npu "
        "and a test that fails on it. Here each goes through the selection rule (`--npu-lazy-changed`) with "
        "a map of test/dynamo; the selection must hold the test that caught it.",
        "",
        f"Command: `{command}`. Map: {result['map_tests']} tests, taken by `pytest "
        f"{' '.join(result['map_taken'].get('command', []))}` "
        f"{result['map_taken'].get('date', '?')} with " + ", ".join(f"{k} {v}" for k, v in
                                                                    sorted(result["versions"].items())) + ".",
        "",
        "| rule | recall | tests selected per change (of the map) |",
        "| --- | --- | --- |",
        f"| this plugin's (function scope, module scope at import) | **{totals['recall']:.1%}** of "
        f"{totals['mutants']} | {totals['selected_fraction']:.1%} ({totals['selected_measured_fraction']:.1%} "
        "without the tests the map has no evidence of, which skip here: they need a device) |",
        f"| exact line only (the tests that ran the changed line) | {totals['exact_line_recall']:.1%} | "
        f"{totals['exact_line_fraction']:.1%} |",
        f"| torch_npu's CI, by file name (does it pick `{THEIR_GUARANTEE_FILE}`?) | "
        f"{totals['filename_rule_recall']:.1%} | see below |",
        "",
    ]
    if missed:
        lines += ["Missed (the test that caught it is not selected):", ""]
        lines += [f"- `{r['id']}`: caught by `{r['killed_by']}`" + ("" if r["in_map"] else " (not in the map)")
                  for r in missed] + [""]
    theirs = sorted({f for r in result["rows"] for f in r["filename_rule"]})
    lines += [
        "Beside those that ran the changed code, every change of torch_npu selects the tests the rule cannot rule "
        f"out: here {result['always']['failed']} that xfailed, {result['always']['opaque']} that fork (test_fork_recovery, "
        f"test_device_init) and {result['always']['no_evidence']} without evidence (they need a device and skip "
        "before they run).",
        "",
        f"torch_npu's rule ({filename_rule.SOURCE[0]} `{filename_rule.SOURCE[1]}` at "
        f"{filename_rule.SOURCE[2][:10]}) picks, for these files, only: " + ", ".join(f"`{f}`" for f in theirs) +
        " (`test/npu/...` standing for their core tests): never a deferred-loading test.",
        "",
        "Every function of torch_npu, changed anywhere in its body, in the files some test loaded (in the "
        f"other {result['functions']['files_no_test_loaded']} of the package's {result['functions']['files']} "
        "files a change selects only the tests the map has no evidence of):",
        "",
        "| functions | count | run by no test | tests that ran it (median) | most |",
        "| --- | --- | --- | --- | --- |",
    ]
    for group, label in (("lazy", "in the lazy files (" + ", ".join(f"`{f}`" for f in LAZY_FILES) + ")"),
                         ("outside", "everywhere else in torch_npu, in files some test loaded")):
        block = result["functions"][group]
        most = ", ".join(f"`{name}` ({count})" for name, count in block["most"][:3])
        lines.append(f"| {label} | {block['functions']} | {block['selecting_none']} | {block['median']} | {most} |")
    lines += [
        "",
        "Per function of torch_npu, over the caught mutants:",
        "",
        "| file | function | mutants | recall | selected | exact-line recall | exact-line selected |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["summary"]["functions"]:
        lines.append(f"| {row['file']} | `{row['function']}` | {row['mutants']} | {row['recall']:.0%} | "
                     f"{row['selected_fraction']:.0%} | {row['exact_line_recall']:.0%} | "
                     f"{row['exact_line_fraction']:.0%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_npu_lazy.selection.recall", description=__doc__.split("\n")[0])
    parser.add_argument("--map", required=True, type=Path)
    parser.add_argument("--mutations", default=Path("docs/mutation.json"), type=Path)
    parser.add_argument("--json", type=Path, help="write every mutant's row here")
    parser.add_argument("--markdown", type=Path, help="write the summary here")
    parser.add_argument("--expect-recall", type=float, default=None,
                        help="exit 1 when recall is below this fraction (e.g. 1.0)")
    args = parser.parse_args(argv)
    smap = SelectionMap.read(args.map)
    result = measure(smap, json.loads(args.mutations.read_text()))
    result["summary"] = summary(result["rows"], len(smap.tests))
    result["functions"] = every_function(smap)
    command = "python -m pytest_npu_lazy.selection.recall " + " ".join(argv if argv is not None else sys.argv[1:])
    from ..reports.schema import write_text

    if args.json:
        write_text(args.json, json.dumps({k: v for k, v in result.items()}, indent=1) + "\n")
    if args.markdown:
        write_text(args.markdown, markdown(result, command))
    totals = result["summary"]["overall"]
    print(f"recall {totals['recall']:.1%} over {totals['mutants']} caught mutants; {totals['selected_fraction']:.1%} "
          f"of {len(smap.tests)} tests selected per change (exact line: {totals['exact_line_recall']:.1%}, "
          f"{totals['exact_line_fraction']:.1%}; torch_npu's file-name rule: {totals['filename_rule_recall']:.1%})")
    if args.expect_recall is not None and totals["recall"] < args.expect_recall:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
