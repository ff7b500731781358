"""Whether a test's own marks already skip it, read in the pytest process without running anything.

A test that ``@pytest.mark.skip`` or a true ``skipif`` skips needs no child: pytest's skipping plugin
skips it at setup before any fixture runs, in-process. Starting a child for it would prepare its zygote
first, and a zygote whose preload cannot import (torch_npu under ``--npu-lazy-cann=off`` without CANN,
say) would turn the skip into an error, while costing a fork. Only conditions already evaluated are read:
a ``skipif`` given as a string is evaluated where pytest would evaluate it, in the child, since
evaluating it here could import what the zygotes must not inherit.
"""

from __future__ import annotations

import pytest


def skipped_by_mark(item: pytest.Item) -> bool:
    """True where a ``skip`` mark, or a ``skipif`` whose conditions are all booleans and one is true, applies."""
    if any(True for _ in item.iter_markers(name="skip")):
        return True
    for mark in item.iter_markers(name="skipif"):
        conditions = mark.args if mark.args else ((mark.kwargs["condition"],) if "condition" in mark.kwargs else ())
        if not conditions or any(isinstance(condition, str) for condition in conditions):
            continue  # no condition: pytest's own error; a string: evaluated in the child, as pytest would
        if any(bool(condition) for condition in conditions):
            return True
    return False
