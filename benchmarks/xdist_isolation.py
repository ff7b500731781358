"""Part 8 (``--only xdist_isolation``): every test isolated under pytest-xdist, against in-process and pytest-forked.

Two suites, as issue 49 measured them: *trivial* (``def test_i(): pass``) and *torch* (a conftest importing
torch, each test ``assert torch.ones(2).sum() == 2``, ours with ``--npu-lazy-preload=torch``,
``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` for all three). Each runs in-process (the plugin off), under
pytest-forked and isolated by this plugin (``--npu-lazy-isolate=all``), serially and at each worker count.
The runs of one row interleave (in-process, forked, ours, in-process, ...) and each figure is the best of
the repeats, so load that comes and goes hits the three alike. The floor under the serial overhead, a
fork + ``_exit`` + ``waitpid`` of a process of the zygote's size (pytest, the plugin and the preload), is
measured in the same run (:mod:`benchmarks.fork_floor`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks import fork_floor
from benchmarks.common import DEFAULT_FORKED_VENV, forked_python, log, run_pytest, run_summary

RESULT = "xdist_isolation"
TARGETS = {
    "trivial_ours_over_inprocess_xdist": ("<=", 1.1), "torch_ours_over_inprocess_xdist": ("<=", 1.1),
    "trivial_ours_over_forked_xdist": ("<=", 1.0), "torch_ours_over_forked_xdist": ("<=", 1.0),
    "trivial_serial_overhead_over_floor": ("<=", 2.0), "torch_serial_overhead_over_floor": ("<=", 2.0),
}

#: suite name -> (preload of ours, conftest text, the test body)
SUITES = {
    "trivial": ("", None, "pass"),
    "torch": ("torch", "import torch  # noqa: F401\n", "assert torch.ones(2).sum() == 2"),
}
RUNNERS = {  # name -> pytest arguments (ours gets its preload added)
    "inprocess": ["-p", "no:npu_lazy"],
    "forked": ["-p", "no:npu_lazy", "--forked"],
    "ours": ["-p", "npu_lazy", "--npu-lazy-isolate=all"],
}


def write_suite(folder: Path, suite: str, tests: int, modules: int) -> None:
    _, conftest, body = SUITES[suite]
    folder.mkdir(parents=True)
    (folder / "pytest.ini").write_text("[pytest]\n")
    if conftest:
        (folder / "conftest.py").write_text(conftest)
    per_module = max(1, tests // modules)
    for module in range(modules):
        lines = ["import torch", ""] if conftest else []
        for index in range(module * per_module, min((module + 1) * per_module, tests)):
            lines += [f"def test_{index:05d}():", f"    {body}", ""]
        (folder / f"test_m{module:03d}.py").write_text("\n".join(lines) + "\n")


def forked_runner(args, env: dict[str, str]) -> tuple[str | None, str | None]:
    """A Python whose pytest runs pytest-forked (before pytest 9.2): this one if it can, else the side venv."""
    check = ("import pytest, pytest_forked, sys; from packaging.version import Version; "
             "sys.exit(Version(pytest.__version__) >= Version('9.2'))")
    if subprocess.run([sys.executable, "-c", check], env=env, capture_output=True).returncode == 0:
        return sys.executable, None
    return forked_python(Path(args.forked_venv or DEFAULT_FORKED_VENV), not args.no_forked_venv, env, needs=())


def worker_counts(args) -> list[int]:
    if args.xdist_workers:
        return [int(n) for n in args.xdist_workers.split(",") if n.strip()]
    cores = os.cpu_count() or 1
    return [n for n in (8, 16) if n <= cores] or [cores]


def bench(args, env: dict[str, str], work: Path) -> dict:
    env = dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    forked, why = forked_runner(args, env)
    if why:
        log(f"xdist_isolation: pytest-forked not measured: {why}")
    repeats = 1 if args.quick else args.repeats
    counts = [0, *worker_counts(args)]
    result: dict = {"workers": counts, "repeats": repeats, "forked_python": "this venv" if forked == sys.executable
                    else ("side venv" if forked else None), "suites": {}}
    for suite, (preload, _, _) in SUITES.items():
        tests = {"trivial": args.xdist_tests, "torch": args.xdist_tests // 2}[suite]
        folder = work / f"xdist-{suite}"
        write_suite(folder, suite, tests, max(1, args.xdist_modules if suite == "trivial" else args.xdist_modules // 2))
        rows: dict = {}
        for workers in counts:
            walls: dict[str, list[float]] = {}
            for _ in range(repeats):
                for runner, runner_args in RUNNERS.items():
                    if runner == "forked" and forked is None:
                        continue
                    extra = [f"--npu-lazy-preload={preload}"] if runner == "ours" else []
                    run = run_pytest([*runner_args, *extra, "-n", str(workers)], cwd=folder, env=env,
                                     python=forked if runner == "forked" else sys.executable)
                    if run["returncode"] != 0:
                        rows.setdefault("errors", []).append(f"{runner} -n {workers}: {run_summary(run)}: "
                                                             f"{run['output_tail'][-600:]}")
                    walls.setdefault(runner, []).append(run["wall_s"])
            rows[str(workers)] = {runner: round(min(values), 3) for runner, values in walls.items()}
            log(f"xdist_isolation/{suite} -n {workers}: {rows[str(workers)]}")
        floor = fork_floor.bench(args, env, preload=tuple(filter(None, [preload])))
        result["suites"][suite] = {"tests": tests, "preload": preload, "rows": rows, "fork_floor": floor}
    return result


def _ratio(row: dict, over: str) -> float | None:
    return round(row["ours"] / row[over], 2) if row.get("ours") and row.get(over) else None


def figures(result: dict) -> dict:
    values = {}
    for suite, data in result.get("suites", {}).items():
        parallel = [data["rows"][str(n)] for n in result["workers"] if n and str(n) in data["rows"]]
        for over in ("inprocess", "forked"):
            ratios = [r for r in (_ratio(row, over) for row in parallel) if r is not None]
            if ratios:
                values[f"{suite}_ours_over_{over}_xdist"] = max(ratios)
        serial, floor = data["rows"].get("0", {}), data["fork_floor"].get("fork_exit_reap_ms")
        if serial.get("ours") and serial.get("inprocess") and floor:
            overhead_ms = (serial["ours"] - serial["inprocess"]) / data["tests"] * 1000
            values[f"{suite}_serial_overhead_over_floor"] = round(overhead_ms / floor, 2)
    return values


def markdown(result: dict) -> list[str]:
    out = ["### 8. Every test isolated under pytest-xdist", "",
           f"Best of {result['repeats']} wall-clock runs each, the three runners interleaved; pytest-forked from "
           f"{result['forked_python'] or 'nowhere (not installed)'}.", ""]
    values = figures(result)
    for suite, data in result.get("suites", {}).items():
        preload = f"`--npu-lazy-preload={data['preload']}`"
        out += [f"{data['tests']} {suite} tests (ours: {preload}):", "",
                "| workers | in-process s | pytest-forked s | ours s | ours / in-process | ours / pytest-forked |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for workers in result["workers"]:
            row = data["rows"].get(str(workers), {})
            cells = [f"{row[r]:.2f}" if r in row else "-" for r in ("inprocess", "forked", "ours")]
            ratios = [f"{x:.2f}x" if x else "-" for x in (_ratio(row, "inprocess"), _ratio(row, "forked"))]
            out.append(f"| {'serial' if workers == 0 else f'`-n {workers}`'} | " + " | ".join(cells + ratios) + " |")
        floor = data["fork_floor"]
        if "fork_exit_reap_ms" in floor and f"{suite}_serial_overhead_over_floor" in values:
            serial = data["rows"]["0"]
            overhead = (serial["ours"] - serial["inprocess"]) / data["tests"] * 1000
            out.append("")
            out.append(f"Serial overhead {overhead:.2f} ms a test over in-process; the fork floor of a process of the "
                       f"zygote's size {floor['fork_exit_reap_ms']:.2f} ms: "
                       f"{values[f'{suite}_serial_overhead_over_floor']:.2f}x.")
        for error in data["rows"].get("errors", []):
            out.append(f"- run not clean: {error}")
        out.append("")
    return out
