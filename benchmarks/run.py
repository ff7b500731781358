"""Side-by-side timings of pytest-npu-lazy: ``python -m benchmarks [--quick]``.

One run on one machine measures, and prints as a markdown table:

1. the marginal cost per test of trivial tests under five kinds of isolation
   (none; pytest-forked; our zygote; our spawn mode; a subprocess per test
   that imports torch and torch_npu, the way torch_npu's own tests work);
2. the wall time of the test/dynamo suite against benchmarks/subprocess_suite,
   the same checks written as one ``python -c CODE`` per test;
3. the import recorder's overhead on ``import torch, torch_npu``;
4. the test/dynamo suite with ``pytest-xdist -n 2`` against ``-n 0``;
5. torch_npu's test_compile_trigger.py as it is and with its helper calling
   run_python (benchmarks/compile_trigger.py), when its path is given.

Results go to benchmarks/results/latest.json (not committed; BENCHMARKS.md
is the committed record). ``--quick`` runs every measurement on tiny inputs,
for the smoke test; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # python benchmarks/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REPO = Path(__file__).resolve().parent.parent

from benchmarks import compile_trigger, forked_venv, module_zygotes  # noqa: E402 - after the sys.path fix for `python benchmarks/run.py`

RESULTS = REPO / "benchmarks" / "results"
SUBPROCESS_SUITE = "benchmarks/subprocess_suite"
DYNAMO_SUITE = "test/dynamo"
TIMING_ENV = "NPU_LAZY_BENCH_TIMING"
DEFAULT_FORKED_VENV = os.environ.get("NPU_LAZY_BENCH_FORKED_VENV", "/tmp/bench-forked")
FORKED_PYTEST, FORKED_VERSION = forked_venv.FORKED_PYTEST, forked_venv.FORKED_VERSION

#: the code string of a torch_npu-style test, and of the trivial subprocess-per-test variant
IMPORT_CODE = "import torch, torch_npu"

TARGETS = {
    "zygote_median_ms": ("<=", 25.0),
    "subprocess_over_zygote": (">=", 100.0),
    "suite_speedup": (">=", 10.0),
    "recorder_overhead_pct": ("<=", 5.0),
    "xdist_speedup": (">=", 1.6),
    "module_trivial_ms": ("<=", module_zygotes.TARGET_TRIVIAL_MS),
    "module_over_forked_worst": ("<=", module_zygotes.TARGET_RATIO),
}


# -- helpers ------------------------------------------------------------------

def log(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return []


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil
    return ordered[int(rank) - 1]


def stats_ms(values: list[float]) -> dict:
    ms = [v * 1000 for v in values]
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 2), "p90_ms": round(percentile(ms, 90), 2),
            "mean_ms": round(statistics.fmean(ms), 2), "min_ms": round(min(ms), 2), "max_ms": round(max(ms), 2)}


def base_env() -> dict[str, str]:
    """The environment of every measured process: the CANN host stub on LD_LIBRARY_PATH, the repo importable."""
    from pytest_npu_lazy import cann

    cann.activate()  # sets LD_LIBRARY_PATH (and the mode) in os.environ; imports nothing heavy
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    for name in list(env):  # nothing of a surrounding pytest run (the smoke test's) leaks into the measured ones
        if name == TIMING_ENV or name.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST")) or name == "PYTEST_ADDOPTS":
            del env[name]
    return env


def run_pytest(args: list[str], *, cwd: Path, env: dict[str, str], python: str = sys.executable,
               timeout: float = 3600) -> dict:
    """Run pytest with the timing plugin; wall time, per-test moments and outcome counts."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        timing_path = handle.name
    env = dict(env, **{TIMING_ENV: timing_path})
    command = [python, "-m", "pytest", "-p", "benchmarks.timing", "-p", "no:cacheprovider",
               "-p", "no:randomly", "-q", *args]
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()  # CLOCK_MONOTONIC: the same clock as the timing plugin's
    try:
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        ended = time.perf_counter()
        output = result.stdout + result.stderr
        returncode = result.returncode
    except subprocess.TimeoutExpired as exc:
        ended, returncode = time.perf_counter(), None
        output = f"timed out after {timeout} s\n" + str(exc.stdout or "")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU of every descendant that was reaped (zygotes and children are reaped by their parents in turn)
    cpu_s = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    try:
        with open(timing_path, encoding="utf-8") as handle:
            timing = json.load(handle)
    except (OSError, ValueError):
        timing = None
    finally:
        os.unlink(timing_path)
    return {"command": command, "cwd": str(cwd), "launched": started, "ended": ended,
            "wall_s": ended - started, "cpu_s": cpu_s, "returncode": returncode, "timing": timing,
            "output_tail": output[-3000:]}


