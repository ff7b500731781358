"""Part 4: the test/dynamo suite with ``pytest-xdist -n 2`` (and ``--dist loadfile``) against the suite's ``-n 0``.

Runs right after :mod:`benchmarks.suite` (``--only suite`` runs both), whose
``-n 0`` run it compares with.
"""

from __future__ import annotations

from benchmarks.suite import describe, ours_args, timed

RESULT = "xdist"
TARGETS = {"xdist_speedup": (">=", 1.6)}


def bench(args, env: dict[str, str], plain_run: dict) -> dict:
    """``plain_run``: the suite's ``-n 0`` run (:func:`benchmarks.suite.bench`)."""
    ours = ours_args(args)
    plain = describe(plain_run)
    two = timed("npu_lazy_n2", ours, ["-n", "2"], env)
    xdist = {"n0_s": round(plain_run["wall_s"], 2), "n2_s": round(two["wall_s"], 2), "n2": describe(two),
             "n0_cpu_s": plain["cpu_s"], "n0_cores_busy": plain["cores_busy"]}
    xdist["speedup"] = round(xdist["n0_s"] / xdist["n2_s"], 2)
    if not args.quick:
        loadfile = timed("npu_lazy_n2_loadfile", ours, ["-n", "2", "--dist", "loadfile"], env)
        xdist["n2_loadfile_s"] = round(loadfile["wall_s"], 2)
        xdist["n2_loadfile"] = describe(loadfile)
        xdist["speedup_loadfile"] = round(xdist["n0_s"] / xdist["n2_loadfile_s"], 2)
    return xdist


def figures(xdist: dict) -> dict:
    return {"xdist_speedup": xdist["speedup"]} if "speedup" in xdist else {}


def markdown(xdist: dict) -> list[str]:
    out = ["### 4. pytest-xdist on the test/dynamo suite", ""]
    out.append("| workers | wall s | CPU s (cores busy) |")
    out.append("| --- | ---: | ---: |")
    out.append(f"| `-n 0` | {xdist['n0_s']:.1f} | {xdist.get('n0_cpu_s', 0):.0f} ({xdist.get('n0_cores_busy', 0):.2f}) |")
    out.append(f"| `-n 2` | {xdist['n2_s']:.1f} | {xdist['n2']['cpu_s']:.0f} ({xdist['n2']['cores_busy']:.2f}) |")
    out.append(f"| **speedup** (`-n 0` / `-n 2`) | **{xdist['speedup']:.2f}x** | |")
    if "n2_loadfile_s" in xdist:
        lf = xdist["n2_loadfile"]
        out.append(f"| `-n 2 --dist loadfile` | {xdist['n2_loadfile_s']:.1f} | {lf['cpu_s']:.0f} ({lf['cores_busy']:.2f}) |")
        out.append(f"| speedup with `--dist loadfile` | {xdist['speedup_loadfile']:.2f}x | |")
    out.append("")
    return out
