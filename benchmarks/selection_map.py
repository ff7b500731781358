"""What taking a selection map costs per test: the same tests with and without ``--npu-lazy-take-map``.

Two suites, each run twice in one benchmark run, one after the other, timed per test by
benchmarks/timing.py: test files of test/dynamo (isolated children that import torch_npu and
compile; the map follows torch_npu) and trivial in-process tests that each call a function of a
small watched package. The cost is the difference of the median marginal per-test times, and of
the wall times over the tests; the map's size is reported too.
"""

from __future__ import annotations

import sys
from pathlib import Path

RESULT = "selection_map"
#: stated, not judged: the issue asks for the cost, and sets no target
TARGETS: dict = {}
REPO = Path(__file__).resolve().parents[1]
DYNAMO_FILES = ["test/dynamo/test_wrapper.py", "test/dynamo/test_inductor_setup.py", "test/dynamo/test_import.py"]
#: quick: two cheap isolated tests that import torch_npu
DYNAMO_QUICK = [f"test/dynamo/test_import.py::{name}" for name in (
    "test_import_torch_npu_defers_compiler_stack", "test_dynamo_post_import_trigger_is_installed")]


def trivial_suite(folder: Path, tests: int) -> Path:
    (folder / "watched").mkdir(parents=True)
    (folder / "watched" / "__init__.py").write_text("def work(n):\n    return sum(range(n))\n")
    (folder / "pytest.ini").write_text("[pytest]\nnpu_lazy_map_packages = watched\n")
    body = "import watched\n\n" + "".join(f"def test_{i}():\n    assert watched.work({i}) >= 0\n\n" for i in range(tests))
    (folder / "test_trivial.py").write_text(body)
    return folder


def bench(args, env: dict, work: Path, run_pytest, per_test, log) -> dict:
    quick = args.quick
    suites = [("dynamo", f"{'two tests of test_import.py' if quick else ', '.join(DYNAMO_FILES)} (isolated, "
                         "torch_npu followed)",
               REPO, DYNAMO_QUICK if quick else DYNAMO_FILES, dict(env)),
              ("trivial", f"{5 if quick else 200} in-process tests calling a watched function",
               trivial_suite(work / "map-trivial", 5 if quick else 200), ["."],
               dict(env, PYTHONPATH=f"{work / 'map-trivial'}:{env.get('PYTHONPATH', '')}"))]
    rows = {}
    for key, description, folder, paths, run_env in suites:
        row: dict = {"description": description, "columns": {}}
        map_path = work / f"{key}-map.json"
        for column, extra in (("plain", []), ("map", ["--npu-lazy-take-map", f"--npu-lazy-map={map_path}"])):
            log(f"selection_map/{key}/{column}")
            run = run_pytest(["-p", "npu_lazy", *extra, *paths], cwd=folder, env=run_env)
            entry = per_test([run])
            row["columns"][column] = entry
            log(f"selection_map/{key}/{column}: median {entry.get('marginal', {}).get('median_ms')} ms, "
                f"wall {entry.get('wall_s')} s, {entry.get('outcomes')}")
        plain, taken = row["columns"]["plain"], row["columns"]["map"]
        if "marginal" in plain and "marginal" in taken:
            row["extra_median_ms"] = round(taken["marginal"]["median_ms"] - plain["marginal"]["median_ms"], 1)
            row["extra_wall_per_test_ms"] = round((taken["wall_s"] - plain["wall_s"]) * 1000 / max(1, taken["tests"]), 1)
            row["ratio_wall"] = round(taken["wall_s"] / plain["wall_s"], 2) if plain["wall_s"] else None
        if map_path.exists():
            row["map_kib"] = round(map_path.stat().st_size / 1024, 1)
        rows[key] = row
    return {"rows": rows, "python": sys.version.split()[0],
            "method": "median interval between consecutive pytest_runtest_logstart moments (benchmarks/timing.py), "
                      "without and with --npu-lazy-take-map, one run each, one after the other"}


def figures(result: dict) -> dict:
    return {}


def markdown(result: dict) -> list[str]:
    out = ["### Taking a selection map: cost per test", "",
           "| suite | median ms per test, plain | with the map | extra ms per test (median) | extra ms per test "
           "(wall / tests) | wall ratio | map size |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"].values():
        plain = row["columns"]["plain"].get("marginal", {}).get("median_ms")
        taken = row["columns"]["map"].get("marginal", {}).get("median_ms")
        out.append(f"| {row['description']} | {plain} | {taken} | {row.get('extra_median_ms')} | "
                   f"{row.get('extra_wall_per_test_ms')} | {row.get('ratio_wall')}x | {row.get('map_kib')} KiB |")
    out.append("")
    return out