def outcomes(run: dict) -> dict:
    return (run["timing"] or {}).get("outcomes", {})


def run_summary(run: dict) -> str:
    counts = outcomes(run)
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no reports"


# -- 1. trivial tests ---------------------------------------------------------

VARIANTS = {
    # name: (description, marker line or None, conftest imports torch+torch_npu, extra pytest args)
    "none": ("no isolation (plain pytest, plugin off)", None, True, ["-p", "no:npu_lazy"]),
    "forked": ("pytest-forked `--forked` (forks the pytest process)", None, True,
               ["-p", "no:npu_lazy", "--forked"]),
    "zygote": ("pytest-npu-lazy zygote (fork)", "pytest.mark.npu_lazy(preload=['torch', 'torch_npu'])", False, []),
    "spawn": ("pytest-npu-lazy spawn (fresh `python -m pytest` per test)",
              "pytest.mark.npu_lazy(preload=['torch', 'torch_npu'], isolation='spawn')", False, []),
    "subprocess": ("subprocess per test: `python -c 'import torch, torch_npu'` (torch_npu's style)",
                   None, False, ["-p", "no:npu_lazy"]),
}


def write_trivial(folder: Path, variant: str, tests: int, per_module: int) -> None:
    """``tests`` trivial tests in modules of ``per_module``, for one variant."""
    _, marker, conftest_imports, _ = VARIANTS[variant]
    folder.mkdir(parents=True)
    (folder / "pytest.ini").write_text("[pytest]\n")
    if conftest_imports:
        # the pytest process holds torch and torch_npu, as in a torch_npu test run (pytest-forked forks it)
        (folder / "conftest.py").write_text("import torch\nimport torch_npu  # noqa: F401\n")
    for module in range(0, tests, per_module):
        lines = ["import pytest", "import subprocess", "import sys", ""]
        if marker:
            lines += [f"pytestmark = {marker}", ""]
        for index in range(module, min(module + per_module, tests)):
            lines.append(f"def test_{index:04d}():")
            if variant == "subprocess":
                lines.append(f"    subprocess.run([sys.executable, '-c', {IMPORT_CODE!r}], check=True)")
            else:
                lines.append("    pass")
            lines.append("")
        (folder / f"test_trivial_{module // per_module:03d}.py").write_text("\n".join(lines))


def per_test(runs: list[dict]) -> dict:
    """Marginal per-test cost from the pytest process's own moments, pooled over repeated runs.

    The marginal cost of test i is the time from its logstart to the next
    test's logstart (everything the pytest process does per test, including
    the gap between tests). The first test also pays for the startup (the
    zygote's preload) and is reported as part of the startup instead. Cheap
    variants run several times, so that a burst of other work on a shared
    machine moves the pooled median little; each run's median is kept too.
    """
    marginal, spans, per_run, startups = [], [], [], []
    result: dict = {}
    for run in runs:
        timing = run["timing"]
        if not timing or not timing.get("tests"):
            return {"error": "no timing data: " + run["output_tail"][-1500:]}
        tests = timing["tests"]
        starts = [t[1] for t in tests]
        intervals = [b - a for a, b in zip(starts, starts[1:])]
        own = intervals[1:] if len(intervals) > 1 else intervals
        marginal += own
        per_run.append(round(statistics.median(own) * 1000, 2))
        run_spans = [t[2] - t[1] for t in tests if t[2] is not None]
        spans += run_spans[1:] or run_spans
        first_end = tests[0][2] if tests[0][2] is not None else starts[0]
        startups.append(first_end - run["launched"])
        if run["returncode"] != 0 and "error" not in result:
            result["error"] = f"pytest exit status {run['returncode']}: " + run["output_tail"][-1500:]
    last = runs[-1]
    result.update({
        "tests": len(last["timing"]["tests"]),
        "runs": len(runs),
        "outcomes": last["timing"].get("outcomes", {}),
        "wall_s": round(statistics.median(r["wall_s"] for r in runs), 3),
        "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 3),
        "startup_s": round(statistics.median(startups), 3),  # launch .. end of the first test
        "marginal": stats_ms(marginal),
        "median_ms_per_run": per_run,
        "span": stats_ms(spans),
    })
    return result


