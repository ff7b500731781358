"""One pytest run of the suite under a plan: started in its own process group, bounded, read back.

Every run the mutation pass makes (the coverage pass, each mutant) goes
through :func:`run_suite`: the hook's folder first on ``PYTHONPATH``, the plan
in the environment, the result recorder loaded, and a wall-clock limit after
which the whole process group is killed, so no zygote or child outlives it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..probe import inductor_cache
from .config import Config
from .hook import ENV, Plan
from .pytest_plugin import RESULTS_ENV, TIMEOUTS_ENV

SITE_DIR = Path(__file__).with_name("site")

#: Inductor's graph-level caches miss in every run (a cache-key tag of the run's own): their keys cover torch's
#: sources, not torch_npu's, so a mutant of torch_npu's lowerings or codegen would be served the graph compiled
#: before it and "survive" without ever being compiled (docs/inductor-cache.md). Missing, not off: with the caches
#: off the key is never computed, and computing it initialises the NPU (torch_npu's get_system), which a test
#: pins. The kernel caches are used: keyed by the generated source itself, a mutant that changes a kernel changes
#: its key, and one that does not may reuse it.
GRAPH_CACHES = "cold"
#: what pytest says of a plugin imported before it could be rewritten (the start of its message)
REWRITE_WARNING = "Module already imported so cannot be rewritten; pytest_npu_lazy"


@dataclass
class SuiteRun:
    """What one pytest run did, as the recorder and the hook's logs say."""

    returncode: int | None  #: None: killed at the wall-clock limit
    seconds: float
    events: list[dict]
    applied_in: int  #: processes that applied the mutant (0: the mutated module was never imported)
    hits: list[tuple[float, bool, str]] = field(default_factory=list)  #: the coverage pass's (time, in a test, function)
    output_tail: str = ""
    #: definitions whose changed text did not fit their lines: code reading their source saw the original
    unplaced: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[dict]:
        return [e for e in self.events if e["event"] == "report" and e["outcome"] == "failed"]

    @property
    def windows(self) -> list[dict]:
        return [e for e in self.events if e["event"] == "window" and e.get("start") is not None]


def run_suite(config: Config, plan: Plan, tests: list[str], extra_args: list[str], *,
              wall: float, test_limits: dict[str, float] | None = None, python: str = sys.executable) -> SuiteRun:
    """One pytest run of ``tests`` under ``plan``, killed at ``wall`` seconds; ``test_limits`` (node id ->
    seconds) bound each isolated test below the configured test timeout."""
    with tempfile.TemporaryDirectory(prefix="npu-lazy-mutate-") as work:
        results = os.path.join(work, "results.jsonl")
        log_dir = os.path.join(work, "log")
        os.mkdir(log_dir)
        plan = Plan(plan.mode, plan.targets, plan.mutant_id, log_dir, plan.extra)
        env = dict(os.environ)
        env[ENV] = plan.to_json()
        env[RESULTS_ENV] = results
        if test_limits:
            env[TIMEOUTS_ENV] = os.path.join(work, "timeouts.json")
            with open(env[TIMEOUTS_ENV], "w") as handle:
                json.dump(test_limits, handle)
        env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), *filter(None, [env.get("PYTHONPATH")])])
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.update(inductor_cache.cold_key_tag(env, owner="mutant"))
        command = [python, "-m", "pytest", "-p", "pytest_npu_lazy.mutate.pytest_plugin", "-p", "no:cacheprovider",
                   # the mutation hook imports this package as the interpreter starts (site/sitecustomize.py),
                   # before pytest can mark the plugin for assertion rewriting, which it then says in a warning
                   # per process; the plugin has no assert for a test to read
                   "-W", f"ignore:{REWRITE_WARNING}:pytest.PytestAssertRewriteWarning",
                   "-p", "no:randomly", "-q", "--no-header", "-o", "console_output_style=classic",
                   f"--npu-lazy-timeout={config.test_timeout:g}", *config.pytest_args, *extra_args, *tests]
        output = os.path.join(work, "output.txt")
        started = time.monotonic()
        with open(output, "wb") as sink:
            process = subprocess.Popen(command, cwd=config.root, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                returncode = process.wait(timeout=wall)
            except subprocess.TimeoutExpired:
                returncode = None
            finally:
                _kill_group(process)
        seconds = time.monotonic() - started
        events = []
        if os.path.exists(results):
            with open(results) as handle:
                events = [json.loads(line) for line in handle if line.strip()]
        applied = sum(1 for name in os.listdir(log_dir) if name.startswith("applied-"))
        hits: list[tuple[float, bool, str]] = []
        unplaced: set[str] = set()
        for name in os.listdir(log_dir):
            if name.startswith("unplaced-"):
                with open(os.path.join(log_dir, name)) as handle:
                    unplaced.update(line.strip() for line in handle if line.strip())
            if name.startswith("hits-"):
                with open(os.path.join(log_dir, name)) as handle:
                    for line in handle:
                        stamp, in_test, function = line.strip().split(" ", 2)
                        hits.append((float(stamp), in_test == "1", function))
        with open(output, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(handle.tell() - 4000, 0))
            tail = handle.read().decode("utf-8", "replace")
        return SuiteRun(returncode, seconds, events, applied, hits, tail, sorted(unplaced))


def _kill_group(process: subprocess.Popen) -> None:
    """The run's whole process group goes, and so does anything it left in a group of its own.

    A test child runs in its own process group; killed at the wall-clock limit, pytest cannot end it. The
    runner is a subreaper (:func:`become_subreaper`), so such orphans become its children: they go too.
    """
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
    for pid in _orphans():
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def become_subreaper() -> bool:
    """Adopt the orphans of every run (Linux PR_SET_CHILD_SUBREAPER), so none outlives the pass."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _orphans() -> list[int]:
    """This process's children: after a run ends, anything left is an adopted orphan."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == me:
            found.append(int(entry))
    return found
