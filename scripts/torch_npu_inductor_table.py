"""docs/torch_npu-inductor-tests.md from a run of torch_npu's own test/_inductor under --npu-lazy-cann=compute.

    scripts/torch_npu_inductor_tests --source PATH/TO/Ascend-pytorch --json run.json --junit run.xml
    python scripts/torch_npu_inductor_table.py run.json run.xml --keep docs/torch_npu-inductor-tests.json \
        > docs/torch_npu-inductor-tests.md
    python scripts/torch_npu_inductor_table.py docs/torch_npu-inductor-tests.json > docs/torch_npu-inductor-tests.md

Every figure is read from the report: outcomes, durations, what computed (the ledger, JSON
``phases[].computed``), the failure messages. The JUnit XML adds the files pytest could not import (a
collection error is no test of the JSON report). ``--keep`` writes the part of the report the page
reads (paths relative, nothing of this machine), so the page can be made again from the repository.

The cause of each non-pass is a diagnosis (``CAUSES``, below): a pattern of test ids, the words the
failure must contain, a kind, and the finding. A cause applies only where the report's message
matches its words; a non-pass no cause matches, or whose message no longer matches, is shown as
UNDIAGNOSED with its message, and counted so.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass

FOLDER = "test/_inductor/"

#: files named after one operator: the name after ``test_`` is an ATen operator (``torch.ops.aten``
#: has it), or one of these three names their authors gave an operator's file (spelled as in the file name)
OPERATOR_SPELLINGS = {"arrange": "arange", "argmax_unalign": "argmax", "nanquantile_defaul": "nanquantile"}

#: kinds of cause, in the order the summary lists them; ``accepted`` says whether the issue's target
#: ("every other non-pass is a named refusal, never a crash or a wrong value") takes it
KINDS = {
    "their skip": ("skipped by their own test (the reason is theirs)", True),
    "refused": ("the emulation refused an operator or runtime call an NPU has and it lacks, naming it", True),
    "interpreter gap": ("refused by name: Triton's interpreter cannot run what the kernel asks", True),
    "device only": ("needs what only a real NPU host has (CANN's compiler, tools, libraries)", True),
    "their repository": ("needs files of their repository beyond test/_inductor that are not supplied", True),
    "release": ("tests Ascend/pytorch master where the installed torch_npu 2.13.0 differs", True),
    "torch_npu": ("torch_npu's or their test's own behaviour: fails the same way on a device", True),
    "emulation": ("WRONG VALUE or crash caused by the emulation", False),
    "plugin": ("crash or wrong value caused by the plugin", False),
    "timeout": ("killed by the per-test timeout", False),
    "undiagnosed": ("UNDIAGNOSED: no cause below matches the report's message", False),
}


@dataclass(frozen=True)
class Cause:
    tests: str  # fnmatch pattern of node ids (relative to their repository's root)
    words: str  # a regular expression the failure's message (or skip reason) must match
    kind: str
    finding: str


#: the diagnosis of every non-pass (docs/torch_npu-inductor-tests.md explains each at length)
CAUSES: list[Cause] = []


def is_operator_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    if not (name.startswith("test_") and name.endswith(".py")):
        return False
    stem = name[len("test_"):-len(".py")]
    if stem in OPERATOR_SPELLINGS:
        return True
    return stem in _aten_names()


_ATEN: frozenset[str] | None = None


def _aten_names() -> frozenset[str]:
    global _ATEN
    if _ATEN is None:
        import os
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
        import torch
        _ATEN = frozenset(name for name in dir(torch.ops.aten) if not name.startswith("__"))
    return _ATEN


def computed(test: dict) -> tuple[list[str], list[str], list[str]]:
    """Triton kernels, host ATen operators and refusals of the test's own phase (the ledger)."""
    kernels, host, refused = [], [], []
    for phase in test.get("phases", []):
        if phase["name"] in ("collect", "teardown"):
            continue
        for row in phase.get("computed", []):
            if row["by"] == "Triton interpreter":
                kernels.append(row["name"])
            elif row["by"] == "host ATen kernel":
                host.append(row["name"])
            else:
                refused.append(f"{row['by']}: {row['name']} {row.get('detail', '')}".strip())
    return list(dict.fromkeys(kernels)), list(dict.fromkeys(host)), list(dict.fromkeys(refused))


def collection_errors(junit_path: str) -> list[dict]:
    """Files pytest could not import, from the JUnit XML (``<error message="collection failure">``)."""
    found = []
    for case in ET.parse(junit_path).getroot().iter("testcase"):
        for child in case:
            if child.tag == "error" and "collection failure" in (child.get("message") or ""):
                path = case.get("classname", "").replace(".", "/")
                text = (child.text or "").strip().splitlines()
                last = next((line for line in reversed(text) if line.startswith("E ")), text[-1] if text else "")
                found.append({"nodeid": f"{path}.py", "outcome": "error (collection)", "duration": 0.0,
                              "message": last[1:].strip(), "phases": []})
    return found


