"""Whether a test compiled against a cold or a warm Inductor cache, so the budget gate compares like with like.

A first compiled call on a cold cache generates and builds its kernel and
loads about half as many modules again as the same call served from the
cache (torch 2.13 on CPU: 218 against 141). Two runs of one suite, the first
after the cache was cleared, would then get opposite verdicts from the
import budget. So each isolated test records the state its compilations
met, read from torch's own cache counters (never importing anything for
it: without ``torch._dynamo.utils`` loaded, the test compiled nothing), and
the gate judges a test only against a baseline recorded in the same state.
"""

from __future__ import annotations

import sys

#: (counter group, hit counter, miss counter) of Inductor's FX graph cache and AOTAutograd's cache
_COUNTERS = (("inductor", "fxgraph_cache_hit", "fxgraph_cache_miss"),
             ("aot_autograd", "autograd_cache_hit", "autograd_cache_miss"))

STATES = ("cold", "warm", "mixed")


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
    return taken


def state(before: dict[str, int], after: dict[str, int]) -> str | None:
    """``cold`` (every lookup missed), ``warm`` (every one hit), ``mixed``, or None (no lookup: nothing compiled)."""
    hits = sum(after.get(hit, 0) - before.get(hit, 0) for _, hit, _ in _COUNTERS)
    misses = sum(after.get(miss, 0) - before.get(miss, 0) for _, _, miss in _COUNTERS)
    if hits and misses:
        return "mixed"
    if misses:
        return "cold"
    if hits:
        return "warm"
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
    if baseline_state == current:
        return None
    return f"Inductor cache {current or 'unused'} now, {baseline_state or 'unused'} in the baseline"