def forked_python(venv: Path, allow_create: bool, env: dict[str, str]) -> tuple[str | None, str | None]:
    """A Python whose pytest can run pytest-forked, or why there is none.

    pytest-forked 1.7.5 fails every test on pytest 9.2 (it marshals reports,
    and pytest 9.2's NodeId cannot be marshalled), so it is measured in a side
    venv with pytest 9.1.1 that sees this venv's torch and torch_npu through
    a .pth file (its own site-packages come first, so its pytest wins).
    """
    python = venv / "bin" / "python"
    if not python.exists():
        if not allow_create:
            return None, f"no side venv with pytest {FORKED_PYTEST} at {venv} (make one with --forked-venv-setup)"
        error = make_forked_venv(venv)
        if error:
            return None, error
    probe = subprocess.run([str(python), "-c", "import pytest, pytest_forked, torch, torch_npu; print(pytest.__version__)"],
                           env=env, capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"the side venv {venv} cannot import pytest, pytest_forked, torch and torch_npu: {probe.stderr[-800:]}"
    return str(python), None


def make_forked_venv(venv: Path) -> str | None:
    log(f"creating the side venv {venv} (pytest=={FORKED_PYTEST}, pytest-forked=={FORKED_VERSION})")
    return forked_venv.make_forked_venv(venv)


def forked_in_main_venv(folder: Path, env: dict[str, str]) -> str | None:
    """Does pytest-forked work with this venv's pytest? None if it does, else what goes wrong."""
    run = run_pytest([str(folder / "test_trivial_000.py"), "-p", "no:npu_lazy", "--forked"], cwd=folder, env=env)
    if run["returncode"] == 0:
        return None
    import pytest

    line = next((l for l in run["output_tail"].splitlines() if "EXITED" in l or "Error" in l), "")
    return (f"pytest-forked {FORKED_VERSION} fails every test on pytest {pytest.__version__} "
            f"(exit status {run['returncode']}; {line.strip()[:200]})")


def bench_trivial(args, env: dict[str, str], work: Path) -> dict:
    results: dict = {"tests": args.tests, "slow_tests": args.slow_tests, "per_module": args.per_module,
                     "method": "per-test interval between consecutive pytest_runtest_logstart moments in the "
                               "pytest process (timing plugin benchmarks/timing.py); the first test is startup",
                     "variants": {}}
    for variant in args.variants:
        description, _, _, extra = VARIANTS[variant]
        count = args.slow_tests if variant in ("spawn", "subprocess") else args.tests
        folder = work / f"trivial-{variant}"
        write_trivial(folder, variant, count, args.per_module)
        python = sys.executable
        entry: dict = {"description": description}
        if variant == "forked":
            forked_py, reason = forked_python(Path(args.forked_venv), not args.no_forked_venv, env)
            if forked_py is None:
                problem = forked_in_main_venv(folder, env)
                if problem is not None:
                    entry["impossible"] = f"{problem}; and {reason}"
                    results["variants"][variant] = entry
                    log(f"trivial/{variant}: impossible: {entry['impossible'][:200]}")
                    continue
            else:
                python = forked_py
                version = subprocess.run([python, "-c", "import pytest; print(pytest.__version__)"],
                                         capture_output=True, text=True, env=env).stdout.strip()
                entry["description"] += f" (side venv, pytest {version})"
        repeats = 1 if variant in ("spawn", "subprocess") else args.repeats
        log(f"trivial/{variant}: {count} tests" + (f", {repeats} runs" if repeats > 1 else ""))
        runs = [run_pytest([*extra, "."], cwd=folder, env=env, python=python) for _ in range(repeats)]
        run = runs[-1]
        entry.update(per_test(runs))
        results["variants"][variant] = entry
        m = entry.get("marginal", {})
        log(f"trivial/{variant}: median {m.get('median_ms')} ms, p90 {m.get('p90_ms')} ms, {run_summary(run)}")
    if "zygote" in args.variants and not args.quick:
        # the same tests in a single module: the child collects its whole module, so cost grows with it
        folder = work / "trivial-zygote-one-module"
        write_trivial(folder, "zygote", args.tests, args.tests)
        runs = [run_pytest(["."], cwd=folder, env=env) for _ in range(args.repeats)]
        entry = {"description": f"pytest-npu-lazy zygote, all {args.tests} tests in one module"}
        entry.update(per_test(runs))
        results["variants"]["zygote_one_module"] = entry
        log(f"trivial/zygote_one_module: median {entry.get('marginal', {}).get('median_ms')} ms")
    results["fork_floor"] = bench_fork_floor(args, env)
    variants = results["variants"]

    def median(name):
        return variants.get(name, {}).get("marginal", {}).get("median_ms")

    ratios = {}
    for name in ("none", "forked", "spawn", "subprocess"):
        if median(name) and median("zygote"):
            ratios[f"{name}_over_zygote"] = round(median(name) / median("zygote"), 2)
    results["ratios"] = ratios
    return results


FORK_FLOOR_SCRIPT = """
import gc, os, statistics, sys, time
from pytest_npu_lazy.probe.recorder import RECORDER
RECORDER.install(phase="pytest")
import pytest  # what a zygote holds besides the preload
import torch, torch_npu
RECORDER.sweep()
gc.collect()
gc.freeze()
reps = int(sys.argv[1])
exit_round, alive = [], []
for _ in range(reps):
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    exit_round.append(time.perf_counter() - started)
for _ in range(reps):
    read_end, write_end = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.write(write_end, b"x")
        os._exit(0)
    os.read(read_end, 1)
    alive.append(time.perf_counter() - started)
    os.waitpid(pid, 0)
    os.close(read_end)
    os.close(write_end)
print("FORK", statistics.median(exit_round), statistics.median(alive))
"""


def bench_fork_floor(args, env: dict[str, str]) -> dict:
    """The physical limit: fork a process holding pytest, torch and torch_npu (as a zygote does)."""
    env = dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    reps = 5 if args.quick else 50
    result = subprocess.run([sys.executable, "-c", FORK_FLOOR_SCRIPT, str(reps)], env=env,
                            capture_output=True, text=True, cwd=REPO)
    line = next((l for l in result.stdout.splitlines() if l.startswith("FORK")), None)
    if result.returncode != 0 or line is None:
        return {"error": f"fork floor script failed: {result.stderr[-1500:]}"}
    _, round_trip, alive = line.split()
    floor = {"reps": reps, "fork_exit_reap_ms": round(float(round_trip) * 1000, 2),
             "fork_to_running_child_ms": round(float(alive) * 1000, 2)}
    log(f"fork floor: fork+exit+reap {floor['fork_exit_reap_ms']} ms, fork to a running child "
        f"{floor['fork_to_running_child_ms']} ms")
    return floor


# -- 2 and 4. the test/dynamo suite -------------------------------------------

def bench_suite(args, env: dict[str, str]) -> tuple[dict, dict]:
    ours_args = ["-p", "npu_lazy", *args.suite_selection(DYNAMO_SUITE)]
    theirs_args = ["-p", "no:npu_lazy", *args.suite_selection(SUBPROCESS_SUITE)]
    runs = {}
    if not args.quick and not args.no_warmup:
        log("suite: warm-up run of test/dynamo (fills the Inductor cache both suites use; not timed)")
        run_pytest([*ours_args, "-n", "0", "-x"], cwd=REPO, env=env)
    plan = [("npu_lazy", ours_args, ["-n", "0"]), ("subprocess", theirs_args, ["-n", "0"]),
            ("npu_lazy_n2", ours_args, ["-n", "2"])]
    if not args.quick:
        plan.append(("npu_lazy_n2_loadfile", ours_args, ["-n", "2", "--dist", "loadfile"]))
    for name, selection, workers in plan:
        log(f"suite/{name}: pytest {' '.join(workers)} {' '.join(selection)}")
        run = run_pytest([*selection, *workers], cwd=REPO, env=env)
        runs[name] = run
        log(f"suite/{name}: {run['wall_s']:.1f} s, {run_summary(run)}, load {loadavg()}")

    def describe(run: dict) -> dict:
        timing = run["timing"] or {}
        spans = {t[0]: round(t[2] - t[1], 3) for t in timing.get("tests", []) if t[2] is not None}
        by_file: dict[str, float] = {}
        for nodeid, span in spans.items():
            key = nodeid.split("::")[0].rsplit("/", 1)[-1]
            by_file[key] = round(by_file.get(key, 0.0) + span, 2)
        first = timing["tests"][0][1] if timing.get("tests") else None
        entry = {"wall_s": round(run["wall_s"], 2), "cpu_s": round(run["cpu_s"], 2),
                 "cores_busy": round(run["cpu_s"] / run["wall_s"], 2), "outcomes": outcomes(run),
                 "returncode": run["returncode"],
                 "command": " ".join(run["command"][1:]).replace("-p benchmarks.timing ", ""),
                 "tests": len(timing.get("tests", [])),
                 "until_first_test_s": round(first - run["launched"], 2) if first else None,
                 "sum_of_test_spans_s": round(sum(spans.values()), 2), "by_file_s": by_file, "test_spans_s": spans}
        if run["returncode"] not in (0,):
            entry["error"] = run["output_tail"][-2000:]
        return entry

    suite = {"npu_lazy": describe(runs["npu_lazy"]), "subprocess": describe(runs["subprocess"]),
             "selection": args.suite_selection(DYNAMO_SUITE)}
    suite["speedup"] = round(runs["subprocess"]["wall_s"] / runs["npu_lazy"]["wall_s"], 2)
    suite["same_outcomes"] = outcomes(runs["npu_lazy"]) == outcomes(runs["subprocess"])
    xdist = {"n0_s": round(runs["npu_lazy"]["wall_s"], 2), "n2_s": round(runs["npu_lazy_n2"]["wall_s"], 2),
             "n2": describe(runs["npu_lazy_n2"])}
    xdist["speedup"] = round(xdist["n0_s"] / xdist["n2_s"], 2)
    if "npu_lazy_n2_loadfile" in runs:
        xdist["n2_loadfile_s"] = round(runs["npu_lazy_n2_loadfile"]["wall_s"], 2)
        xdist["n2_loadfile"] = describe(runs["npu_lazy_n2_loadfile"])
        xdist["speedup_loadfile"] = round(xdist["n0_s"] / xdist["n2_loadfile_s"], 2)
    # the tests' own work (compiling, first calls) is the same in both suites: even if pytest-npu-lazy
    # cost nothing at all, the speedup could not exceed the subprocess wall over the time inside our tests
    ours, theirs = suite["npu_lazy"], suite["subprocess"]
    if ours["sum_of_test_spans_s"]:
        suite["speedup_ceiling"] = round(theirs["wall_s"] / ours["sum_of_test_spans_s"], 2)
    return suite, xdist



#: one check of each kind (imports only, wrapper creation, a first compiled call), shown one by one
THREE_CHECKS = ("test_import.py::test_import_torch_npu_defers_compiler_stack",
                "test_wrapper.py::test_wrapper_runs_dynamo_setup_only[plain]",
                "test_first_call.py::test_compiled_matches_eager[sin_cos]")


def _three_checks(suite: dict) -> list[str]:
    """Three single checks, each test's own span in both suites."""
    def span(entry: dict, check: str) -> float | None:
        return next((s for n, s in entry.get("test_spans_s", {}).items() if n.endswith("/" + check)), None)

    rows = []
    for check in THREE_CHECKS:
        ours, theirs = span(suite["npu_lazy"], check), span(suite["subprocess"], check)
        if ours and theirs:
            rows.append(f"| `{check}` | {ours:.2f} | {theirs:.2f} | {theirs / ours:.1f}x |")
    if not rows:
        return []
    return ["Three checks one by one (each test's logstart..logfinish in its suite's run above):", "",
            "| check | pytest-npu-lazy s | subprocess `python -c` s | ratio |", "| --- | ---: | ---: | ---: |",
            *rows, ""]

# -- 3. the recorder's overhead -----------------------------------------------

RECORDER_SCRIPT = """
import sys, time
from pytest_npu_lazy.probe.recorder import RECORDER
if sys.argv[1] == "on":
    RECORDER.install(phase="pytest")
started = time.perf_counter()
import torch, torch_npu
elapsed = time.perf_counter() - started
assert RECORDER.installed == (sys.argv[1] == "on")
assert ("torch_npu" in RECORDER.records) == (sys.argv[1] == "on")
print("IMPORT_SECONDS", elapsed)
"""


def bench_recorder(args, env: dict[str, str]) -> dict:
    env = dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    times: dict[str, list[float]] = {"off": [], "on": []}
    for index in range(args.recorder_runs):
        order = ("off", "on") if index % 2 == 0 else ("on", "off")  # interleaved, alternating order
        for mode in order:
            result = subprocess.run([sys.executable, "-c", RECORDER_SCRIPT, mode], env=env,
                                    capture_output=True, text=True, cwd=REPO)
            line = next((l for l in result.stdout.splitlines() if l.startswith("IMPORT_SECONDS")), None)
            if result.returncode != 0 or line is None:
                return {"error": f"recorder run ({mode}) failed: {result.stderr[-1500:]}"}
            times[mode].append(float(line.split()[1]))
    off, on = statistics.median(times["off"]), statistics.median(times["on"])
    result = {"runs": args.recorder_runs, "code": "import torch, torch_npu (fresh process each, autoload off)",
              "off_s": [round(t, 4) for t in times["off"]], "on_s": [round(t, 4) for t in times["on"]],
              "median_off_s": round(off, 4), "median_on_s": round(on, 4),
              "ratio": round(on / off, 4), "overhead_pct": round((on / off - 1) * 100, 2)}
    log(f"recorder: off {off:.3f} s, on {on:.3f} s, overhead {result['overhead_pct']} %")
    return result


# -- report -------------------------------------------------------------------

def machine() -> dict:
    from importlib import metadata

    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory = next(l.split()[1] for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemTotal"))
        memory_gib = round(int(memory) / 2**20, 1)
    except (OSError, StopIteration):
        memory_gib = None
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": memory_gib,
            "kernel": platform.release(), "python": platform.python_version(),
            "torch": version("torch"), "torch_npu": version("torch-npu"), "triton_ascend": version("triton-ascend"),
            "pytest": version("pytest"), "pytest_xdist": version("pytest-xdist"),
            "pytest_forked": version("pytest-forked"), "pytest_npu_lazy": version("pytest-npu-lazy"),
            "cann": os.environ.get("PYTEST_NPU_LAZY_CANN", "?"),
            "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE")}


