"""Inductor's on-disk caches: the state each isolated test starts with, and the state its compilations met.

Inductor keeps compiled graphs on disk (its FX graph cache and AOTAutograd's
cache, under ``$TORCHINDUCTOR_CACHE_DIR``, else ``/tmp/torchinductor_<user>``)
and serves them to any later process whose key matches. Two things follow for
a deferred-loading guarantee (docs/inductor-cache.md):

- a first compiled call served from a warm graph cache skips Inductor's
  lowering and codegen: it loads 77 fewer modules than on a cold cache (torch
  2.13, CPU and NPU path alike), so a guarantee about it passes or fails by
  the order tests ran in, or by what an earlier run left behind;
- the key covers torch's sources, not torch_npu's: a graph compiled before an
  edit of torch_npu's lowerings or codegen is served after it.

So isolated tests get one of three policies (``--npu-lazy-inductor-cache``,
env, ini, or the marker's ``inductor_cache=``):

``cold`` (default)
    Every graph lookup of the test misses: a tag of its own joins the graph
    caches' key (``torch.compiler.config.cache_key_tag``, which the FX graph,
    AOTAutograd and profile-guided shape caches all hash). The first call
    then does all a first call on a cold cache does: computes the key
    (torch_npu's ``get_system``, which initialises an NPU, included),
    lowers, generates, writes the entry. Kernels are cached in a directory
    of this run (shared by its xdist workers, removed at its end) and built
    once per run: their key is their own source, so nothing stale is served.
``empty``
    An empty cache directory per test: kernels built too (on the CPU path a
    C++ build, several seconds, per compiling test).
``shared``
    Nothing changed: the caches a user's process would use.

Tests that run in the pytest process always share its caches. Nothing here
imports torch; :func:`apply` runs in the test's child, before the test.

What a test met is read from torch's own cache counters (never importing
anything for it: without ``torch._dynamo.utils`` loaded, the test compiled
nothing), and the import budget judges a test only against a baseline
recorded in a state that loads the same modules.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid

POLICIES = ("cold", "empty", "shared")
DEFAULT = "cold"

CACHE_DIR_ENV = "TORCHINDUCTOR_CACHE_DIR"
#: a tag the graph caches put into every key; the config entry torch reads it into, once imported
CACHE_KEY_TAG_ENV = "TORCH_COMPILE_CACHE_KEY_TAG"
CACHE_KEY_TAG_CONFIG = ("torch.compiler.config", "cache_key_tag")

DESCRIPTIONS = {
    "cold": "every graph lookup misses, kernels cached for this run only: each first call compiles as on a cold "
            "cache",
    "empty": "an empty cache per test: each first call compiles its graph and builds its kernels",
    "shared": "the environment's caches, as a user's process has them: a first call may be served a graph "
              "compiled earlier",
}


def describe(policy: str) -> str:
    return f"{policy} ({DESCRIPTIONS[policy]})"


#: names the run's directory to the processes a run starts (xdist workers, a pytest run inside a test), so one
#: directory serves them all: kernels built once per run
RUN_DIRECTORY_ENV = "PYTEST_NPU_LAZY_INDUCTOR_RUN_DIR"


class RunDirectory:
    """The directory a run gives its isolated tests' caches. The outermost pytest process makes it and removes it
    at the end of its session; the processes it starts find it in their environment and leave it be."""

    def __init__(self, environ=os.environ) -> None:
        inherited = environ.get(RUN_DIRECTORY_ENV)
        self.owned = not (inherited and os.path.isdir(inherited))
        self.path = tempfile.mkdtemp(prefix="npu-lazy-inductor-") if self.owned else inherited
        self._environ = environ
        self._owner = os.getpid()  # a forked zygote or child inherits this object, and must not remove it
        if self.owned:
            environ[RUN_DIRECTORY_ENV] = self.path

    def get(self) -> str:
        return self.path

    def remove(self) -> None:
        if self.owned and os.getpid() == self._owner:
            shutil.rmtree(self.path, ignore_errors=True)
            if self._environ.get(RUN_DIRECTORY_ENV) == self.path:
                del self._environ[RUN_DIRECTORY_ENV]
            self.owned = False


def apply(policy: str, run_directory: str | None, environ=os.environ) -> dict[str, str]:
    """Give this (child) process the policy's caches before its test runs; returns the variables set.

    The variables reach what the test starts (compile workers, subprocesses); a config module the zygote
    already imported read its variable at import, so its entry is set too.
    """
    if policy == "shared":
        return {}
    if not run_directory:
        raise ValueError(f"inductor cache policy {policy!r} needs the run's cache directory")
    os.makedirs(run_directory, exist_ok=True)
    if policy == "empty":
        changes = {CACHE_DIR_ENV: tempfile.mkdtemp(prefix="test-", dir=run_directory)}
    elif policy == "cold":
        changes = {CACHE_DIR_ENV: os.path.join(run_directory, "run"), **cold_key_tag(environ)}
        module_name, attribute = CACHE_KEY_TAG_CONFIG
        if sys.modules.get(module_name) is not None:
            setattr(sys.modules[module_name], attribute, changes[CACHE_KEY_TAG_ENV])
    else:
        raise ValueError(f"unknown inductor cache policy {policy!r}; choose one of {', '.join(POLICIES)}")
    environ.update(changes)
    return changes


def cold_key_tag(environ=os.environ, owner: str = "cold") -> dict[str, str]:
    """The variable that makes every graph-cache lookup of a process miss: a tag of its own in the key (after the
    environment's own tag, if it has one)."""
    own = f"npu-lazy-{owner}-{uuid.uuid4().hex}"
    users = environ.get(CACHE_KEY_TAG_ENV)
    return {CACHE_KEY_TAG_ENV: f"{users}|{own}" if users else own}


# -- the state a test met ------------------------------------------------------
#: (counter group, hit counter, miss counter) of Inductor's FX graph cache and AOTAutograd's cache
_COUNTERS = (("inductor", "fxgraph_cache_hit", "fxgraph_cache_miss"),
             ("aot_autograd", "autograd_cache_hit", "autograd_cache_miss"))
#: (counter group, counter) of graphs AOTAutograd compiled, cache or not (Inductor compiles through it)
_COMPILED = ("aot_autograd", "total")

#: "uncached": graphs compiled with no cache lookup (the graph caches off, as the mutation runner has them); it
#: loads what "cold" loads (test/plugin/test_inductor_cache.py), so the budget compares the two
STATES = ("cold", "warm", "mixed", "uncached")
#: states whose first calls load the same modules
_SAME_LOADS: dict[object, object] = {"uncached": "cold"}  # keyed by states read from JSON (any value)


def snapshot() -> dict[str, int]:
    """The cache counters now; empty while Dynamo has not been imported."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return {}
    taken = {}
    for group, hit, miss in _COUNTERS:
        values = counters.get(group) or {}
        taken[hit], taken[miss] = int(values.get(hit, 0)), int(values.get(miss, 0))
    group, name = _COMPILED
    taken[name] = int((counters.get(group) or {}).get(name, 0))
    return taken


def state(before: dict[str, int], after: dict[str, int]) -> str | None:
    """``cold`` (every lookup missed), ``warm`` (every one hit), ``mixed``, ``uncached`` (graphs compiled with no
    lookup), or None (nothing compiled)."""
    hits = sum(after.get(hit, 0) - before.get(hit, 0) for _, hit, _ in _COUNTERS)
    misses = sum(after.get(miss, 0) - before.get(miss, 0) for _, _, miss in _COUNTERS)
    if hits and misses:
        return "mixed"
    if misses:
        return "cold"
    if hits:
        return "warm"
    name = _COMPILED[1]
    if after.get(name, 0) > before.get(name, 0):
        return "uncached"
    return None


def not_comparable(baseline_state: object, current: str | None) -> str | None:
    """Why a test cannot be judged against its baseline entry, or None when the states match.

    ``baseline_state`` is the entry's ``inductor_cache``, or ``...`` for a baseline
    written before the state was recorded.
    """
    if baseline_state is ...:
        if current is None:
            return None
        return (f"Inductor cache {current} now, not recorded in the baseline (written by an older "
                "pytest-npu-lazy): write it again with --npu-lazy-save-baseline")
    if _SAME_LOADS.get(baseline_state, baseline_state) == _SAME_LOADS.get(current, current):
        return None
    return f"Inductor cache {current or 'unused'} now, {baseline_state or 'unused'} in the baseline"
