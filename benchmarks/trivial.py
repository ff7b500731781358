"""Part 1: the marginal cost per trivial test (``def test_i(): pass``) under five kinds of isolation.

None (plain pytest, a conftest holding torch and torch_npu); pytest-forked,
which forks that polluted pytest process; our zygote; our spawn mode; and a
subprocess per test that imports torch and torch_npu, the way torch_npu's
own tests work. A test's marginal cost is the time from its logstart to the
next test's logstart in the pytest process (:func:`benchmarks.common.per_test`);
the physical floor under it is :mod:`benchmarks.fork_floor`'s.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks import fork_floor
from benchmarks.common import FORKED_VERSION, forked_python, log, per_test, run_pytest, run_summary

RESULT = "trivial"
TARGETS = {"zygote_median_ms": ("<=", 25.0), "subprocess_over_zygote": (">=", 100.0)}

#: the code string of a torch_npu-style test, and of the trivial subprocess-per-test variant
IMPORT_CODE = "import torch, torch_npu"

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


def forked_in_main_venv(folder: Path, env: dict[str, str]) -> str | None:
    """Does pytest-forked work with this venv's pytest? None if it does, else what goes wrong."""
    run = run_pytest([str(folder / "test_trivial_000.py"), "-p", "no:npu_lazy", "--forked"], cwd=folder, env=env)
    if run["returncode"] == 0:
        return None
    import pytest

    line = next((text for text in run["output_tail"].splitlines() if "EXITED" in text or "Error" in text), "")
    return (f"pytest-forked {FORKED_VERSION} fails every test on pytest {pytest.__version__} "
            f"(exit status {run['returncode']}; {line.strip()[:200]})")


def bench(args, env: dict[str, str], work: Path) -> dict:
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
    results["fork_floor"] = fork_floor.bench(args, env)
    variants = results["variants"]

    def median(name):
        return variants.get(name, {}).get("marginal", {}).get("median_ms")

    ratios = {}
    for name in ("none", "forked", "spawn", "subprocess"):
        if median(name) and median("zygote"):
            ratios[f"{name}_over_zygote"] = round(median(name) / median("zygote"), 2)
    results["ratios"] = ratios
    return results


def figures(trivial: dict) -> dict:
    values = {}
    zygote = trivial.get("variants", {}).get("zygote", {}).get("marginal", {})
    if zygote:
        values["zygote_median_ms"] = zygote["median_ms"]
    if "subprocess_over_zygote" in trivial.get("ratios", {}):
        values["subprocess_over_zygote"] = trivial["ratios"]["subprocess_over_zygote"]
    return values


def markdown(trivial: dict) -> list[str]:
    out = ["### 1. Marginal cost per trivial test", ""]
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
    for entry in trivial["variants"].values():
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
    out.extend(fork_floor.markdown(trivial.get("fork_floor", {})))
    return out