def keep(report: dict, errors: list[dict]) -> dict:
    """The part of the report the page reads."""
    tests = []
    for test in report["tests"]:
        if FOLDER not in test["nodeid"]:
            continue
        tests.append({"nodeid": test["nodeid"], "outcome": test["outcome"], "duration": round(test["duration"], 3),
                      "message": test.get("message"), "worker": test.get("worker"),
                      "phases": [{"name": p["name"], "duration": round(p["duration"], 3),
                                  "computed": p.get("computed", [])} for p in test.get("phases", [])]})
    run = dict(report["run"])
    run["args"] = [a if not a.startswith(("--npu-lazy-json=", "--junitxml=")) else a.split("=")[0] + "=..."
                   for a in run.get("args", [])]
    environment = {k: v for k, v in report["environment"].items() if k not in ("cann",)}
    return {"environment": environment, "run": run, "tests": tests, "collection_errors": errors}


def diagnose(test: dict) -> tuple[str, str]:
    message = test.get("message") or ""
    for cause in CAUSES:
        if fnmatch.fnmatchcase(test["nodeid"], cause.tests):
            if re.search(cause.words, message, re.S):
                return cause.kind, cause.finding
            return "undiagnosed", f"a cause names this test, but its words /{cause.words}/ are not in the message: " \
                                  f"{_first_line(message)}"
    return "undiagnosed", _first_line(message)


def _first_line(text: str) -> str:
    line = next((line for line in text.splitlines() if line.strip()), "")
    return line[:240].replace("|", "\\|")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(kept: dict) -> str:
    tests = kept["tests"] + kept["collection_errors"]
    env, run = kept["environment"], kept["run"]
    lines = [
        "# torch_npu's own Inductor tests on the emulated NPU that computes",
        "",
        "Generated by `scripts/torch_npu_inductor_table.py` from the JSON report of one run (kept as",
        "`docs/torch_npu-inductor-tests.json`); every figure is read from it.",
        "",
        f"torch {env.get('torch')}, torch_npu {env.get('torch_npu')}, {env.get('triton_flavour')} "
        f"{env.get('triton')}, Python {env.get('python')}, {env.get('platform')}; "
        f"run: `pytest {' '.join(run.get('args', []))}` ({run.get('xdist_workers') or 0} xdist workers), "
        f"{run.get('duration', 0) / 60:.0f} min.",
        "",
    ]
    rows = []
    groups: dict[str, Counter] = {"operator": Counter(), "other": Counter()}
    kinds: dict[str, Counter] = {"operator": Counter(), "other": Counter()}
    for test in tests:
        path = test["nodeid"].split("::")[0]
        group = "operator" if is_operator_file(path) else "other"
        outcome = test["outcome"]
        groups[group][outcome] += 1
        groups[group]["files:" + path] += 0
        kernels, host, refused = computed(test)
        if outcome == "passed":
            kind, finding = "", ""
        else:
            kind, finding = diagnose(test)
            kinds[group][kind] += 1
        by = ", ".join(f"`{k}`" for k in kernels) if kernels else ("no Triton kernel" if outcome == "passed" else "")
        rows.append((group, test["nodeid"], outcome, test["duration"], by, kind, finding))
    lines += ["| tests | files | tests | passed | non-passes by kind |", "|---|---:|---:|---:|---|"]
    for group in ("operator", "other"):
        counts = groups[group]
        files = sum(1 for key in counts if key.startswith("files:"))
        total = sum(v for k, v in counts.items() if not k.startswith("files:"))
        listed = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds[group].items(), key=lambda kv: list(KINDS).index(kv[0])))
        lines.append(f"| {group} | {files} | {total} | {counts['passed']} ({100 * counts['passed'] / max(1, total):.1f} %) "
                     f"| {listed or '-'} |")
    lines += ["", "| test | outcome | s | Triton kernels run (interpreted) | kind | cause |", "|---|---|---:|---|---|---|"]
    for group, nodeid, outcome, duration, by, kind, finding in rows:
        name = nodeid[len(FOLDER):] if nodeid.startswith(FOLDER) else nodeid
        lines.append(f"| `{name}` | {outcome} | {duration:.0f} | {by} | {kind} | {_cell(finding)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="the JSON report of the run, or the kept part of one")
    parser.add_argument("junit", nargs="?", help="the JUnit XML of the same run (collection errors)")
    parser.add_argument("--keep", help="write the part of the report the page reads here")
    args = parser.parse_args(argv)
    with open(args.report, encoding="utf-8") as handle:
        report = json.load(handle)
    if "collection_errors" in report:
        kept = report
    else:
        kept = keep(report, collection_errors(args.junit) if args.junit else [])
    if args.keep:
        with open(args.keep, "w", encoding="utf-8") as handle:
            json.dump(kept, handle, indent=1, sort_keys=True)
            handle.write("\n")
    sys.stdout.write(render(kept))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
