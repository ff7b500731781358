"""torch_npu's test_compile_trigger.py as it is, against the same file with its helper calling run_python.

The file belongs to torch_npu (Ascend/pytorch, ``test/dynamo/test_compile_trigger.py``)
and is not part of this repository: ``python -m benchmarks --compile-trigger PATH``
(or ``NPU_LAZY_BENCH_COMPILE_TRIGGER=PATH``) names a copy. It is copied into a
temporary folder twice: unchanged, and with the one ``subprocess.run([sys.executable,
"-c", CODE], ...)`` call of its ``run_in_subprocess`` helper rewritten into
``run_python(CODE, env=..., timeout=..., preload=["torch"])``, found by parsing
the file, so nothing else changes. Both run under pytest in the same benchmark
run, one after the other, timed per test by benchmarks/timing.py; the per-test
outcomes (subtests included) must be identical.
"""

from __future__ import annotations

import ast
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENV = "NPU_LAZY_BENCH_COMPILE_TRIGGER"
RESULT = "compile_trigger"
#: judged in its own section (``TARGET``), not in the report's table of targets
TARGETS: dict = {}
HELPER = "run_in_subprocess"
PRELOAD = ["torch"]
TARGET = 3.0
#: the keywords of subprocess.run that run_python takes as they are
PASSED_ON = ("env", "timeout", "cwd", "input")


class RewriteError(Exception):
    """The file does not have the helper this benchmark rewrites."""


def rewrite(source: str, preload: list[str] = PRELOAD) -> str:
    """The same source, with the helper's ``subprocess.run`` call turned into ``run_python``."""
    tree = ast.parse(source)
    call = _helper_call(tree)
    command = call.args[0]
    if not (isinstance(command, ast.List) and len(command.elts) == 3
            and ast.unparse(command.elts[0]) == "sys.executable" and ast.unparse(command.elts[1]) == "'-c'"):
        raise RewriteError(f"{HELPER}'s subprocess.run does not run [sys.executable, '-c', CODE]")
    keywords = {k.arg: k.value for k in call.keywords}
    for flag in ("capture_output", "text"):
        if flag not in keywords or ast.unparse(keywords[flag]) != "True":
            raise RewriteError(f"{HELPER}'s subprocess.run lacks {flag}=True, which run_python always implies")
    unknown = set(keywords) - {"capture_output", "text", *PASSED_ON}
    if unknown:
        raise RewriteError(f"{HELPER}'s subprocess.run passes {sorted(unknown)}, which run_python does not take")
    arguments = [ast.get_source_segment(source, command.elts[2])]
    arguments += [f"{name}={ast.get_source_segment(source, keywords[name])}" for name in PASSED_ON if name in keywords]
    arguments.append(f"preload={preload!r}")
    replacement = f"run_python({', '.join(arguments)})"
    lines = source.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: call.lineno - 1]) + call.col_offset
    end = sum(len(line) for line in lines[: call.end_lineno - 1]) + call.end_col_offset
    rewritten = source[:start] + replacement + source[end:]
    last_import = max(node.end_lineno for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom)))
    out = rewritten.splitlines(keepends=True)
    out.insert(last_import, "from pytest_npu_lazy import run_python\n")
    return "".join(out)


def _helper_call(tree: ast.Module) -> ast.Call:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == HELPER:
            calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and ast.unparse(c.func) == "subprocess.run"]
            if len(calls) != 1:
                raise RewriteError(f"{HELPER} has {len(calls)} subprocess.run calls; expected exactly one")
            return calls[0]
    raise RewriteError(f"no function {HELPER}() in the file: is it torch_npu's test_compile_trigger.py?")


NAME = "test_compile_trigger.py"


def prepare(path: Path, work: Path) -> dict[str, Path]:
    """Two folders, each holding the file as test_compile_trigger.py: 'unchanged' and 'run_python'."""
    source = path.read_text(encoding="utf-8")
    folders = {}
    for variant, text in (("unchanged", source), ("run_python", rewrite(source))):
        folder = work / variant
        folder.mkdir(parents=True)
        (folder / NAME).write_text(text, encoding="utf-8")
        (folder / "pytest.ini").write_text("[pytest]\n")
        folders[variant] = folder
    return folders


def bench(path: Path, env: dict[str, str], work: Path, run_pytest, log, warmup: bool, quick: bool = False) -> dict:
    """Run both variants with the same pytest command; per-test outcomes and times side by side."""
    folders = prepare(path, work)
    args = ["-p", "npu_lazy", NAME]
    if warmup:  # Inductor's on-disk cache: the first run of either variant would pay for filling it
        log("compile_trigger: warm-up run of the run_python variant (not timed)")
        run_pytest(args, cwd=folders["run_python"], env=env)
    runs = {}
    for variant in ("unchanged", "run_python"):
        log(f"compile_trigger/{variant}: pytest {' '.join(args)}")
        runs[variant] = run_pytest(args, cwd=folders[variant], env=env)
        log(f"compile_trigger/{variant}: {runs[variant]['wall_s']:.1f} s")
    result = {"file": NAME, "preload": PRELOAD, "command": "pytest " + " ".join(args), "variants": {}}
    for variant, run in runs.items():
        timing = run["timing"] or {}
        result["variants"][variant] = {
            "wall_s": round(run["wall_s"], 2), "cpu_s": round(run["cpu_s"], 2), "returncode": run["returncode"],
            "outcomes": timing.get("outcomes", {}),
            "per_test": {nodeid.split("::", 1)[-1]: reports for nodeid, reports in timing.get("per_test", {}).items()},
            "spans_s": {t[0].split("::", 1)[-1]: round(t[2] - t[1], 2) for t in timing.get("tests", [])
                        if t[2] is not None},
        }
        if timing == {}:
            result["variants"][variant]["error"] = run["output_tail"][-2000:]
    plain, fast = result["variants"]["unchanged"], result["variants"]["run_python"]
    result["same_outcomes"] = bool(plain["per_test"]) and plain["per_test"] == fast["per_test"]
    result["speedup"] = round(plain["wall_s"] / fast["wall_s"], 2) if fast["wall_s"] else None
    log("compile_trigger: what preload=['torch'] saves per call (cold `import torch` against a fork)")
    result.update(savings(folders["unchanged"] / NAME, env, repeats=1 if quick else 3))
    saved = result["calls"] * (result["cold_import_s"] - result["fork_s"])
    if saved < plain["wall_s"]:
        result["expected_speedup"] = round(plain["wall_s"] / (plain["wall_s"] - saved), 2)
    return result


