"""torch_npu's own guarantee file against its port in test/dynamo: ``python -m benchmarks.port FILE``.

FILE is torch_npu's test/dynamo/test_compile_trigger.py (Ascend/pytorch; not
shipped here). Both sides run in one invocation, one after the other, on the
same machine, each as one sequential pytest run (``-n 0``) with the plugin on
(their file needs its CANN host stub to import torch_npu): their file unchanged,
then every test of ours that test/dynamo/ported.py maps to one of theirs. The
table gives, per test of theirs, both outcomes and both times (from benchmarks/timing.py, as every benchmark here).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.common import REPO, RESULTS, base_env, log, run_pytest

DYNAMO = REPO / "test" / "dynamo"


def load_map() -> dict[str, tuple[str, ...]]:
    sys.path.insert(0, str(DYNAMO))
    try:
        from ported import PORTED
    finally:
        sys.path.remove(str(DYNAMO))
    return PORTED


def function_results(run: dict) -> dict[str, dict]:
    """``file.py::function`` -> {"outcome", "seconds", "cases"} from the timing plugin's record of a run;
    parametrized cases and subtests fold into one.

    A function is "failed" when any report of it failed or errored, "skipped" when every case skipped,
    else "passed" (with how many cases skipped). Seconds add up each case's log start to log finish.
    """
    timing = run["timing"] or {}
    functions: dict[str, dict] = {}
    for nodeid, started, finished in timing.get("tests", []):
        entry = functions.setdefault(_function_key(nodeid), {"seconds": 0.0, "cases": 0, "outcomes": []})
        entry["seconds"] += (finished or started) - started
        entry["cases"] += 1
    for nodeid, reports in timing.get("per_test", {}).items():
        entry = functions.setdefault(_function_key(nodeid), {"seconds": 0.0, "cases": 1, "outcomes": []})
        entry["outcomes"] += [outcome for _when, _label, outcome in reports]
    for entry in functions.values():
        outcomes = entry.pop("outcomes")
        if any(o in ("failed", "error") for o in outcomes):
            entry["outcome"] = "failed"
        elif outcomes and all(o in ("skipped", "xfailed") for o in outcomes):
            entry["outcome"] = "skipped"
        else:
            skipped = sum(o in ("skipped", "xfailed") for o in outcomes)
            entry["outcome"] = f"passed ({skipped} skipped)" if skipped else "passed"
    return functions


def _function_key(nodeid: str) -> str:
    path, _, name = nodeid.split("[", 1)[0].rpartition("::")
    return f"{path.rsplit('/', 1)[-1].split('::')[0]}::{name}"


def their_outcome(cases: dict[str, dict], test: str) -> dict | None:
    return next((entry for key, entry in cases.items() if key.endswith("::" + test) or key == test), None)


def compare(theirs_file: Path, *, workers: str = "0") -> dict:
    ported = load_map()
    env = base_env()
    with tempfile.TemporaryDirectory(prefix="compile-trigger-") as work_dir:
        work = Path(work_dir)
        shutil.copy(theirs_file, work / "test_compile_trigger.py")
        log(f"their file ({theirs_file.name}), -n {workers}")
        theirs_run = run_pytest(["-p", "npu_lazy", "-n", workers, "test_compile_trigger.py"], cwd=work, env=env)
        theirs = function_results(theirs_run)
        present = [test for test in ported if their_outcome(theirs, test) is not None]
        ours_ids = sorted({f"test/dynamo/{node}" for test in present for node in ported[test]})
        log(f"our port: {len(ours_ids)} test functions for {len(present)} of their tests, -n {workers}")
        ours_run = run_pytest(["-p", "npu_lazy", "-n", workers, *ours_ids], cwd=REPO, env=env)
        ours = function_results(ours_run)
    rows = []
    for test in present:
        mine = [ours.get(node, {"outcome": "missing", "seconds": 0.0, "cases": 0}) | {"test": node}
                for node in ported[test]]
        rows.append({"theirs": test, "their": their_outcome(theirs, test), "ours": mine})
    unmapped = sorted(key.split("::")[-1] for key in theirs if their_outcome(theirs, key.split("::")[-1])
                      and key.split("::")[-1] not in ported)
    return {"theirs_file": theirs_file.name, "workers": workers, "rows": rows, "unmapped": unmapped,
            "theirs_wall_s": round(theirs_run["wall_s"], 1), "ours_wall_s": round(ours_run["wall_s"], 1),
            "speedup": round(theirs_run["wall_s"] / ours_run["wall_s"], 2) if ours_run["wall_s"] else None,
            "theirs_tail": theirs_run["output_tail"][-600:], "ours_tail": ours_run["output_tail"][-600:]}


def markdown(result: dict) -> str:
    lines = [f"Their file: {result['theirs_wall_s']} s; our port: {result['ours_wall_s']} s; "
             f"**{result['speedup']}x** (pytest `-n {result['workers']}` both, same run).", "",
             "| their test | their outcome | s | our tests (cases) | our outcomes | s |",
             "| --- | --- | ---: | --- | --- | ---: |"]
    for row in result["rows"]:
        ours = row["ours"]
        lines.append(
            f"| {row['theirs']} | {row['their']['outcome']} | {row['their']['seconds']:.1f} | "
            + "<br>".join(f"{o['test'].split('::')[-1]} ({o['cases']})" for o in ours) + " | "
            + "<br>".join(o["outcome"] for o in ours) + f" | {sum(o['seconds'] for o in ours):.1f} |")
    if result["unmapped"]:
        lines += ["", "Not mapped: " + ", ".join(result["unmapped"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.port", description=__doc__.splitlines()[0])
    parser.add_argument("theirs", type=Path, help="torch_npu's test/dynamo/test_compile_trigger.py")
    parser.add_argument("-n", dest="workers", default="0", help="pytest-xdist workers for both sides (default 0)")
    parser.add_argument("--json", type=Path, default=RESULTS / "port.json")
    args = parser.parse_args(argv)
    if not args.theirs.is_file():
        parser.error(f"{args.theirs} is not a file: pass the path of torch_npu's test/dynamo/test_compile_trigger.py "
                     "(from a checkout of Ascend/pytorch)")
    result = compare(args.theirs, workers=args.workers)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
