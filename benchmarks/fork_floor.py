"""The physical floor under a zygote's per-test cost: fork a process holding pytest and a preload (torch, torch_npu).

Measured in a fresh interpreter that imports what a zygote holds (the
import recorder, pytest, torch and torch_npu) and freezes its heap as a
zygote does: fork + ``os._exit`` + ``waitpid``, and fork until the child runs.
Part of the trivial tests' section (:mod:`benchmarks.trivial`).
"""

from __future__ import annotations

import subprocess
import sys

from benchmarks.common import REPO, log

SCRIPT = """
import gc, os, statistics, sys, time
from pytest_npu_lazy.probe.recorder import RECORDER
RECORDER.install(phase="pytest")
import pytest  # what a zygote holds besides the preload
import pytest_npu_lazy.plugin  # the plugin, as every zygote holds it
for name in sys.argv[2].split(","):
    if name:
        __import__(name)
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


def bench(args, env: dict[str, str], preload: tuple[str, ...] = ("torch", "torch_npu")) -> dict:
    """The floor in a process that imported ``preload`` (a zygote's baseline) besides pytest and the plugin."""
    env = dict(env, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    reps = 5 if args.quick else 50
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(reps), ",".join(preload)], env=env,
                            capture_output=True, text=True, cwd=REPO)
    line = next((text for text in result.stdout.splitlines() if text.startswith("FORK")), None)
    if result.returncode != 0 or line is None:
        return {"error": f"fork floor script failed: {result.stderr[-1500:]}"}
    _, round_trip, alive = line.split()
    floor = {"reps": reps, "preload": list(preload), "fork_exit_reap_ms": round(float(round_trip) * 1000, 2),
             "fork_to_running_child_ms": round(float(alive) * 1000, 2)}
    log(f"fork floor: fork+exit+reap {floor['fork_exit_reap_ms']} ms, fork to a running child "
        f"{floor['fork_to_running_child_ms']} ms")
    return floor


def markdown(floor: dict) -> list[str]:
    if "fork_exit_reap_ms" not in floor:
        return []
    holding = ", ".join(["pytest", *floor.get("preload", ["torch", "torch_npu"])])
    return [f"Physical floor, in a process holding {holding} (median of {floor['reps']}): "
            f"fork + `os._exit` + `waitpid` {floor['fork_exit_reap_ms']:.1f} ms; fork until the child "
            f"runs (writes to a pipe) {floor['fork_to_running_child_ms']:.1f} ms.", ""]