COUNT_CALLS = """
import os, sys, unittest, importlib.util
spec = importlib.util.spec_from_file_location("counted", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
calls = []
for value in list(vars(module).values()):
    if isinstance(value, type) and issubclass(value, unittest.TestCase) and hasattr(value, "%s"):
        value.%s = lambda self, code, *args, **kwargs: calls.append(code)
        tests = unittest.defaultTestLoader.loadTestsFromTestCase(value)
        unittest.TextTestRunner(stream=open(os.devnull, "w")).run(tests)
print(len(calls))
""" % (HELPER, HELPER)


def savings(path: Path, env: dict[str, str], repeats: int) -> dict:
    """How many code strings the file runs, and what each costs before its own work, both ways.

    The calls are counted by running the tests with the helper replaced by a
    counter; the cold cost is ``python -c "import torch"`` (start, import,
    teardown), the fork cost ``run_python("pass", preload=["torch"])`` from a
    zygote that is already up, both under the helper's environment.
    """
    from pytest_npu_lazy import run_python
    from pytest_npu_lazy.python_c import pool as pypool

    env = dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    counted = subprocess.run([sys.executable, "-c", COUNT_CALLS, str(path)], env=env, capture_output=True,
                             text=True, timeout=600)
    cold = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, check=True)
        cold.append(time.perf_counter() - started)
    owner = object()
    pypool.activate(owner)
    try:
        run_python("pass", env=env, preload=PRELOAD)  # starts the zygote: not part of a call's cost
        forks = []
        for _ in range(repeats * 3):
            started = time.perf_counter()
            run_python("pass", env=env, preload=PRELOAD)
            forks.append(time.perf_counter() - started)
    finally:
        pypool.deactivate(owner)
    return {"calls": int(counted.stdout.split()[-1]) if counted.returncode == 0 else 0,
            "cold_import_s": round(statistics.median(cold), 3), "fork_s": round(statistics.median(forks), 3)}


def _outcome_text(reports: list) -> str:
    """'passed', or 'failed; subtests: 2 passed, 1 failed [name=x]' for one test's reports."""
    own = [r[2] for r in reports if not r[1]]
    subs = [r for r in reports if r[1]]
    text = "/".join(dict.fromkeys(own)) or "-"
    if subs:
        failed = [r[1] for r in subs if r[2] != "passed"]
        text += f"; subtests {len(subs) - len(failed)} passed" + (f", failed: {', '.join(failed)}" if failed else "")
    return text


def figures(result: dict) -> dict:
    return {}


def markdown(result: dict) -> list[str]:
    plain, fast = result["variants"]["unchanged"], result["variants"]["run_python"]
    out = ["### 5. torch_npu's test_compile_trigger.py: subprocess.run against run_python", ""]
    out.append(f"`{result['command']}` in two folders: the file unchanged, and the same file with its "
               f"`{HELPER}` helper calling `run_python(..., preload={result['preload']!r})`.")
    out.append("")
    out.append("| variant | wall s | CPU s | outcomes |")
    out.append("| --- | ---: | ---: | --- |")
    for name, entry in (("unchanged (`subprocess.run`)", plain), ("`run_python(..., preload=['torch'])`", fast)):
        counts = ", ".join(f"{n} {k}" for k, n in sorted(entry["outcomes"].items()))
        out.append(f"| {name} | {entry['wall_s']:.1f} | {entry['cpu_s']:.0f} | {counts} |")
    met = "met" if (result["speedup"] or 0) >= TARGET else "**not met**"
    out.append(f"| **speedup** | **{result['speedup']}x** (target >= {TARGET:g}x: {met}) | | "
               f"same per-test outcomes: {result['same_outcomes']} |")
    out.append("")
    if "calls" in result:
        out.append(f"The file runs {result['calls']} code strings. Before its own work, each costs a cold "
                   f"`python -c \"import torch\"` ({result['cold_import_s']:.2f} s here, start to exit) as a "
                   f"subprocess and a fork ({result['fork_s']:.2f} s for `pass`) with run_python: saving that on "
                   "every call, and nothing else, gives "
                   + (f"{result['expected_speedup']}x." if "expected_speedup" in result
                      else "more than the unchanged run took."))
        out.append("")
    out.append("| test | unchanged | run_python | unchanged s | run_python s |")
    out.append("| --- | --- | --- | ---: | ---: |")
    for name in sorted(set(plain["per_test"]) | set(fast["per_test"])):
        out.append(f"| `{name}` | {_outcome_text(plain['per_test'].get(name, []))} | "
                   f"{_outcome_text(fast['per_test'].get(name, []))} | {plain['spans_s'].get(name, 0):.1f} | "
                   f"{fast['spans_s'].get(name, 0):.1f} |")
    out.append("")
    return out
