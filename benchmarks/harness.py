"""The benchmark harness: ``python -m benchmarks [--quick] [--only PARTS]``.

It runs pytest (with the timing plugin, benchmarks/timing.py) and other
processes, turns their moments into statistics, records the machine, runs
the parts asked for, judges their figures against the targets, and prints
one markdown report. Each part is a module of its own with ``bench()``
(measure, return plain data) and ``markdown()`` (its section of the report):

1. :mod:`benchmarks.trivial`: the marginal cost per trivial test under five kinds
   of isolation (none; pytest-forked; our zygote; our spawn mode; a
   subprocess per test that imports torch and torch_npu, the way torch_npu's
   own tests work), with :mod:`benchmarks.fork_floor`, the physical floor;
2. :mod:`benchmarks.suite`: the wall time of the test/dynamo suite against
   benchmarks/subprocess_suite, the same checks written as one ``python -c CODE``
   per test;
3. :mod:`benchmarks.recorder`: the import recorder's overhead on ``import torch, torch_npu``;
4. :mod:`benchmarks.xdist`: that suite with ``pytest-xdist -n 2`` against ``-n 0``
   (``--only suite`` runs both);
5. :mod:`benchmarks.compile_trigger`: torch_npu's test_compile_trigger.py as it is
   and with its helper calling run_python, when its path is given;
6. :mod:`benchmarks.module_zygotes` (``--only modules``): isolation at fork cost;
7. :mod:`benchmarks.interpreter` (``--only interpreter``): Triton's interpreter under compute mode against the
   interpreter as shipped and NumPy's vectorised pass;
8. :mod:`benchmarks.xdist_isolation` (``--only xdist_isolation``): every test isolated under pytest-xdist,
   serially and at 8 and 16 workers, against in-process and pytest-forked, with the fork floor.

Each part names its entry in the results (``RESULT``), its ``TARGETS`` and
the ``figures()`` judged against them. The harness imports the parts when
it runs them; they import their helpers from :mod:`benchmarks.common`, never the harness.
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
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import (DEFAULT_FORKED_VENV, FORKED_PYTEST, RESULTS, base_env, forked_python, loadavg, log,
                               make_forked_venv, per_test, run_pytest)

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
        memory = next(text.split()[1] for text in Path("/proc/meminfo").read_text().splitlines()
                      if text.startswith("MemTotal"))
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


def machine_markdown(results: dict) -> list[str]:
    m = results["machine"]
    out = [f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Linux {m['kernel']}; "
           f"Python {m['python']}; torch {m['torch']}, torch_npu {m['torch_npu']} (CANN {m['cann']}), "
           f"triton-ascend {m['triton_ascend']}; pytest {m['pytest']}, pytest-xdist {m['pytest_xdist']}, "
           f"pytest-forked {m['pytest_forked']}; PYTHONDONTWRITEBYTECODE={m['PYTHONDONTWRITEBYTECODE']}."]
    load = results["load"]
    out.append(f"Load average (1, 5, 15 min) at start {load['start']}, at end {load['end']}"
               + (" (other work shared the CPUs: numbers are pessimistic)" if load["start"] and load["start"][0] > 0.5 else "")
               + ".")
    out.append(f"Command: `{results['command']}`" + (" (quick mode: tiny inputs, numbers mean nothing)" if results["quick"] else ""))
    out.append("")
    return out


# -- judging ------------------------------------------------------------------------

def judge(results: dict, parts) -> dict:
    """Each figure against its target, in the order of ``parts`` (their ``TARGETS``, and ``figures()`` of
    their result, ``results[part.RESULT]``); a part that did not run gives no verdict."""
    verdicts = {}
    for part in parts:
        if part.RESULT not in results:
            continue  # that part did not run
        values = part.figures(results[part.RESULT])
        for name, (op, target) in part.TARGETS.items():
            value = values.get(name)
            met = None if value is None else (value <= target if op == "<=" else value >= target)
            verdicts[name] = {"value": value, "target": f"{op} {target:g}", "met": met}
    return verdicts


def targets_markdown(verdicts: dict) -> list[str]:
    out = ["### Targets", "", "| figure | value | target | met |", "| --- | ---: | --- | --- |"]
    for name, verdict in verdicts.items():
        met = {True: "yes", False: "**no**", None: "n/a"}[verdict["met"]]
        out.append(f"| {name} | {verdict['value']} | {verdict['target']} | {met} |")
    return out


# -- the command line -----------------------------------------------------------------

def parse_args(argv: list[str] | None, variants: dict, compile_trigger_env: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny inputs, for the smoke test")
    parser.add_argument("--tests", type=int, help="trivial tests per cheap variant (default 100)")
    parser.add_argument("--slow-tests", type=int, help="trivial tests for spawn and subprocess (default 100)")
    parser.add_argument("--per-module", type=int, help="trivial tests per module (default 10)")
    parser.add_argument("--repeats", type=int, help="runs of each cheap trivial variant, pooled (default 3)")
    parser.add_argument("--recorder-runs", type=int, help="fresh imports with and without the recorder (default 15)")
    parser.add_argument("--only", default="trivial,suite,recorder,compile_trigger",
                        help="comma-separated parts: trivial, suite (with xdist), recorder, compile_trigger, "
                             "modules (isolation at fork cost: module zygotes against pytest-forked; not by default), "
                             "selection_map (taking a selection map: cost per test; not by default), "
                             "interpreter, xdist_isolation (not by default)")
    parser.add_argument("--xdist-tests", type=int, help="trivial tests of the xdist_isolation part (default 1000; "
                        "the torch suite has half)")
    parser.add_argument("--xdist-modules", type=int, help="modules of those tests (default 100; the torch suite half)")
    parser.add_argument("--xdist-workers", help="comma-separated worker counts besides serial (default: 8 and 16 "
                        "where the machine has the cores, else its core count)")
    parser.add_argument("--compile-trigger", default=os.environ.get(compile_trigger_env),
                        help="torch_npu's test/dynamo/test_compile_trigger.py (from Ascend/pytorch), to time as it "
                             f"is and with its helper calling run_python (default: ${compile_trigger_env}; "
                             "without it, that part is skipped)")
    parser.add_argument("--variants", default=",".join(variants), help="trivial variants to measure")
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
    args.xdist_tests = args.xdist_tests or (4 if quick else 1000)
    args.xdist_modules = args.xdist_modules or (2 if quick else 100)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = set(args.variants) - set(variants)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(variants)}")
    if quick:
        args.no_forked_venv = True  # use a side venv if there is one, never build it in the smoke test

    def suite_selection(root: str) -> list[str]:
        if quick:  # one cheap test of each suite
            return [f"{root}/test_import.py::test_dynamo_post_import_trigger_is_installed"]
        return [root]

    args.suite_selection = suite_selection
    return args


def main(argv: list[str] | None = None) -> int:
    from benchmarks import (compile_trigger, interpreter, module_zygotes, recorder, selection_map, suite, trivial, xdist,
                            xdist_isolation)

    args = parse_args(argv, trivial.VARIANTS, compile_trigger.ENV)
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
            results["trivial"] = trivial.bench(args, env, work)
        if "recorder" in args.parts:
            results["recorder"] = recorder.bench(args, env)
        if "suite" in args.parts:  # with xdist, which compares its -n 2 runs with the suite's -n 0 run
            results["suite"], plain_run = suite.bench(args, env)
            results["xdist"] = xdist.bench(args, env, plain_run)
        if "modules" in args.parts:
            results["modules"] = module_zygotes.bench(args, env, work, run_pytest, per_test, forked_python, log)
        if "interpreter" in args.parts:
            results["interpreter"] = interpreter.bench(args, env)
        if "xdist_isolation" in args.parts:
            results["xdist_isolation"] = xdist_isolation.bench(args, env, work)
        if "selection_map" in args.parts:
            results["selection_map"] = selection_map.bench(args, env, work, run_pytest, per_test, log)
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
    sections = (trivial, suite, recorder, xdist, compile_trigger, module_zygotes, selection_map,
                interpreter, xdist_isolation)  # the report's order
    results["targets"] = judge(results, sections)
    table = markdown(results, sections)
    results["markdown"] = table
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    print(table)
    log(f"results written to {path}")
    return 0


def markdown(results: dict, parts) -> str:
    """The whole report: the machine, the section of each part that ran (``part.markdown(its result)``), the
    targets."""
    out = machine_markdown(results)
    for part in parts:
        if results.get(part.RESULT):
            out.extend(part.markdown(results[part.RESULT]))
    out.extend(targets_markdown(results["targets"]))
    return "\n".join(out) + "\n"