def judge(results: dict) -> dict:
    values = {}
    trivial = results.get("trivial", {})
    zygote = trivial.get("variants", {}).get("zygote", {}).get("marginal", {})
    if zygote:
        values["zygote_median_ms"] = zygote["median_ms"]
    if "subprocess_over_zygote" in trivial.get("ratios", {}):
        values["subprocess_over_zygote"] = trivial["ratios"]["subprocess_over_zygote"]
    if "speedup" in results.get("suite", {}):
        values["suite_speedup"] = results["suite"]["speedup"]
    if "overhead_pct" in results.get("recorder", {}):
        values["recorder_overhead_pct"] = results["recorder"]["overhead_pct"]
    if "speedup" in results.get("xdist", {}):
        values["xdist_speedup"] = results["xdist"]["speedup"]
    rows = results.get("modules", {}).get("rows", {})
    if rows:
        trivial_ms = rows.get("trivial", {}).get("columns", {}).get("module", {}).get("marginal", {}).get("median_ms")
        values["module_trivial_ms"] = trivial_ms
        ratios = [row["module_over_forked"] for row in rows.values() if "module_over_forked" in row]
        values["module_over_forked_worst"] = max(ratios) if ratios else None
    part_of = {"zygote_median_ms": "trivial", "subprocess_over_zygote": "trivial", "suite_speedup": "suite",
               "recorder_overhead_pct": "recorder", "xdist_speedup": "suite", "module_trivial_ms": "modules",
               "module_over_forked_worst": "modules"}
    verdicts = {}
    for name, (op, target) in TARGETS.items():
        if part_of[name] not in results:
            continue  # that part did not run
        value = values.get(name)
        met = None if value is None else (value <= target if op == "<=" else value >= target)
        verdicts[name] = {"value": value, "target": f"{op} {target:g}", "met": met}
    return verdicts


