"""What every benchmark part shares: the checkout, the results folder, logging, running pytest, statistics.

The parts (trivial, suite, recorder, xdist, compile_trigger, module_zygotes, ...) import these helpers;
:mod:`benchmarks.harness` imports the parts and runs them. Nothing here imports a part or the harness, so
the arrows run one way: harness -> parts -> common.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import forked_venv

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
TIMING_ENV = "NPU_LAZY_BENCH_TIMING"
DEFAULT_FORKED_VENV = os.environ.get("NPU_LAZY_BENCH_FORKED_VENV", "/tmp/bench-forked")
FORKED_PYTEST, FORKED_VERSION = forked_venv.FORKED_PYTEST, forked_venv.FORKED_VERSION


# -- running and timing -------------------------------------------------------

def log(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover
        return []


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


def forked_python(venv: Path, allow_create: bool, env: dict[str, str],
                  needs: tuple[str, ...] = ("torch", "torch_npu")) -> tuple[str | None, str | None]:
    """A Python whose pytest can run pytest-forked, or why there is none.

    pytest-forked 1.7.5 fails every test on pytest 9.2 (it marshals reports,
    and pytest 9.2's NodeId cannot be marshalled), so it is measured in a side
    venv with pytest 9.1.1 that sees this venv's torch and torch_npu through
    a .pth file (its own site-packages come first, so its pytest wins). ``needs``: what else it must import.
    """
    python = venv / "bin" / "python"
    if not python.exists():
        if not allow_create:
            return None, f"no side venv with pytest {FORKED_PYTEST} at {venv} (make one with --forked-venv-setup)"
        error = make_forked_venv(venv)
        if error:
            return None, error
    modules = ("pytest", "pytest_forked", *needs)
    probe = subprocess.run([str(python), "-c", f"import {', '.join(modules)}; print(pytest.__version__)"],
                           env=env, capture_output=True, text=True)
    if probe.returncode != 0:
        return None, f"the side venv {venv} cannot import {', '.join(modules)}: {probe.stderr[-800:]}"
    return str(python), None


def make_forked_venv(venv: Path) -> str | None:
    log(f"creating the side venv {venv} (pytest=={FORKED_PYTEST}, pytest-forked=={FORKED_VERSION})")
    return forked_venv.make_forked_venv(venv)


# -- statistics ------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil
    return ordered[int(rank) - 1]


def stats_ms(values: list[float]) -> dict:
    ms = [v * 1000 for v in values]
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 2), "p90_ms": round(percentile(ms, 90), 2),
            "mean_ms": round(statistics.fmean(ms), 2), "min_ms": round(min(ms), 2), "max_ms": round(max(ms), 2)}


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


# -- the machine -------------------------------------------------------------------
