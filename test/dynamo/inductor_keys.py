"""What a process's first compiled call keys Inductor's caches with: the evidence that import order leaves no trace.

Inductor serves a compiled graph to any process whose FX graph cache key matches
(torch/_inductor/codecache.py ``compiled_fx_graph_hash``). The key is made of
named parts (the graph, its inputs, Inductor's config, ``torch_key()``, the
system info torch_npu replaces, custom passes...), each hashed on its own: a
process whose imports came in another order must key the same graph with the
same parts, or it misses every entry the others wrote (and writes its own).
Triton's own cache key, ``triton_key()``, hashes the backends Triton can
import; triton-ascend#2232 found it differs with and without torch_npu loaded.

Used by the tests (imported in their isolated child) and by the reference
process they compare with (a code string run by ``run_python``), so both
compile the same function the same way. It imports torch only when called.
"""

from __future__ import annotations

import json
import os
import re
import sys

#: parts of the key that differ between two processes by design: the plugin's cold cache gives each test a tag
PER_PROCESS = ("cache_key_tag",)


def graph(x):
    """The function both processes compile (tensor methods only: it names no module Dynamo would trace an import of)."""
    return x.sin() * 2 + 1


def _parts(debug_lines: list[str]) -> dict[str, list[str]]:
    """``{part: [hash, value as printed]}`` from compiled_fx_graph_hash's debug lines ("[hash] part: value" or
    "[hash] part[k]: value"). Only the hash goes into the key; the value is for people (it may print an address)."""
    parts = {}
    for line in debug_lines:
        match = re.match(r"\[(\w+)\] ([^:]+): ?(.*)", line, re.DOTALL)
        if match and not match.group(2).startswith(PER_PROCESS):
            parts[match.group(2)] = [match.group(1), match.group(3)[:160]]
    return parts


def record_keys(keys: list[dict]):
    """Wrap ``compiled_fx_graph_hash`` so that each key computed from now on is added to ``keys``; returns a
    function that puts the original back."""
    from torch._inductor import codecache

    original = codecache.compiled_fx_graph_hash

    def recording(*args, **kwargs):
        key, debug_lines = original(*args, **kwargs)
        keys.append(_parts(debug_lines))
        return key, debug_lines

    codecache.compiled_fx_graph_hash = recording
    return lambda: setattr(codecache, "compiled_fx_graph_hash", original)


def triton_key() -> str | None:
    """Triton's cache key, or None without Triton (it imports triton)."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        return None
    from triton.compiler.compiler import triton_key as key

    return key()


def first_call_keys(device: str) -> dict:
    """Compile ``graph``, call it once on ``device`` and say what keyed Inductor's graph cache, and Triton's key."""
    import torch

    keys: list[dict] = []
    compiled = torch.compile(graph, backend="inductor")
    restore = record_keys(keys)
    after = None
    try:
        compiled(torch.ones(8).to(device))  # a copy: the reference process may have no operators on the device
    except Exception as exc:
        if not keys:
            raise
        after = f"{type(exc).__name__} after the key was computed: {str(exc).strip()[:300]}"
    finally:
        restore()
    return {"graph": keys[0] if keys else None, "triton_key": triton_key(), "after_key": after}


def differences(mine: dict, reference: dict) -> list[str]:
    """Each part of the keys that differs, in words."""
    said = []
    if mine.get("triton_key") != reference.get("triton_key"):
        ours_, theirs_ = (str(key.get("triton_key")).split("-") for key in (mine, reference))
        first = next((i for i, (a, b) in enumerate(zip(ours_, theirs_)) if a != b), min(len(ours_), len(theirs_)))
        said.append(f"triton_key(): {len(ours_)} parts here, {len(theirs_)} in the reference (the hashes of Triton's "
                    f"files, libtriton and version), first different at part {first}")
    ours, theirs = mine.get("graph") or {}, reference.get("graph") or {}
    for part in sorted(set(ours) | set(theirs)):
        mine_, reference_ = ours.get(part, ["(absent)", ""]), theirs.get(part, ["(absent)", ""])
        if mine_[0] != reference_[0]:
            said.append(f"{part}: [{mine_[0]}] {mine_[1]!r} here, [{reference_[0]}] {reference_[1]!r} in the reference")
    return said


REFERENCE = """
import json, sys
sys.path.insert(0, {directory!r})
import torch
import torch_npu
import inductor_keys
print("KEYS " + json.dumps(inductor_keys.first_call_keys({device!r})))
"""


def reference_keys(device: str, timeout: float = 240) -> dict:
    """The keys of the plain order (``import torch``, then ``import torch_npu``, autoload off), computed in a
    process of its own (run_python: forked from a zygote that imported torch)."""
    from pytest_npu_lazy import run_python

    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    # a tag of its own: with the caller's, the reference would be served the caller's graph from AOTAutograd's
    # cache (the same graph under the same tag) and compute no FX graph key at all
    tag = env.get("TORCH_COMPILE_CACHE_KEY_TAG")
    env["TORCH_COMPILE_CACHE_KEY_TAG"] = f"{tag}|reference-{os.getpid()}" if tag else f"reference-{os.getpid()}"
    code = REFERENCE.format(directory=os.path.dirname(os.path.abspath(__file__)), device=device)
    result = run_python(code, env=env, timeout=timeout, preload=["torch"])
    for line in result.stdout.splitlines():
        if line.startswith("KEYS "):
            keys = json.loads(line[5:])
            if not keys.get("graph"):
                raise AssertionError(f"the reference process computed no FX graph cache key: {keys}")
            return keys
    raise AssertionError(f"the reference process gave no keys (exit {result.returncode}):\n{result.stderr[-3000:]}")


if __name__ == "__main__":  # pragma: no cover - by hand: python inductor_keys.py cpu
    print(json.dumps(first_call_keys(sys.argv[1] if len(sys.argv) > 1 else "cpu"), indent=1))