def markdown(results: dict) -> str:
    m = results["machine"]
    out = []
    out.append(f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Linux {m['kernel']}; "
               f"Python {m['python']}; torch {m['torch']}, torch_npu {m['torch_npu']} (CANN {m['cann']}), "
               f"triton-ascend {m['triton_ascend']}; pytest {m['pytest']}, pytest-xdist {m['pytest_xdist']}, "
               f"pytest-forked {m['pytest_forked']}; PYTHONDONTWRITEBYTECODE={m['PYTHONDONTWRITEBYTECODE']}.")
    load = results["load"]
    out.append(f"Load average (1, 5, 15 min) at start {load['start']}, at end {load['end']}"
               + (" (other work shared the CPUs: numbers are pessimistic)" if load["start"] and load["start"][0] > 0.5 else "")
               + ".")
    out.append(f"Command: `{results['command']}`" + (" (quick mode: tiny inputs, numbers mean nothing)" if results["quick"] else ""))
    out.append("")
    trivial = results.get("trivial")
    if trivial:
        out.append("### 1. Marginal cost per trivial test")
        out.append("")
        repeats = max((e.get("runs", 1) for e in trivial["variants"].values()), default=1)
        out.append(f"{trivial['tests']} tests (spawn and subprocess: {trivial['slow_tests']}) in modules of "
                   f"{trivial['per_module']}; per test: time from a test's `pytest_runtest_logstart` to the next "
                   "one's, in the pytest process; the first test (which waits for the zygote's preload) counts "
                   f"as startup. The cheap variants run {repeats} times and their intervals are pooled "
                   "(each run's median in the JSON).")
        out.append("")
        out.append("| isolation | median ms | p90 ms | mean ms | startup s (launch to end of first test) | ratio to zygote (median) |")
        out.append("| --- | ---: | ---: | ---: | ---: | ---: |")
        zyg = trivial["variants"].get("zygote", {}).get("marginal", {}).get("median_ms")
        for name, entry in trivial["variants"].items():
            if "impossible" in entry:
                out.append(f"| {entry['description']} | impossible: {entry['impossible'][:300]} | | | | |")
                continue
            marg = entry.get("marginal")
            if not marg:
                out.append(f"| {entry['description']} | error: {entry.get('error', '?')[:200]} | | | | |")
                continue
            ratio = f"{marg['median_ms'] / zyg:.2f}x" if zyg else ""
            flag = f" ({entry['error'][:80]})" if entry.get("error") else ""
            out.append(f"| {entry['description']}{flag} | {marg['median_ms']:.1f} | {marg['p90_ms']:.1f} | "
                       f"{marg['mean_ms']:.1f} | {entry['startup_s']:.2f} | {ratio} |")
        out.append("")
        floor = trivial.get("fork_floor", {})
        if "fork_exit_reap_ms" in floor:
            out.append(f"Physical floor, in a process holding pytest, torch and torch_npu (median of {floor['reps']}): "
                       f"fork + `os._exit` + `waitpid` {floor['fork_exit_reap_ms']:.1f} ms; fork until the child "
                       f"runs (writes to a pipe) {floor['fork_to_running_child_ms']:.1f} ms.")
            out.append("")
    suite = results.get("suite")
    if suite:
        out.append("### 2. The test/dynamo suite against the same checks as subprocess code strings")
        out.append("")
        out.append("| suite | wall s | CPU s (cores busy) | outcomes |")
        out.append("| --- | ---: | ---: | --- |")
        for name, label in (("npu_lazy", "test/dynamo with pytest-npu-lazy (`-n 0`)"),
                            ("subprocess", "benchmarks/subprocess_suite: one `python -c CODE` per test (`-n 0`)")):
            entry = suite[name]
            counts = ", ".join(f"{n} {k}" for k, n in sorted(entry["outcomes"].items()))
            out.append(f"| {label} | {entry['wall_s']:.1f} | {entry['cpu_s']:.0f} ({entry['cores_busy']:.2f}) | {counts} |")
        out.append(f"| **speedup** | **{suite['speedup']:.2f}x** | | same outcomes: {suite['same_outcomes']} |")
        out.append("")
        if suite.get("speedup_ceiling"):
            out.append(f"Time inside the tests (sum of logstart..logfinish, the first one with the zygote's "
                       f"startup) with pytest-npu-lazy: {suite['npu_lazy']['sum_of_test_spans_s']:.1f} s, which "
                       f"is mostly work both suites do (Dynamo tracing, Inductor compiling, first calls, "
                       f"the zoo's regressions); so even a free harness could not be more than "
                       f"{suite['speedup_ceiling']:.2f}x faster than the subprocess suite here.")
            out.append("")
        files = sorted(set(suite["npu_lazy"].get("by_file_s", {})) | set(suite["subprocess"].get("by_file_s", {})))
        if files:
            out.append("| file | tests | pytest-npu-lazy s | subprocess s |")
            out.append("| --- | ---: | ---: | ---: |")
            for name in files:
                count = sum(1 for n in suite["npu_lazy"].get("test_spans_s", {}) if n.split("::")[0].endswith("/" + name))
                out.append(f"| {name} | {count} | {suite['npu_lazy']['by_file_s'].get(name, 0):.1f} | "
                           f"{suite['subprocess']['by_file_s'].get(name, 0):.1f} |")
            out.append("")
        out.extend(_three_checks(suite))
    recorder = results.get("recorder")
    if recorder and "error" not in recorder:
        out.append("### 3. Import recorder overhead")
        out.append("")
        out.append(f"`import torch, torch_npu` in a fresh process, {recorder['runs']} runs each, interleaved.")
        out.append("")
        out.append("| recorder | median s |")
        out.append("| --- | ---: |")
        out.append(f"| off | {recorder['median_off_s']:.3f} |")
        out.append(f"| on (`RECORDER.install()` first) | {recorder['median_on_s']:.3f} |")
        out.append(f"| **overhead** | **{recorder['overhead_pct']:+.1f} %** |")
        out.append("")
    xdist = results.get("xdist")
    if xdist:
        out.append("### 4. pytest-xdist on the test/dynamo suite")
        out.append("")
        n0 = suite["npu_lazy"] if suite else {}
        out.append("| workers | wall s | CPU s (cores busy) |")
        out.append("| --- | ---: | ---: |")
        out.append(f"| `-n 0` | {xdist['n0_s']:.1f} | {n0.get('cpu_s', 0):.0f} ({n0.get('cores_busy', 0):.2f}) |")
        out.append(f"| `-n 2` | {xdist['n2_s']:.1f} | {xdist['n2']['cpu_s']:.0f} ({xdist['n2']['cores_busy']:.2f}) |")
        out.append(f"| **speedup** (`-n 0` / `-n 2`) | **{xdist['speedup']:.2f}x** | |")
        if "n2_loadfile_s" in xdist:
            lf = xdist["n2_loadfile"]
            out.append(f"| `-n 2 --dist loadfile` | {xdist['n2_loadfile_s']:.1f} | {lf['cpu_s']:.0f} ({lf['cores_busy']:.2f}) |")
            out.append(f"| speedup with `--dist loadfile` | {xdist['speedup_loadfile']:.2f}x | |")
        out.append("")
    if results.get("compile_trigger"):
        out.extend(compile_trigger.markdown(results["compile_trigger"]))
    if results.get("modules"):
        out.extend(module_zygotes.markdown(results["modules"]))
    out.append("### Targets")
    out.append("")
    out.append("| figure | value | target | met |")
    out.append("| --- | ---: | --- | --- |")
    for name, verdict in results["targets"].items():
        met = {True: "yes", False: "**no**", None: "n/a"}[verdict["met"]]
        out.append(f"| {name} | {verdict['value']} | {verdict['target']} | {met} |")
    return "\n".join(out) + "\n"


