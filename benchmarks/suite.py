"""Part 2: the test/dynamo suite against benchmarks/subprocess_suite, the same checks as ``python -c CODE`` strings.

Both run sequentially (``-n 0``) after an untimed warm-up run that fills the
Inductor cache both use; the table compares wall and CPU time, per file, and
three single checks. Its ``-n 0`` run is also the baseline of
:mod:`benchmarks.xdist`.
"""

from __future__ import annotations

from benchmarks.common import REPO, log, loadavg, outcomes, run_pytest, run_summary

RESULT = "suite"
TARGETS = {"suite_speedup": (">=", 10.0)}
SUBPROCESS_SUITE = "benchmarks/subprocess_suite"
DYNAMO_SUITE = "test/dynamo"

#: one check of each kind (imports only, wrapper creation, a first compiled call), shown one by one
THREE_CHECKS = ("test_import.py::test_import_torch_npu_defers_compiler_stack",
                "test_wrapper.py::test_wrapper_runs_dynamo_setup_only[plain]",
                "test_first_call.py::test_compiled_matches_eager[sin_cos]")


def ours_args(args) -> list[str]:
    """The pytest arguments of test/dynamo with the plugin (this part's and xdist's runs)."""
    return ["-p", "npu_lazy", *args.suite_selection(DYNAMO_SUITE)]


def describe(run: dict) -> dict:
    """One suite run: wall, CPU, outcomes, per-file and per-test spans."""
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


def timed(name: str, selection: list[str], workers: list[str], env: dict[str, str]) -> dict:
    log(f"suite/{name}: pytest {' '.join(workers)} {' '.join(selection)}")
    run = run_pytest([*selection, *workers], cwd=REPO, env=env)
    log(f"suite/{name}: {run['wall_s']:.1f} s, {run_summary(run)}, load {loadavg()}")
    return run


def bench(args, env: dict[str, str]) -> tuple[dict, dict]:
    """The suite's result, and its ``-n 0`` run for :mod:`benchmarks.xdist`."""
    ours = ours_args(args)
    if not args.quick and not args.no_warmup:
        log("suite: warm-up run of test/dynamo (fills the Inductor cache both suites use; not timed)")
        run_pytest([*ours, "-n", "0", "-x"], cwd=REPO, env=env)
    plain = timed("npu_lazy", ours, ["-n", "0"], env)
    theirs = timed("subprocess", ["-p", "no:npu_lazy", *args.suite_selection(SUBPROCESS_SUITE)], ["-n", "0"], env)
    suite = {"npu_lazy": describe(plain), "subprocess": describe(theirs),
             "selection": args.suite_selection(DYNAMO_SUITE)}
    suite["speedup"] = round(theirs["wall_s"] / plain["wall_s"], 2)
    suite["same_outcomes"] = outcomes(plain) == outcomes(theirs)
    # the tests' own work (compiling, first calls) is the same in both suites: even if pytest-npu-lazy
    # cost nothing at all, the speedup could not exceed the subprocess wall over the time inside our tests
    if suite["npu_lazy"]["sum_of_test_spans_s"]:
        suite["speedup_ceiling"] = round(suite["subprocess"]["wall_s"] / suite["npu_lazy"]["sum_of_test_spans_s"], 2)
    return suite, plain


def figures(suite: dict) -> dict:
    return {"suite_speedup": suite["speedup"]} if "speedup" in suite else {}


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


def markdown(suite: dict) -> list[str]:
    out = ["### 2. The test/dynamo suite against the same checks as subprocess code strings", ""]
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
    return out
