"""Part 3: the import recorder's overhead on ``import torch, torch_npu``, in fresh processes, with and without it.

Runs alternate (off, on; on, off; ...) so that a burst of other work on the
machine falls on both sides alike; the medians are compared.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

from benchmarks.common import REPO, log

RESULT = "recorder"
TARGETS = {"recorder_overhead_pct": ("<=", 5.0)}

SCRIPT = """
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


def bench(args, env: dict[str, str]) -> dict:
    env = dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    times: dict[str, list[float]] = {"off": [], "on": []}
    for index in range(args.recorder_runs):
        order = ("off", "on") if index % 2 == 0 else ("on", "off")  # interleaved, alternating order
        for mode in order:
            result = subprocess.run([sys.executable, "-c", SCRIPT, mode], env=env,
                                    capture_output=True, text=True, cwd=REPO)
            line = next((text for text in result.stdout.splitlines() if text.startswith("IMPORT_SECONDS")), None)
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


def figures(recorder: dict) -> dict:
    return {"recorder_overhead_pct": recorder["overhead_pct"]} if "overhead_pct" in recorder else {}


def markdown(recorder: dict) -> list[str]:
    if "error" in recorder:
        return []
    return ["### 3. Import recorder overhead", "",
            f"`import torch, torch_npu` in a fresh process, {recorder['runs']} runs each, interleaved.", "",
            "| recorder | median s |", "| --- | ---: |",
            f"| off | {recorder['median_off_s']:.3f} |",
            f"| on (`RECORDER.install()` first) | {recorder['median_on_s']:.3f} |",
            f"| **overhead** | **{recorder['overhead_pct']:+.1f} %** |", ""]