# -- command line ---------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny inputs, for the smoke test")
    parser.add_argument("--tests", type=int, help="trivial tests per cheap variant (default 100)")
    parser.add_argument("--slow-tests", type=int, help="trivial tests for spawn and subprocess (default 100)")
    parser.add_argument("--per-module", type=int, help="trivial tests per module (default 10)")
    parser.add_argument("--repeats", type=int, help="runs of each cheap trivial variant, pooled (default 3)")
    parser.add_argument("--recorder-runs", type=int, help="fresh imports with and without the recorder (default 15)")
    parser.add_argument("--only", default="trivial,suite,recorder,compile_trigger",
                        help="comma-separated parts: trivial, suite (with xdist), recorder, compile_trigger, "
                             "modules (isolation at fork cost: module zygotes against pytest-forked; not by default)")
    parser.add_argument("--compile-trigger", default=os.environ.get(compile_trigger.ENV),
                        help="torch_npu's test/dynamo/test_compile_trigger.py (from Ascend/pytorch), to time as it "
                             f"is and with its helper calling run_python (default: ${compile_trigger.ENV}; "
                             "without it, that part is skipped)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="trivial variants to measure")
    parser.add_argument("--forked-venv", default=DEFAULT_FORKED_VENV,
                        help=f"side venv with pytest {FORKED_PYTEST} for pytest-forked (created when missing)")
    parser.add_argument("--no-forked-venv", action="store_true", help="never create the side venv")
    parser.add_argument("--forked-venv-setup", action="store_true", help="only create the side venv, then exit")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run of test/dynamo")
    parser.add_argument("--json", default=str(RESULTS / "latest.json"), help="where to write the results")
    parser.add_argument("--markdown", help="also write the markdown table here")
    args = parser.parse_args(argv)
    quick = args.quick
    args.tests = args.tests or (3 if quick else 100)
    args.slow_tests = args.slow_tests or (2 if quick else 100)
    args.per_module = args.per_module or (2 if quick else 10)
    args.recorder_runs = args.recorder_runs or (2 if quick else 15)
    args.repeats = args.repeats or (1 if quick else 3)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(args.variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    if quick:
        args.no_forked_venv = True  # use a side venv if there is one, never build it in the smoke test

    def suite_selection(root: str) -> list[str]:
        if quick:  # one cheap test of each suite
            return [f"{root}/test_import.py::test_dynamo_post_import_trigger_is_installed"]
        return [root]

    args.suite_selection = suite_selection
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = base_env()
    if args.forked_venv_setup:
        error = make_forked_venv(Path(args.forked_venv))
        print(error or f"side venv ready: {args.forked_venv}")
        return 1 if error else 0
    command = "python -m benchmarks" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    results: dict = {"command": command.strip(), "quick": args.quick, "machine": machine(),
                     "load": {"start": loadavg()}, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    log(f"load average at start: {results['load']['start']} on {os.cpu_count()} cores")
    work = Path(tempfile.mkdtemp(prefix="npu-lazy-bench-"))
    try:
        if "trivial" in args.parts:
            results["trivial"] = bench_trivial(args, env, work)
        if "recorder" in args.parts:
            results["recorder"] = bench_recorder(args, env)
        if "suite" in args.parts:
            results["suite"], results["xdist"] = bench_suite(args, env)
        if "modules" in args.parts:
            results["modules"] = module_zygotes.bench(args, env, work, run_pytest, per_test, forked_python, log)
        if "compile_trigger" in args.parts and args.compile_trigger:
            results["compile_trigger"] = compile_trigger.bench(
                Path(args.compile_trigger).resolve(), env, work / "compile_trigger", run_pytest, log,
                warmup=not (args.quick or args.no_warmup), quick=args.quick)
        elif "compile_trigger" in args.parts:
            log(f"compile_trigger: skipped (no --compile-trigger PATH or ${compile_trigger.ENV})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["load"]["end"] = loadavg()
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    results["targets"] = judge(results)
    table = markdown(results)
    results["markdown"] = table
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    print(table)
    log(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
